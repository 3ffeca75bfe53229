//! `--nvidia-gpus` and an inventory entry's `nvidiaGpus`, read as the plugin reads them:
//! what they build, and their errors naming the flag or the entry.

use super::*;
use crate::inventory::{InventoryError, parse};
use crate::registry::Profiles;

const FILE: &str = "inventory.yaml";

fn profiles(flags: &[&str], text: Option<&str>) -> Result<Profiles, InventoryError> {
    let registry = crate::registry().unwrap();
    let command = registry.augment(clap::Command::new("plugin"));
    let argv = ["plugin"].iter().chain(flags);
    let matches = command.try_get_matches_from(argv).unwrap();
    let file = text.map(|t| parse(t, FILE, &registry)).transpose()?;
    registry.profiles(&matches, "nvidia", file)
}

/// What `profiles` and then `check` (what the plugin does at start) say.
fn start_error(flags: &[&str], text: Option<&str>) -> String {
    match profiles(flags, text) {
        Err(e) => e.to_string(),
        Ok(p) => p.check(DRIVER).unwrap_err().to_string(),
    }
}

fn file(entry: &str) -> String {
    format!(
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: Inventory\nnodes:\n- names: [\"*\"]\n{entry}"
    )
}

#[test]
fn the_flag_and_an_entry_build_the_nodes_gpus() {
    let p = profiles(&["--nvidia-gpus", "A100-40GB:2:mig,L4"], None).unwrap();
    p.check(DRIVER).unwrap();
    let node = p.build(NODE, DRIVER).unwrap();
    assert_eq!(node.profile_name(), "nvidia");
    assert_eq!(node.slice_devices().len(), 2 * 26 + 1);
    assert_eq!(node.counter_sets().len(), 2);

    let text = file(
        "  profile: nvidia\n  nvidiaGpus: [{model: H100-80GB, count: 2, mig: [7g.80gb]}, {model: L4}]\n",
    );
    let p = profiles(&[], Some(&text)).unwrap();
    p.check(DRIVER).unwrap();
    let names: Vec<String> = p
        .build(NODE, DRIVER)
        .unwrap()
        .slice_devices()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(
        names,
        [
            "gpu-0",
            "gpu-0-mig-7g80gb-0-0",
            "gpu-1",
            "gpu-1-mig-7g80gb-0-0",
            "gpu-2"
        ]
    );
}

#[test]
fn bad_flags_and_entries_are_refused_naming_the_field() {
    assert_eq!(
        start_error(&["--nvidia-gpus", "B200:1"], None),
        "nvidia profile: --nvidia-gpus entry 0 (B200:1): model \"B200\" is not an NVIDIA model of the nvidia profile; the models are A100-40GB, A100-80GB, H100-80GB, L4"
    );
    assert_eq!(
        start_error(&["--nvidia-gpus", "A100-80GB:1,L4:1:mig"], None),
        "nvidia profile: --nvidia-gpus entry 1 (L4:1:mig): model \"L4\" has no MIG; the models with MIG are A100-40GB, A100-80GB, H100-80GB"
    );
    assert_eq!(
        start_error(&["--nvidia-gpus", "A100-40GB:100,L4:29"], None),
        "nvidia profile: the node has 129 NVIDIA GPUs; at most 128 per node"
    );
    assert_eq!(
        start_error(&[], None),
        "nvidia profile: --nvidia-gpus lists no GPUs; the nvidia profile needs at least one"
    );
    let entry = |e: &str| start_error(&["--nvidia-gpus", "L4"], Some(&file(e)));
    assert_eq!(
        entry("  nvidiaGpus: [{model: A100-40GB, mig: [2g.20gb]}]\n"),
        "inventory file inventory.yaml: nodes[0]: nvidiaGpus[0] (A100-40GB:1:mig=2g.20gb): MIG profile \"2g.20gb\" is not one of A100-40GB's; its MIG profiles are 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    );
    assert_eq!(
        entry("  nvidiaGpus: [{model: L4, count: 0}]\n"),
        "inventory file inventory.yaml: nodes[0]: nvidiaGpus[0] (L4:0): count must be at least 1"
    );
    assert_eq!(
        entry("  nvidiaGpus: []\n"),
        "inventory file inventory.yaml: nodes[0]: nvidiaGpus lists no GPUs; the nvidia profile needs at least one"
    );
    assert!(
        entry("  nvidiaGpus: [{model: L4, sharing: shared}]\n").contains("unknown field `sharing`")
    );
    // The gpu profile's field is not the nvidia profile's.
    assert_eq!(
        entry("  profile: nvidia\n  gpus: [{model: L4-24GB}]\n"),
        "inventory file inventory.yaml: nodes[0]: gives gpus, a field of the gpu profile, but its profile is nvidia; set profile: gpu or drop gpus"
    );
}

#[test]
fn the_documented_flags_and_entries_work() {
    let doc = include_str!("../../../../docs/profiles.md");
    let section = &doc[doc.find("\n## nvidia\n").unwrap()..];
    // The flag examples: `--nvidia-gpus VALUE   # comment`.
    let flags: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("--nvidia-gpus "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(flags.len(), 3, "{flags:?}");
    let devices = |flag: &str| {
        let p = profiles(&["--nvidia-gpus", flag], None).unwrap();
        p.check(DRIVER).unwrap();
        p.build(NODE, DRIVER).unwrap().slice_devices().len()
    };
    assert_eq!(devices(flags[0]), 8 * 26, "{}", flags[0]);
    assert_eq!(devices(flags[1]), 4 * (1 + 7 + 2) + 2, "{}", flags[1]);
    assert_eq!(devices(flags[2]), 4, "{}", flags[2]);
    // The inventory entries.
    let start = section.find("```yaml\nnodes:").unwrap() + "```yaml\n".len();
    let nodes = &section[start..];
    let nodes = &nodes[..nodes.find("```").unwrap()];
    let text = format!("apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: Inventory\n{nodes}");
    let p = profiles(&[], Some(&text)).unwrap();
    let count = |node: &str| p.build(node, DRIVER).unwrap().slice_devices().len();
    assert_eq!(count("dgx-1"), 8 * 26);
    assert_eq!(count("infer-3"), 2 * (1 + 7 + 2) + 2);
}
