use proptest::prelude::*;

use super::*;
use crate::fake::FakeProfile;
use crate::fake::devices::Inventory;
use crate::gpu::groups::{GpuGroup, Sharing, parse_gpus};
use crate::gpu::{Catalog, GpuProfile};
use crate::registry::Profiles;
use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::device::SliceDevice;

const FILE: &str = "inventory.yaml";
const DRIVER: &str = "drv";

const EXAMPLE: &str = r#"
apiVersion: fake.resource.3-shake.com/v1alpha1
kind: Inventory
models:
- name: X1-48GB
  productName: X1 48GB
  architecture: Blackwell
  memory: 48Gi
  partitions: [{profile: 1g.12gb, slices: 1, memory: 12Gi, count: 4}]
  slices: 4
nodes:
- names: ["gpu-a-*"]
  profile: gpu
  gpus: [{model: A100-80GB, count: 8, sharing: partitioned}]
- names: ["gpu-b-?", "x1-node"]
  gpus: [{model: L4-24GB, count: 4}, {model: X1-48GB, sharing: partitioned}]
- names: ["*"]
  profile: fake
  numDevices: 8
  models: [ULTRA_10]
"#;

/// The flags of the old tests' defaults: 4 fake devices of ULTRA_100, two exclusive H100s.
const FLAGS: &[&str] = &[
    "--num-devices",
    "4",
    "--models",
    "ULTRA_100",
    "--gpus",
    "H100-80GB:2",
];

fn registry() -> Registry {
    crate::registry().unwrap()
}

/// The profiles `--profile profile`, [`FLAGS`], `extra` flags and the file `text` give.
fn profiles_with(
    profile: &str,
    extra: &[&str],
    text: Option<&str>,
) -> Result<Profiles, InventoryError> {
    let registry = registry();
    // FLAGS are the defaults (as the deployed env is), so that a profile no node runs does
    // not see them as given; `extra` is the command line.
    let mut command = registry.augment(clap::Command::new("plugin"));
    for pair in FLAGS.chunks(2) {
        let id = pair[0].trim_start_matches("--").replace('-', "_");
        let value = pair[1];
        command = command.mut_arg(id, |a| a.default_value(value));
    }
    let argv = ["plugin"].iter().chain(extra);
    let matches = command.try_get_matches_from(argv).unwrap();
    let file = text.map(|t| parse(t, FILE, &registry)).transpose()?;
    registry.profiles(&matches, profile, file)
}

fn profiles(profile: &str, text: Option<&str>) -> Profiles {
    profiles_with(profile, &[], text).unwrap()
}

fn group(model: &str, count: usize, sharing: Sharing) -> GpuGroup {
    GpuGroup {
        model: model.into(),
        count,
        sharing,
    }
}

fn fake(node: &str, num_devices: usize, models: &[&str]) -> Vec<SliceDevice> {
    let models: Vec<String> = models.iter().map(|m| (*m).to_owned()).collect();
    FakeProfile::new(Inventory::new(node, num_devices, &models).unwrap(), DRIVER).slice_devices()
}

fn gpus(node: &str, groups: &[GpuGroup], catalog: &Catalog) -> Vec<SliceDevice> {
    GpuProfile::new(node, DRIVER, groups, catalog)
        .unwrap()
        .slice_devices()
}

fn example_catalog() -> Catalog {
    let models = parse(EXAMPLE, FILE, &registry()).unwrap().sections["models"].clone();
    Catalog::with(serde_json::from_value(models).unwrap()).unwrap()
}

/// `node`'s profile name and devices.
fn built(p: &Profiles, node: &str) -> (&'static str, Vec<SliceDevice>) {
    let profile = p.build(node, DRIVER).unwrap();
    (profile.profile_name(), profile.slice_devices())
}

fn build_err(p: &Profiles, node: &str) -> String {
    p.build(node, DRIVER).unwrap_err().to_string()
}

fn file(nodes: &str) -> String {
    format!("apiVersion: {API_VERSION}\nkind: Inventory\nnodes:\n{nodes}")
}

