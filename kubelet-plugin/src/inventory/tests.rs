use proptest::prelude::*;

use super::*;

const FILE: &str = "inventory.yaml";

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

fn defaults(profile: ProfileKind) -> Defaults {
    Defaults {
        profile,
        num_devices: 4,
        models: vec!["ULTRA_100".into()],
        gpus: vec![group("H100-80GB", 2, Sharing::Exclusive)],
    }
}

fn group(model: &str, count: usize, sharing: Sharing) -> GpuGroup {
    GpuGroup {
        model: model.into(),
        count,
        sharing,
    }
}

fn file(nodes: &str) -> String {
    format!("apiVersion: {API_VERSION}\nkind: Inventory\nnodes:\n{nodes}")
}

fn parse_err(text: &str) -> String {
    parse(text, FILE).unwrap_err().to_string()
}

#[test]
fn profile_kinds_parse_and_print() {
    for kind in [ProfileKind::Fake, ProfileKind::Gpu] {
        assert_eq!(kind.to_string().parse::<ProfileKind>().unwrap(), kind);
    }
    assert_eq!(
        "GPU".parse::<ProfileKind>().unwrap_err().to_string(),
        "unknown profile \"GPU\"; the profiles are fake and gpu"
    );
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
        "L4-24GB:3".parse::<GpuFlag>().unwrap(),
        GpuFlag(vec![group("L4-24GB", 3, Sharing::Exclusive)])
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
    let yaml = parse(EXAMPLE, FILE).unwrap();
    assert_eq!(yaml.source, FILE);
    assert_eq!(yaml.nodes.len(), 3);
    assert!(yaml.catalog.get("X1-48GB").is_some());
    assert_eq!(yaml.nodes[1].profile, None);
    assert_eq!(
        yaml.nodes[1].gpus.as_ref().unwrap()[1].count,
        1,
        "count defaults to 1"
    );
    let value: serde_json::Value = serde_yaml_ng::from_str(EXAMPLE).unwrap();
    let json = parse(&value.to_string(), FILE).unwrap();
    assert_eq!(json, yaml);
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
    let err = parse_err(&file("- names: [a]\n  profile: tpu\n"));
    assert!(
        err.contains("unknown variant `tpu`, expected `fake` or `gpu`"),
        "{err}"
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
            "nodes[1]: gives gpus, a field of the gpu profile, but its profile is fake",
        ),
        (
            "- names: [a]\n  profile: gpu\n  numDevices: 2\n",
            "nodes[0]: gives numDevices or models, fields of the fake profile, but its profile is gpu",
        ),
        (
            "- names: [a]\n  models: [M]\n  gpus: [{model: L4-24GB}]\n",
            "nodes[0]: gives gpus (gpu profile) and numDevices or models (fake profile)",
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

#[test]
fn the_first_matching_entry_wins_and_flags_fill_the_rest() {
    let f = parse(EXAMPLE, FILE).unwrap();
    let d = defaults(ProfileKind::Gpu);
    match resolve(Some(&f), "gpu-a-17", &d).unwrap() {
        NodeDevices::Gpu { groups, catalog } => {
            assert_eq!(groups, [group("A100-80GB", 8, Sharing::Partitioned)]);
            assert!(catalog.get("X1-48GB").is_some(), "the file's models");
        }
        other => panic!("{other:?}"),
    }
    // No profile in the entry: --profile's.
    match resolve(Some(&f), "x1-node", &d).unwrap() {
        NodeDevices::Gpu { groups, .. } => assert_eq!(groups[1].model, "X1-48GB"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        resolve(Some(&f), "cpu-1", &d).unwrap(),
        NodeDevices::Fake {
            num_devices: 8,
            models: vec!["ULTRA_10".into()]
        }
    );
    // An entry that leaves fields out takes them from the flags.
    let f = parse(&file("- names: [\"n*\"]\n  profile: fake\n  numDevices: 2\n- names: [\"g*\"]\n  profile: gpu\n"), FILE).unwrap();
    assert_eq!(
        resolve(Some(&f), "n1", &d).unwrap(),
        NodeDevices::Fake {
            num_devices: 2,
            models: vec!["ULTRA_100".into()]
        }
    );
    assert_eq!(
        resolve(Some(&f), "g1", &defaults(ProfileKind::Fake)).unwrap(),
        NodeDevices::Gpu {
            groups: d.gpus.clone(),
            catalog: Catalog::builtin()
        }
    );
}

#[test]
fn a_node_no_entry_matches_gets_the_flags() {
    let f = parse(
        &file("- names: [\"gpu-*\"]\n  gpus: [{model: L4-24GB}]\n"),
        FILE,
    )
    .unwrap();
    let d = defaults(ProfileKind::Fake);
    let expected = NodeDevices::Fake {
        num_devices: 4,
        models: vec!["ULTRA_100".into()],
    };
    assert_eq!(resolve(Some(&f), "cpu-1", &d).unwrap(), expected);
    assert_eq!(resolve(None, "gpu-1", &d).unwrap(), expected);
    assert_eq!(
        resolve(None, "n", &defaults(ProfileKind::Gpu)).unwrap(),
        NodeDevices::Gpu {
            groups: vec![group("H100-80GB", 2, Sharing::Exclusive)],
            catalog: Catalog::builtin()
        }
    );
    // The file's models serve the flags too.
    let with_model = parse(EXAMPLE, FILE).unwrap();
    let mut x1 = defaults(ProfileKind::Gpu);
    x1.gpus = vec![group("X1-48GB", 1, Sharing::Partitioned)];
    let nodes_free = InventoryFile {
        nodes: Vec::new(),
        ..with_model
    };
    assert!(resolve(Some(&nodes_free), "n", &x1).is_ok());
    assert!(resolve(None, "n", &x1).is_err());
}

#[test]
fn what_resolves_is_checked_against_the_flags_too() {
    // An entry without a profile giving gpus, on a node whose --profile is fake.
    let f = parse(
        &file("- names: [a]\n- names: [\"g*\"]\n  gpus: [{model: L4-24GB}]\n"),
        FILE,
    )
    .unwrap();
    let err = resolve(Some(&f), "g1", &defaults(ProfileKind::Fake))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "inventory file inventory.yaml: nodes[1]: (matching node \"g1\") gives gpus, a field of the gpu profile, but its profile (from --profile) is fake; set profile: gpu or drop gpus"
    );
    let mut d = defaults(ProfileKind::Gpu);
    d.gpus.clear();
    let err = resolve(None, "n1", &d).unwrap_err().to_string();
    assert_eq!(
        err,
        "node \"n1\": --gpus lists no GPUs; the gpu profile needs at least one"
    );
    d.gpus = vec![group("B200", 1, Sharing::Exclusive)];
    let err = resolve(None, "n1", &d).unwrap_err().to_string();
    assert!(err.starts_with("node \"n1\": --gpus: GPU group 0 (B200:1:exclusive): model \"B200\" is not in the catalog"), "{err}");
    let mut d = defaults(ProfileKind::Fake);
    d.num_devices = 0;
    let err = resolve(None, "n1", &d).unwrap_err().to_string();
    assert_eq!(
        err,
        "node \"n1\": --num-devices must be between 1 and 128, got 0"
    );
    d.num_devices = 1;
    d.models.clear();
    let err = resolve(Some(&f), "a", &d).unwrap_err().to_string();
    assert!(
        err.contains("nodes[0]: (matching node \"a\") --models must name at least one model"),
        "{err}"
    );
    assert!(matches!(
        resolve(None, "", &d),
        Err(InventoryError::NoNodeName)
    ));
}

#[test]
fn more_devices_than_a_slice_holds_resolve_but_more_than_a_node_can_publish_do_not() {
    // 16 partitioned A100s are 208 devices: more than one ResourceSlice holds, so the
    // plumbing packs several.
    let f = parse(
        &file("- names: [big]\n  gpus: [{model: A100-80GB, count: 16, sharing: partitioned}]\n- names: [huge]\n  gpus: [{model: L4-24GB, count: 128}]\n"),
        FILE,
    )
    .unwrap();
    let d = defaults(ProfileKind::Gpu);
    let NodeDevices::Gpu { groups, catalog } = resolve(Some(&f), "big", &d).unwrap() else {
        panic!("not gpus");
    };
    let profile = crate::gpu::GpuProfile::new("big", "drv", &groups, &catalog).unwrap();
    use dra_kubelet_plugin::profile::DeviceProfile;
    assert_eq!(profile.slice_devices().len(), 208);
    assert!(resolve(Some(&f), "huge", &d).is_ok());
    // One GPU more than a node may have.
    let err = parse_err(&file(
        "- names: [over]\n  gpus: [{model: L4-24GB, count: 128}, {model: L4-24GB}]\n",
    ));
    assert!(
        err.contains("the node has 129 GPUs; at most 128 per node"),
        "{err}"
    );
    let mut d = defaults(ProfileKind::Gpu);
    d.gpus = vec![group("L4-24GB", 100, Sharing::Exclusive); 2];
    let err = resolve(None, "n", &d).unwrap_err().to_string();
    assert!(
        err.contains("--gpus: the node has 200 GPUs; at most 128"),
        "{err}"
    );
    let mut d = defaults(ProfileKind::Fake);
    d.num_devices = 129;
    assert!(resolve(None, "n", &d).is_err());
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
    let f = load(&path).unwrap();
    assert_eq!(f.source, path.display().to_string());
    let missing = dir.path().join("missing.yaml");
    let err = load(&missing).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("--inventory '{}': ", missing.display())),
        "{err}"
    );
    std::fs::write(&path, format!("{EXAMPLE}\n#{}", "x".repeat(1 << 20))).unwrap();
    let err = load(&path).unwrap_err().to_string();
    assert!(
        err.ends_with("is larger than 1048576 bytes, the limit"),
        "{err}"
    );
    std::fs::write(&path, "apiVersion: [").unwrap();
    let err = load(&path).unwrap_err().to_string();
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
    let f = parse(text, "docs/profiles.md").unwrap();
    let d = defaults(ProfileKind::Fake);
    let gpus = |node: &str| match resolve(Some(&f), node, &d).unwrap() {
        NodeDevices::Gpu { groups, .. } => groups.iter().map(|g| g.count).sum::<usize>(),
        NodeDevices::Fake { .. } => 0,
    };
    assert_eq!(gpus("train-7"), 8);
    assert_eq!(gpus("infer-1"), 4);
    assert_eq!(gpus("edge-a"), 4);
    assert_eq!(gpus("lab-1"), 1);
    assert_eq!(gpus("edge-10"), 0, "? is one character");
    for line in doc.lines().filter(|l| l.starts_with("--gpus ")) {
        let flag = line["--gpus ".len()..].split_whitespace().next().unwrap();
        let mut d = defaults(ProfileKind::Gpu);
        d.gpus = parse_gpus(flag).unwrap();
        resolve(None, "n", &d).unwrap();
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
        let _ = parse(&text, FILE);
        let _ = parse_gpus(&text);
    }
}
