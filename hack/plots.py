#!/usr/bin/env python3
"""Draws the plots of docs/performance.md from its own tables, as SVG (no dependencies).

    python3 hack/plots.py           # writes docs/plots/*.svg
    python3 hack/plots.py --check   # exits 1, naming the file, if one differs (CI)

Each plot reads named rows of a table in docs/performance.md, so a plot cannot drift from
the numbers: when a row it reads is renamed or removed, the script says which and fails.
"""

import html
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "docs" / "performance.md"
OUT = ROOT / "docs" / "plots"

UNITS = {"µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


class PlotError(Exception):
    pass


def rows(text):
    """Every table row of the document, as lists of cells (bold marks removed)."""
    out = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
            out.append(cells)
    return out


def row(table, *prefixes):
    """The one row whose first cells start with `prefixes`."""
    found = [
        r for r in table
        if len(r) >= len(prefixes) and all(r[i].startswith(p) for i, p in enumerate(prefixes))
    ]
    if len(found) != 1:
        raise PlotError(f"{SOURCE.name}: expected one table row starting {prefixes!r}, found {len(found)}")
    return found[0]


def millis(cell):
    """`1.25 ms`, `123 µs`, `7.9 s`, `all slices present after 7.9 s` -> milliseconds."""
    m = re.search(r"([\d.,]+)\s*(µs|us|ms|s)\b", cell)
    if not m:
        raise PlotError(f"{SOURCE.name}: no duration in {cell!r}")
    return float(m.group(1).replace(",", "")) * UNITS[m.group(2)]


def seconds_cell(cell):
    m = re.search(r"([\d.,]+)\s*s\b", cell)
    if not m:
        raise PlotError(f"{SOURCE.name}: no time in seconds in {cell!r}")
    return float(m.group(1).replace(",", ""))


def bars(title, unit, groups, note):
    """Horizontal bars: groups of (label, [(series, value)]), one colour per series."""
    colours = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    series = []
    for _, values in groups:
        for name, _ in values:
            if name not in series:
                series.append(name)
    biggest = max(v for _, values in groups for _, v in values)
    left, width, bar, gap = 250, 440, 16, 14
    height = 70 + sum(len(v) * bar + gap for _, v in groups) + 24 * len(series) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="760" height="{height}" viewBox="0 0 760 {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
        f"  <title>{html.escape(title)}</title>",
        f'  <rect width="760" height="{height}" fill="#ffffff"/>',
        f'  <text x="20" y="28" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    y = 50
    for label, values in groups:
        out.append(f'  <text x="{left - 10}" y="{y + bar * len(values) / 2 + 4:.0f}" text-anchor="end">{html.escape(label)}</text>')
        for name, value in values:
            w = max(1.0, width * value / biggest)
            colour = colours[series.index(name) % len(colours)]
            out.append(f'  <rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" fill="{colour}"/>')
            out.append(f'  <text x="{left + w + 6:.1f}" y="{y + bar - 5}">{value:g} {unit}</text>')
            y += bar
        y += gap
    y += 10
    for i, name in enumerate(series):
        colour = colours[i % len(colours)]
        out.append(f'  <rect x="{left}" y="{y - 10}" width="12" height="12" fill="{colour}"/>')
        out.append(f'  <text x="{left + 18}" y="{y}">{html.escape(name)}</text>')
        y += 20
    out.append(f'  <text x="20" y="{y + 8}" fill="#555" font-size="11">{html.escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def plots(text):
    table = rows(text)
    prepare = bars(
        "Kubelet plugin: a prepare against its floor (structured DRA, v1)",
        "ms",
        [
            ("empty gRPC call (floor)", [("median", millis(row(table, "floor: empty gRPC call (health check) on the DRA socket", "227")[1]))]),
            ("prepare 1 claim, 4 devices split 2", [("median", millis(row(table, "`NodePrepareResources` (v1), 1 claim")[1]))]),
            ("prepare a batch of 100 claims", [("median", millis(row(table, "`NodePrepareResources` (v1), batch of 100")[1]))]),
        ],
        "docs/performance.md, 'Kubelet plugin, structured DRA': cargo bench -p fake-dra-kubelet-plugin --bench structured",
    )
    fleet_groups = []
    for nodes in ("1,000", "5,000"):
        r = row(table, "publish", f"{nodes} nodes")
        fleet_groups.append((f"{nodes} nodes × 8 devices", [
            ("every slice published", seconds_cell(r[2])),
            ("floor: the bare Nodes created", seconds_cell(r[3])),
        ]))
    fleet = bars(
        "Fleet mode: time until every node's slice is in kube-apiserver 1.37.2",
        "s",
        fleet_groups,
        "docs/performance.md, 'Fleet mode and kube-scheduler at scale': hack/fleet-bench.sh",
    )
    volume_groups = []
    for count in ("1,000", "10,000", "100,000"):
        r = row(table, count)
        volume_groups.append((f"{count} ConfigMaps", [("run -f … --wait, wall time", seconds_cell(r[2]))]))
    volume = bars(
        "The emulator under volume: applying N objects with fake-dra-sim",
        "s",
        volume_groups,
        "docs/performance.md, 'The emulator under volume': /usr/bin/time -v fake-dra-sim run -f cmN.yaml --wait",
    )
    return {"prepare.svg": prepare, "fleet-publish.svg": fleet, "emulator-volume.svg": volume}


def main(argv):
    check = "--check" in argv
    try:
        drawn = plots(SOURCE.read_text(encoding="utf-8"))
    except PlotError as error:
        print(f"plots: {error}", file=sys.stderr)
        return 1
    stale = []
    OUT.mkdir(exist_ok=True)
    for name, svg in drawn.items():
        path = OUT / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == svg:
            continue
        if check:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(svg, encoding="utf-8")
            print(f"plots: wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"plots: {', '.join(stale)} differ from docs/performance.md's tables: run python3 hack/plots.py", file=sys.stderr)
        return 1
    print(f"plots: {len(drawn)} plots match docs/performance.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