fn parse_err(text: &str) -> String {
    match profiles_with("fake", &[], Some(text)) {
        Ok(_) => panic!("{text} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sharing_modes_parse_and_print() {
    for s in [Sharing::Exclusive, Sharing::Partitioned, Sharing::Shared] {
        assert_eq!(s.to_string().parse::<Sharing>().unwrap(), s);
    }
    assert_eq!(Sharing::default(), Sharing::Exclusive);
}

#[test]
fn the_gpus_flag_gives_groups_with_defaults() {
    assert_eq!(
        parse_gpus("A100-80GB:8:partitioned,L4-24GB:2,H100-80GB").unwrap(),
        [
            group("A100-80GB", 8, Sharing::Partitioned),
            group("L4-24GB", 2, Sharing::Exclusive),
            group("H100-80GB", 1, Sharing::Exclusive),
        ]
    );
    assert_eq!(parse_gpus("").unwrap(), []);
    assert_eq!(
        parse_gpus(" L4-24GB:1:shared ").unwrap()[0].sharing,
        Sharing::Shared
    );
    assert_eq!(
        "L4-24GB:3"
            .parse::<crate::gpu::groups::GpuFlag>()
            .unwrap()
            .0,
        [group("L4-24GB", 3, Sharing::Exclusive)]
    );
}

#[test]
fn the_gpus_flag_names_the_bad_entry() {
    for (flag, wanted) in [
        (
            "A100-80GB:8,,L4",
            "--gpus entry 1 (\"\"): the model is missing",
        ),
        (
            "L4-24GB:0",
            "--gpus entry 0 (\"L4-24GB:0\"): count must be between 1 and 128, got 0",
        ),
        ("L4-24GB:129", "count must be between 1 and 128, got 129"),
        ("L4-24GB:two", "count \"two\" is not a whole number"),
        ("L4-24GB:-1", "count \"-1\" is not a whole number"),
        (
            "L4-24GB:1:mig",
            "sharing \"mig\" is unknown; use one of exclusive, partitioned, shared",
        ),
        (
            "L4-24GB:1:shared:x",
            "unexpected \"x\" after the sharing mode",
        ),
        (":2", "the model is missing"),
    ] {
        let err = parse_gpus(flag).unwrap_err().to_string();
        assert!(err.contains(wanted), "{flag}: {err}");
        assert!(err.contains("MODEL[:COUNT[:SHARING]]"), "{err}");
    }
}

#[test]
fn a_file_parses_in_yaml_and_json_alike() {
    let yaml = parse(EXAMPLE, FILE, &registry()).unwrap();
    assert_eq!(yaml.source, FILE);
    assert_eq!(yaml.nodes.len(), 3);
    assert!(yaml.sections.contains_key("models"));
    assert_eq!(yaml.nodes[1].profile, None);
    assert!(yaml.nodes[1].fields.contains_key("gpus"));
    let value: serde_json::Value = serde_yaml_ng::from_str(EXAMPLE).unwrap();
    let json = parse(&value.to_string(), FILE, &registry()).unwrap();
    assert_eq!(json, yaml);
    // The file's models reach the gpu profile; a count left out is 1.
    let p = profiles("gpu", Some(EXAMPLE));
    assert_eq!(
        built(&p, "x1-node"),
        (
            "gpu",
            gpus(
                "x1-node",
                &[
                    group("L4-24GB", 4, Sharing::Exclusive),
                    group("X1-48GB", 1, Sharing::Partitioned)
                ],
                &example_catalog()
            )
        )
    );
}

#[test]
fn the_header_and_unknown_fields_are_checked() {
    let err = parse_err("apiVersion: v1\nkind: Inventory\n");
    assert_eq!(
        err,
        "inventory file inventory.yaml: apiVersion must be \"fake.resource.3-shake.com/v1alpha1\", got \"v1\""
    );
    let err = parse_err(&format!("apiVersion: {API_VERSION}\nkind: ConfigMap\n"));
    assert!(
        err.contains("kind must be \"Inventory\", got \"ConfigMap\""),
        "{err}"
    );
    for (text, field) in [
        (
            format!("apiVersion: {API_VERSION}\nkind: Inventory\nnode: []\n"),
            "node",
        ),
        (file("- names: [a]\n  numDevice: 3\n"), "numDevice"),
        (
            file("- names: [a]\n  gpus: [{model: L4-24GB, cnt: 3}]\n"),
            "cnt",
        ),
    ] {
        let err = parse_err(&text);
        assert!(err.starts_with("inventory file inventory.yaml: "), "{err}");
        assert!(err.contains(&format!("unknown field `{field}`")), "{err}");
    }
    // What an unknown field is told: every field, with its profile.
    assert_eq!(
        parse_err(&file("- names: [a]\n  numDevice: 3\n")),
        "inventory file inventory.yaml: nodes[0]: unknown field `numDevice`; the fields are names, profile, numDevices, models (fake profile), gpus (gpu profile), nvidiaGpus (nvidia profile)"
    );
    assert_eq!(
        parse_err(&file("- names: [a]\n  profile: tpu\n")),
        "inventory file inventory.yaml: nodes[0]: profile \"tpu\" is not a profile; the profiles are fake, gpu, nvidia"
    );
    assert!(parse_err("").contains("inventory file inventory.yaml"));
}

#[test]
fn models_that_do_not_add_up_are_refused_naming_the_file() {
    let text = EXAMPLE.replace("count: 4}", "count: 5}");
    let err = parse_err(&text);
    assert!(
        err.starts_with(
            "inventory file inventory.yaml: models: GPU model \"X1-48GB\": partitions[0].count"
        ),
        "{err}"
    );
    let err = parse_err(&EXAMPLE.replace("name: X1-48GB", "name: L4-24GB"));
    assert!(
        err.contains("models: GPU model \"L4-24GB\" is defined twice"),
        "{err}"
    );
}

#[test]
fn entries_are_checked_naming_their_index() {
    let cases = [
        (
            "- names: [a]\n- names: [b]\n  profile: fake\n  gpus: [{model: L4-24GB}]\n",
            "nodes[1]: gives gpus, a field of the gpu profile, but its profile is fake; set profile: gpu or drop gpus",
        ),
        (
            "- names: [a]\n  profile: gpu\n  numDevices: 2\n",
            "nodes[0]: gives numDevices, a field of the fake profile, but its profile is gpu",
        ),
        (
            "- names: [a]\n  models: [M]\n  gpus: [{model: L4-24GB}]\n",
            "nodes[0]: gives gpus (gpu profile) and models (fake profile); a node runs one profile",
        ),
        (
            "- names: [a]\n  gpus: [{model: B200, count: 2}]\n",
            "nodes[0]: gpus: GPU group 0 (B200:2:exclusive): model \"B200\" is not in the catalog; known models: A100-80GB, H100-80GB, L4-24GB",
        ),
        (
            "- names: [a]\n  gpus: [{model: L4-24GB, count: 0}]\n",
            "count must be at least 1",
        ),
        (
            "- names: [a]\n  gpus: [{model: L4-24GB, count: 100}, {model: A100-80GB, count: 29}]\n",
            "nodes[0]: gpus: the node has 129 GPUs; at most 128 per node",
        ),
        (
            "- names: [a]\n  gpus: [{model: L4-24GB, sharing: partitioned}]\n",
            "model \"L4-24GB\" has no partitions",
        ),
        ("- names: [a]\n  gpus: []\n", "nodes[0]: gpus lists no GPUs"),
        (
            "- names: [a]\n  numDevices: 0\n",
            "numDevices must be between 1 and 128, got 0",
        ),
        ("- names: [a]\n  numDevices: 129\n", "got 129"),
        (
            "- names: [a]\n  models: []\n",
            "models must name at least one model",
        ),
        (
            "- names: [a]\n  models: [\"a b\"]\n",
            "models[0] \"a b\" may only contain",
        ),
        (
            "- names: []\n",
            "nodes[0]: names must list at least one node name pattern",
        ),
        ("- names: [\"\"]\n", "names[0] \"\" is empty"),
        (
            "- names: [a, \"Gpu-*\"]\n",
            "names[1] \"Gpu-*\" has 'G'; patterns are node name characters",
        ),
        ("- names: [\"gpu-[ab]\"]\n", "has '['"),
    ];
    for (nodes, wanted) in cases {
        let err = parse_err(&file(nodes));
        assert!(
            err.starts_with("inventory file inventory.yaml: nodes["),
            "{err}"
        );
        assert!(err.contains(wanted), "{nodes}\n{err}\nlacks {wanted}");
    }
    let long = format!("- names: [\"{}\"]\n", "a".repeat(254));
    assert!(parse_err(&file(&long)).contains("is 254 characters; at most 253"));
}

/// D31: a 10 KB pattern was echoed whole in the error; it is cut to its start.
#[test]
fn a_long_pattern_is_shown_by_its_start() {
    let huge = format!("- names: [\"{}\"]\n", "a".repeat(10_000));
    let err = parse_err(&file(&huge));
    assert_eq!(
        err,
        format!(
            "inventory file inventory.yaml: nodes[0]: names[0] \"{}\"... is 10000 characters; at most 253",
            "a".repeat(64)
        )
    );
    let bad = format!("- names: [\"{}X\"]\n", "b".repeat(200));
    let err = parse_err(&file(&bad));
    assert!(err.len() < 300, "{err}");
    assert!(err.ends_with("... has 'X'; patterns are node name characters (lowercase letters, digits, '-', '.') and the wildcards '*' and '?'"), "{err}");
}

/// D32: `--profile fake --gpus …` ignored `--gpus` without a word, and `--profile gpu
/// --nvidia-gpus …` said only "--gpus lists no GPUs". A flag of a profile no node runs is
/// refused naming its profile; one an inventory entry of its profile uses is taken.
#[test]
fn flags_of_a_profile_no_node_runs_are_refused_naming_it() {
    let err = profiles_with("fake", &["--gpus", "A100-80GB:1"], None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "--gpus (FAKE_DRA_GPUS) is a flag of the gpu profile, but --profile (FAKE_DRA_PROFILE) is fake: use --profile gpu, or drop --gpus"
    );
    let err = profiles_with("gpu", &["--nvidia-gpus", "A100-40GB:1"], None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("--nvidia-gpus (FAKE_DRA_NVIDIA_GPUS) is a flag of the nvidia profile, but --profile (FAKE_DRA_PROFILE) is gpu"),
        "{err}"
    );
    let err = profiles_with(
        "gpu",
        &["--num-devices", "3"],
        Some(&file("- names: [a]\n")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("is gpu and no inventory entry uses the fake profile: use --profile fake, or drop --num-devices"),
        "{err}"
    );
    // An entry of the fake profile takes --num-devices for what it leaves out.
    let p = profiles_with(
        "gpu",
        &["--num-devices", "3", "--gpus", "L4-24GB:1"],
        Some(&file("- names: [f-*]\n  profile: fake\n")),
    )
    .unwrap();
    assert_eq!(built(&p, "f-1").1.len(), 3);
}

/// D24: a key given twice was last-wins (`numDevices: 2` then `numDevices: 64`: the
/// node got 64 without a word); refused naming the key and its line.
#[test]
fn a_key_given_twice_is_refused_naming_it_and_its_line() {
    let err = parse_err(&file("- names: [a]\n  numDevices: 2\n  numDevices: 64\n"));
    assert_eq!(
        err,
        "inventory file inventory.yaml: line 6: key \"numDevices\" already set in map (in nodes[0]): a key may be given once per mapping; remove one of them"
    );
    let top = format!("{}nodes: []\n", file("- names: [a]\n"));
    assert!(
        parse_err(&top).contains("line 5: key \"nodes\" already set in map: "),
        "{}",
        parse_err(&top)
    );
    let json = format!(
        "{{\"apiVersion\": \"{API_VERSION}\", \"kind\": \"Inventory\", \"kind\": \"Inventory\"}}"
    );
    assert!(
        parse_err(&json).contains("key \"kind\" already set in map"),
        "{}",
        parse_err(&json)
    );
}

#[test]
fn the_first_matching_entry_wins_and_flags_fill_the_rest() {
    let p = profiles("gpu", Some(EXAMPLE));
    let partitioned_a100 = [group("A100-80GB", 8, Sharing::Partitioned)];
    assert_eq!(
        built(&p, "gpu-a-17"),
        (
            "gpu",
            gpus("gpu-a-17", &partitioned_a100, &example_catalog())
        )
    );
    // No profile in the entry: --profile's.
    assert_eq!(built(&p, "x1-node").0, "gpu");
    assert_eq!(
        built(&p, "cpu-1"),
        ("fake", fake("cpu-1", 8, &["ULTRA_10"]))
    );
    // An entry that leaves fields out takes them from the flags.
    let text = file(
        "- names: [\"n*\"]\n  profile: fake\n  numDevices: 2\n- names: [\"g*\"]\n  profile: gpu\n",
    );
    let p = profiles("gpu", Some(&text));
    assert_eq!(built(&p, "n1"), ("fake", fake("n1", 2, &["ULTRA_100"])));
    let p = profiles("fake", Some(&text));
    assert_eq!(
        built(&p, "g1"),
        (
            "gpu",
            gpus(
                "g1",
                &[group("H100-80GB", 2, Sharing::Exclusive)],
                &Catalog::builtin()
            )
        )
    );
}

#[test]
fn a_node_no_entry_matches_gets_the_flags() {
    let text = file("- names: [\"gpu-*\"]\n  gpus: [{model: L4-24GB}]\n");
    let expected = ("fake", fake("cpu-1", 4, &["ULTRA_100"]));
    assert_eq!(built(&profiles("fake", Some(&text)), "cpu-1"), expected);
    assert_eq!(
        built(&profiles("fake", None), "gpu-1"),
        ("fake", fake("gpu-1", 4, &["ULTRA_100"]))
    );
    assert_eq!(
        built(&profiles("gpu", None), "n"),
        (
            "gpu",
            gpus(
                "n",
                &[group("H100-80GB", 2, Sharing::Exclusive)],
                &Catalog::builtin()
            )
        )
    );
    // The file's models serve the flags too.
    let models_only = EXAMPLE[..EXAMPLE.find("nodes:").unwrap()].to_owned();
    let x1 = ["--gpus", "X1-48GB:1:partitioned"];
    let p = profiles_with("gpu", &x1, Some(&models_only)).unwrap();
    assert!(p.build("n", DRIVER).is_ok());
    let p = profiles_with("gpu", &x1, None).unwrap();
    assert!(p.build("n", DRIVER).is_err());
}

#[test]
fn what_resolves_is_checked_against_the_flags_too() {
    // An entry without a profile giving gpus, on a node whose --profile is fake.
    let text = file("- names: [a]\n- names: [\"g*\"]\n  gpus: [{model: L4-24GB}]\n");
    let p = profiles("fake", Some(&text));
    assert_eq!(
        build_err(&p, "g1"),
        "inventory file inventory.yaml: nodes[1]: (matching node \"g1\") gives gpus, a field of the gpu profile, but its profile (from --profile) is fake; set profile: gpu or drop gpus"
    );
    let p = profiles_with("gpu", &["--gpus", ""], None).unwrap();
    assert_eq!(
        build_err(&p, "n1"),
        "node \"n1\": --gpus lists no GPUs; the gpu profile needs at least one"
    );
    let p = profiles_with("gpu", &["--gpus", "B200"], None).unwrap();
    let err = build_err(&p, "n1");
    assert!(err.starts_with("node \"n1\": --gpus: GPU group 0 (B200:1:exclusive): model \"B200\" is not in the catalog"), "{err}");
    let p = profiles_with("fake", &["--num-devices", "0"], None).unwrap();
    assert_eq!(
        build_err(&p, "n1"),
        "node \"n1\": --num-devices (FAKE_DRA_NUM_DEVICES) must be between 1 and 128, got 0: a node publishes its devices in one ResourceSlice (or NodeAllocationState) of at most 128"
    );
    let p = profiles_with("fake", &["--models", ""], Some(&text)).unwrap();
    let err = build_err(&p, "a");
    assert!(
        err.contains("nodes[0]: (matching node \"a\") --models[")
            && err.ends_with("\"\" must not be empty"),
        "{err}"
    );
    assert!(matches!(
        p.build("", DRIVER),
        Err(InventoryError::NoNodeName)
    ));
}

#[test]
fn check_refuses_at_start_what_no_node_could_use() {
    // Fleet mode checks before it creates a node: the flags of --profile...
    for (profile, flags, wanted) in [
        (
            "gpu",
            &["--gpus", "NOPE:1"][..],
            "gpu profile: --gpus: GPU group 0 (NOPE:1:exclusive): model \"NOPE\" is not in the catalog; known models: A100-80GB, H100-80GB, L4-24GB",
        ),
        (
            "fake",
            &["--num-devices", "0"][..],
            "fake profile: --num-devices (FAKE_DRA_NUM_DEVICES) must be between 1 and 128, got 0: a node publishes its devices in one ResourceSlice (or NodeAllocationState) of at most 128",
        ),
        (
            "gpu",
            &["--gpus", "A100-80GB:128:partitioned,L4-24GB"][..],
            "gpu profile: --gpus: the node has 129 GPUs; at most 128 per node",
        ),
    ] {
        let p = profiles_with(profile, flags, None).unwrap();
        assert_eq!(p.check(DRIVER).unwrap_err().to_string(), wanted);
    }
    // ... and each entry with the flags it takes.
    let text = file("- names: [\"g*\"]\n  profile: gpu\n");
    let p = profiles_with("fake", &["--gpus", ""], Some(&text)).unwrap();
    assert_eq!(
        p.check(DRIVER).unwrap_err().to_string(),
        "inventory file inventory.yaml: nodes[0]: --gpus lists no GPUs; the gpu profile needs at least one"
    );
    // Flags that only a node no entry matches would use are not needed when "*" matches
    // every node.
    let text = file("- names: [\"*\"]\n  profile: fake\n");
    let p = profiles_with("gpu", &["--gpus", ""], Some(&text)).unwrap();
    p.check(DRIVER).unwrap();
    profiles("gpu", Some(EXAMPLE)).check(DRIVER).unwrap();
    // An entry without a profile giving gpus cannot be built under --profile fake.
    let err = profiles("fake", Some(EXAMPLE)).check(DRIVER).unwrap_err();
    assert_eq!(
        err.to_string(),
        "inventory file inventory.yaml: nodes[1]: gives gpus, a field of the gpu profile, but its profile (from --profile) is fake; set profile: gpu or drop gpus"
    );
}

#[test]
fn more_devices_than_a_slice_holds_resolve_but_more_than_a_node_can_publish_do_not() {
    // 16 partitioned A100s are 208 devices: more than one ResourceSlice holds, so the
    // plumbing packs several.
    let text = file(
        "- names: [big]\n  gpus: [{model: A100-80GB, count: 16, sharing: partitioned}]\n- names: [huge]\n  gpus: [{model: L4-24GB, count: 128}]\n",
    );
    let p = profiles("gpu", Some(&text));
    assert_eq!(built(&p, "big").1.len(), 208);
    assert!(p.build("huge", DRIVER).is_ok());
    // One GPU more than a node may have.
    let err = parse_err(&file(
        "- names: [over]\n  gpus: [{model: L4-24GB, count: 128}, {model: L4-24GB}]\n",
    ));
    assert!(
        err.contains("the node has 129 GPUs; at most 128 per node"),
        "{err}"
    );
    let p = profiles_with("gpu", &["--gpus", "L4-24GB:100,L4-24GB:100"], None).unwrap();
    let err = build_err(&p, "n");
    assert!(
        err.contains("--gpus: the node has 200 GPUs; at most 128"),
        "{err}"
    );
    let p = profiles_with("fake", &["--num-devices", "129"], None).unwrap();
    assert!(p.build("n", DRIVER).is_err());
}

#[test]
fn globs_match_with_star_and_question_mark() {
    for (pattern, name, expected) in [
        ("*", "anything", true),
        ("*", "", true),
        ("gpu-*", "gpu-a-1", true),
        ("gpu-*", "cpu-1", false),
        ("gpu-?", "gpu-1", true),
        ("gpu-?", "gpu-12", false),
        ("*-a-*", "gpu-a-7", true),
        ("*a*b*", "xaxxbx", true),
        ("*a*b", "xaxxbx", false),
        ("exact", "exact", true),
        ("exact", "exacter", false),
        ("??", "a", false),
    ] {
        assert_eq!(glob_matches(pattern, name), expected, "{pattern} {name}");
    }
}

#[test]
fn load_reads_the_file_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.yaml");
    std::fs::write(&path, EXAMPLE).unwrap();
    let f = load(&path, &registry()).unwrap();
    assert_eq!(f.source, path.display().to_string());
    let missing = dir.path().join("missing.yaml");
    let err = load(&missing, &registry()).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("--inventory '{}': ", missing.display())),
        "{err}"
    );
    std::fs::write(&path, format!("{EXAMPLE}\n#{}", "x".repeat(1 << 20))).unwrap();
    let err = load(&path, &registry()).unwrap_err().to_string();
    assert!(
        err.ends_with("is larger than 1048576 bytes, the limit"),
        "{err}"
    );
    std::fs::write(&path, "apiVersion: [").unwrap();
    let err = load(&path, &registry()).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("inventory file {}: ", path.display())),
        "{err}"
    );
}

#[test]
fn the_documented_file_and_flags_work() {
    let doc = include_str!("../../../docs/profiles.md");
    let start = doc
        .find("```yaml\napiVersion: fake.resource.3-shake.com/v1alpha1")
        .unwrap();
    let text = &doc[start + "```yaml\n".len()..];
    let text = &text[..text.find("```").unwrap()];
    let registry = registry();
    let f = parse(text, "docs/profiles.md", &registry).unwrap();
    let p = profiles("fake", Some(text));
    let gpu_count = |node: &str| {
        let profile = p.build(node, DRIVER).unwrap();
        match profile.profile_name() {
            "gpu" => profile
                .slice_devices()
                .iter()
                .filter(|d| {
                    // Whole GPUs are gpu-<n>; partitions gpu-<n>-<profile>-<k>.
                    d.name
                        .strip_prefix("gpu-")
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count(),
            _ => 0,
        }
    };
    assert!(!f.nodes.is_empty());
    assert_eq!(gpu_count("train-7"), 8);
    assert_eq!(gpu_count("infer-1"), 4);
    assert_eq!(gpu_count("edge-a"), 4);
    assert_eq!(gpu_count("lab-1"), 1);
    assert_eq!(gpu_count("edge-10"), 0, "? is one character");
    for line in doc.lines().filter(|l| l.starts_with("--gpus ")) {
        let flag = line["--gpus ".len()..].split_whitespace().next().unwrap();
        let p = profiles_with("gpu", &["--gpus", flag], None).unwrap();
        p.build("n", DRIVER).unwrap();
    }
}

/// A plain recursive matcher to hold the real one to.
fn reference(p: &[char], n: &[char]) -> bool {
    match p.split_first() {
        None => n.is_empty(),
        Some(('*', rest)) => (0..=n.len()).any(|i| reference(rest, &n[i..])),
        Some((&c, rest)) => n
            .split_first()
            .is_some_and(|(&m, tail)| (c == '?' || c == m) && reference(rest, tail)),
    }
}

fn sharing() -> impl Strategy<Value = Sharing> {
    prop_oneof![
        Just(Sharing::Exclusive),
        Just(Sharing::Partitioned),
        Just(Sharing::Shared)
    ]
}

proptest! {
    #[test]
    fn glob_matching_agrees_with_the_reference(pattern in "[ab*?]{0,8}", name in "[ab]{0,8}") {
        let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
        prop_assert_eq!(glob_matches(&pattern, &name), reference(&p, &n));
    }

    #[test]
    fn the_gpus_flag_reads_back_what_groups_print(
        groups in proptest::collection::vec(("[A-Z][A-Z0-9-]{0,10}", 1usize..=128, sharing()), 1..5),
    ) {
        let groups: Vec<GpuGroup> = groups.into_iter().map(|(m, c, s)| group(&m, c, s)).collect();
        let flag = groups.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        prop_assert_eq!(parse_gpus(&flag).unwrap(), groups);
    }

    #[test]
    fn parsing_never_panics(text in "\\PC{0,200}") {
        let _ = parse(&text, FILE, &registry());
        let _ = parse_gpus(&text);
    }
}

/// Found by fuzzing (`fuzz::plugin_inventory_files`): serde's type error quoted a
/// 20,000-character string of the file whole. The reason keeps both ends: what the field
/// is and what was expected.
#[test]
fn a_type_error_quoting_a_long_value_is_bounded() {
    let text = format!(
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: Inventory\nnodes:\n- {}\n",
        "x".repeat(20_000)
    );
    let message = parse(&text, FILE, &registry()).unwrap_err().to_string();
    assert!(
        message.chars().count() < 1200,
        "{} characters",
        message.len()
    );
    assert!(
        message.starts_with("inventory file inventory.yaml: nodes[0]: invalid type"),
        "{message}"
    );
    assert!(message.contains("characters left out"), "{message}");
}
