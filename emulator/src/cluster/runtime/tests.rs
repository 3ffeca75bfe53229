use super::*;

const KIND: &str = "k8s.fake.resource.3-shake.com/fake";

fn spec_json(common_env: &str, extra: &str) -> String {
    format!(
        r#"{{"cdiVersion":"0.5.0","kind":"{KIND}","containerEdits":{{"env":["TOP=1"]}},
        "devices":[{{"name":"common","containerEdits":{{"env":[{common_env}]}}}},
                   {{"name":"0b5c1e9a-1111-2222-3333-444455556666","containerEdits":{{"env":["FAKE_DEVICE_0=FAKE-xyz"]{extra}}}}}]}}"#
    )
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn parses_json_and_yaml_alike() {
    let json = parse_cdi_spec(
        Path::new("/x/a.json"),
        &spec_json(r#""FAKE_NODE_NAME=node-a""#, ""),
    )
    .unwrap();
    let yaml_text = format!(
        "cdiVersion: 0.5.0\nkind: {KIND}\ncontainerEdits:\n  env: [TOP=1]\ndevices:\n- name: common\n  containerEdits:\n    env: [FAKE_NODE_NAME=node-a]\n- name: 0b5c1e9a-1111-2222-3333-444455556666\n  containerEdits:\n    env: [FAKE_DEVICE_0=FAKE-xyz]\n"
    );
    let yaml = parse_cdi_spec(Path::new("/x/a.json.yaml"), &yaml_text).unwrap();
    assert_eq!(json.kind, KIND);
    assert_eq!(json.devices, yaml.devices);
    assert_eq!(json.edits.env, kv(&[("TOP", "1")]));
    assert_eq!(
        json.devices[1].edits.env,
        kv(&[("FAKE_DEVICE_0", "FAKE-xyz")])
    );
}

#[test]
fn rejects_bad_specs() {
    let bad_env = parse_cdi_spec(Path::new("a.json"), &spec_json(r#""NOEQUALS""#, "")).unwrap_err();
    assert!(bad_env.to_string().contains("NOEQUALS"), "{bad_env}");
    let bad_kind = parse_cdi_spec(
        Path::new("a.json"),
        r#"{"cdiVersion":"0.5.0","kind":"nokind","devices":[]}"#,
    )
    .unwrap_err();
    assert!(bad_kind.to_string().contains("nokind"), "{bad_kind}");
    assert!(parse_cdi_spec(Path::new("a.json"), "{").is_err());
    let deep = format!(
        "cdiVersion: 0.5.0\nkind: {KIND}\ndevices:\n{}x\n",
        "- ".repeat(200)
    );
    let too_deep = parse_cdi_spec(Path::new("a.yaml"), &deep).unwrap_err();
    assert_eq!(
        too_deep.to_string(),
        "CDI spec a.yaml: YAML nested deeper than 64 levels at line 4: at most 64 mappings and sequences may nest"
    );
}

#[test]
fn value_after_equals_keeps_equals() {
    let spec = parse_cdi_spec(Path::new("a.json"), &spec_json(r#""A=b=c""#, "")).unwrap();
    assert_eq!(spec.devices[0].edits.env, kv(&[("A", "b=c")]));
}

#[test]
fn resolves_env_in_cdi_order() {
    let spec = parse_cdi_spec(
        Path::new("a.json"),
        &spec_json(r#""FAKE_NODE_NAME=node-a""#, ""),
    )
    .unwrap();
    let ids = vec![
        format!("{KIND}=common"),
        format!("{KIND}=0b5c1e9a-1111-2222-3333-444455556666"),
    ];
    let env = resolve_cdi_env(&[spec], &ids, Path::new("/d"), &[]).unwrap();
    // The top-level edits once, before the spec's first device.
    assert_eq!(
        env,
        kv(&[
            ("TOP", "1"),
            ("FAKE_NODE_NAME", "node-a"),
            ("FAKE_DEVICE_0", "FAKE-xyz")
        ])
    );
}

#[test]
fn unknown_ambiguous_and_invalid_ids_are_errors() {
    let spec = parse_cdi_spec(Path::new("a.json"), &spec_json(r#""A=1""#, "")).unwrap();
    let missing = resolve_cdi_env(
        std::slice::from_ref(&spec),
        &[format!("{KIND}=abc")],
        Path::new("/d"),
        &["b.json: broken".into()],
    )
    .unwrap_err();
    assert!(matches!(missing, RuntimeError::CdiDeviceNotFound { .. }));
    assert!(
        missing
            .to_string()
            .contains(&format!("{KIND}=abc not found in /d")),
        "{missing}"
    );
    assert!(missing.to_string().contains("b.json: broken"), "{missing}");
    let mut other = spec.clone();
    other.path = PathBuf::from("b.json");
    let ambiguous = resolve_cdi_env(
        &[spec.clone(), other],
        &[format!("{KIND}=common")],
        Path::new("/d"),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(ambiguous, RuntimeError::CdiDeviceAmbiguous { ref files, .. } if files.len() == 2),
        "{ambiguous}"
    );
    for bad in ["nokind", "vendor=name", "a/b=", "/b=c", "a/b/c=d"] {
        let err = resolve_cdi_env(
            std::slice::from_ref(&spec),
            &[bad.to_string()],
            Path::new("/d"),
            &[],
        )
        .unwrap_err();
        assert!(
            matches!(err, RuntimeError::InvalidCdiId { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn device_nodes_already_at_their_path_are_seen_others_refused() {
    let id = format!("{KIND}=0b5c1e9a-1111-2222-3333-444455556666");
    let resolve = |nodes: &str| {
        let spec = parse_cdi_spec(
            Path::new("a.json"),
            &spec_json(r#""A=1""#, &format!(r#","deviceNodes":{nodes}"#)),
        )
        .unwrap();
        resolve_cdi_env(&[spec], std::slice::from_ref(&id), Path::new("/d"), &[])
    };
    // The host process sees /dev/null at /dev/null.
    assert!(resolve(r#"[{"path":"/dev/null"}]"#).is_ok());
    assert!(resolve(r#"[{"path":"/dev/null","hostPath":"/dev/null"}]"#).is_ok());
    let err = resolve(r#"[{"path":"/dev/fpga0","hostPath":"/dev/null"}]"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("process runtime: device {id}: deviceNodes[0] would appear at /dev/fpga0, made from the host's /dev/null")),
        "{err}"
    );
    assert!(err.contains("podman"), "{err}");
    let err = resolve(r#"[{"path":"/dev/null"},{"path":"/dev/no-such-fpga"}]"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("deviceNodes[1] host node /dev/no-such-fpga cannot be used"),
        "{err}"
    );
}

#[test]
fn non_env_edits_are_refused_naming_device_and_edit() {
    let spec = parse_cdi_spec(
        Path::new("a.json"),
        &spec_json(
            r#""A=1""#,
            r#","mounts":[{"hostPath":"/a","containerPath":"/b"}]"#,
        ),
    )
    .unwrap();
    let id = format!("{KIND}=0b5c1e9a-1111-2222-3333-444455556666");
    let err = resolve_cdi_env(
        std::slice::from_ref(&spec),
        std::slice::from_ref(&id),
        Path::new("/d"),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "process runtime applies only env edits and device nodes already at their path; device {id} has mounts"
        )
    );
    // The other device of that spec has only env edits.
    assert!(resolve_cdi_env(&[spec], &[format!("{KIND}=common")], Path::new("/d"), &[]).is_ok());
    // Empty non-env edits are no edits.
    let empty = parse_cdi_spec(
        Path::new("a.json"),
        &spec_json(r#""A=1""#, r#","mounts":[],"hooks":null"#),
    )
    .unwrap();
    assert!(empty.devices[1].edits.other.is_empty());
}

#[test]
fn top_level_non_env_edits_are_refused() {
    let text = format!(
        r#"{{"cdiVersion":"0.5.0","kind":"{KIND}","containerEdits":{{"mounts":[{{"hostPath":"/a","containerPath":"/b"}}]}},"devices":[{{"name":"d","containerEdits":{{"env":["A=1"]}}}}]}}"#
    );
    let spec = parse_cdi_spec(Path::new("a.json"), &text).unwrap();
    let err = resolve_cdi_env(&[spec], &[format!("{KIND}=d")], Path::new("/d"), &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("has mounts (top-level containerEdits of a.json)"),
        "{err}"
    );
}

#[test]
fn process_env_orders_and_overrides_like_oci() {
    let env = process_env(
        "my-pod",
        &kv(&[("A", "container"), ("B", "b"), ("HOME", "/root")]),
        &kv(&[("A", "cdi"), ("C", "1"), ("C", "2")]),
    );
    assert_eq!(
        env,
        kv(&[
            ("PATH", DEFAULT_PATH),
            ("TERM", "xterm"),
            ("HOSTNAME", "my-pod"),
            ("HOME", "/root"),
            ("A", "cdi"),
            ("B", "b"),
            ("C", "2")
        ])
    );
}

#[test]
fn load_skips_broken_and_unrelated_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.json"), spec_json(r#""A=1""#, "")).unwrap();
    std::fs::write(dir.path().join("broken.yaml"), "kind: [").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a spec").unwrap();
    let (specs, skipped) = load_cdi_specs(dir.path()).unwrap();
    assert_eq!(specs.len(), 1);
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].contains("broken.yaml"), "{skipped:?}");
    let (none, _) = load_cdi_specs(&dir.path().join("missing")).unwrap();
    assert!(none.is_empty());
}

#[test]
fn programs_map_to_busybox_applets_then_the_host() {
    let applets: BTreeSet<String> = ["ash", "sh", "env", "sleep"]
        .into_iter()
        .map(String::from)
        .collect();
    let bb = Path::new("/bb/busybox");
    let host = tempfile::tempdir().unwrap();
    let tool = host.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path_env = host.path().display().to_string();
    let busybox = |applet: &str| Program {
        path: bb.to_path_buf(),
        prefix: vec![applet.to_string()],
    };
    let resolve = |program: &str, applets| resolve_program(program, &path_env, applets, bb);
    for (program, applet) in [
        ("ash", "ash"),
        ("/bin/ash", "ash"),
        ("/usr/bin/env", "env"),
        ("/sbin/sleep", "sleep"),
        ("/usr/sbin/sh", "sh"),
    ] {
        assert_eq!(
            resolve(program, Some(&applets)),
            Ok(busybox(applet)),
            "{program}"
        );
    }
    let direct = |path: &Path| Program {
        path: path.to_path_buf(),
        prefix: Vec::new(),
    };
    // Not an applet: the host's program of that name, in the container's PATH.
    assert_eq!(resolve("tool", Some(&applets)), Ok(direct(&tool)));
    assert_eq!(resolve("/usr/bin/tool", Some(&applets)), Ok(direct(&tool)));
    // No busybox at all: the host's program too.
    assert_eq!(resolve("tool", None), Ok(direct(&tool)));
    // A path outside the image's bin directories runs as it is.
    assert_eq!(
        resolve("/opt/x/ash", Some(&applets)),
        Ok(direct(Path::new("/opt/x/ash")))
    );
    assert_eq!(
        resolve("./ash", Some(&applets)),
        Ok(direct(Path::new("./ash")))
    );
    // Neither: the error names the program and why.
    let err = resolve("/bin/ash", None).unwrap_err();
    assert!(
        err.contains("\"ash\"") && err.contains("busybox (/bb/busybox) is not installed"),
        "{err}"
    );
    let err = resolve("nope", Some(&applets)).unwrap_err();
    assert!(err.contains("\"nope\" is not a busybox applet"), "{err}");
}

#[test]
fn podman_names_are_valid() {
    assert_eq!(
        podman_container_name("ns/pod:ctr@1"),
        "fake-dra-ns-pod-ctr-1"
    );
    assert_eq!(hostname_for("My_Pod"), "my-pod");
    assert_eq!(hostname_for("___"), "pod");
    assert_eq!(hostname_for("web.v1"), "web.v1");
}

#[tokio::test]
async fn wait_for_sees_earlier_and_later_lines() {
    let sink = LogSink::default();
    let line = |container: &str, text: &str| LogLine {
        namespace: "ns".into(),
        pod: "p".into(),
        container: container.into(),
        line: text.into(),
    };
    sink.push(line("c", "early"));
    assert_eq!(
        sink.wait_for("ns", "p", "c", Duration::from_secs(60), |l| l == "early")
            .await
            .unwrap(),
        vec!["early"]
    );
    let pusher = sink.clone();
    let task = tokio::spawn(async move {
        pusher.push(line("other", "late"));
        pusher.push(line("c", "late"));
    });
    let lines = sink
        .wait_for("ns", "p", "c", Duration::from_secs(60), |l| l == "late")
        .await
        .unwrap();
    assert_eq!(lines, vec!["early", "late"]);
    task.await.unwrap();
    let timed_out = sink
        .wait_for("ns", "p", "c", Duration::from_millis(10), |l| l == "never")
        .await
        .unwrap_err();
    assert_eq!(timed_out, vec!["early", "late"]);
    assert_eq!(sink.all().len(), 3);
}

fn origin(dir: &std::path::Path) -> Origin {
    Origin {
        namespace: "ns".into(),
        pod: "p".into(),
        container: "c".into(),
        file: CriLog::create(&dir.join("0.log")),
    }
}

/// D8: output without a newline was buffered without bound (200 MB of `a` grew the sim by
/// 200 MB). It is cut into 16 KiB parts, as containerd cuts a long line: `P` records in the
/// log file, one sink line each.
#[tokio::test]
async fn a_line_without_newline_is_cut_at_16_kib() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LogSink::default();
    let output = vec![b'a'; 200 * 1024];
    forward_lines(
        &output[..],
        sink.clone(),
        origin(dir.path()),
        Stream::Stdout,
        false,
    )
    .await;
    let lines = sink.lines("ns", "p", "c");
    assert_eq!(lines.len(), (200 * 1024_usize).div_ceil(MAX_LOG_LINE_BYTES));
    assert!(lines.iter().all(|l| l.len() <= MAX_LOG_LINE_BYTES));
    assert_eq!(lines.iter().map(String::len).sum::<usize>(), 200 * 1024);
    let file = std::fs::read_to_string(dir.path().join("0.log")).unwrap();
    assert_eq!(file.lines().count(), lines.len());
    assert!(
        file.lines().all(|l| l.split(' ').nth(2) == Some("P")),
        "every part is partial"
    );
}

/// D9: every line stayed in memory for the sim's life (2 M lines: +440 MB). The sink keeps
/// the latest 1 MiB of each container; the log file is rotated at the kubelet's 10 MiB and
/// at most 5 files are kept.
#[tokio::test]
async fn logs_are_bounded_in_memory_and_rotated_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LogSink::default();
    let line = format!("{}\n", "x".repeat(999));
    let lines = 60 * 1024; // 60 MiB of output
    let output = line.repeat(lines);
    forward_lines(
        output.as_bytes(),
        sink.clone(),
        origin(dir.path()),
        Stream::Stdout,
        false,
    )
    .await;
    sink.push(LogLine {
        namespace: "ns".into(),
        pod: "other".into(),
        container: "c".into(),
        line: "kept".into(),
    });
    let kept = sink.lines("ns", "p", "c");
    let kept_bytes: usize = kept.iter().map(String::len).sum();
    assert!(kept_bytes <= SINK_BYTES_PER_CONTAINER, "{kept_bytes}");
    assert!(kept.len() > 100 && kept.len() < lines, "{}", kept.len());
    assert_eq!(sink.lines("ns", "other", "c"), ["kept"]);
    let files: Vec<u64> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    assert_eq!(files.len(), CONTAINER_LOG_MAX_FILES, "{files:?}");
    assert!(
        files
            .iter()
            .all(|len| *len <= CONTAINER_LOG_MAX_BYTES + 2 * 1024),
        "{files:?}"
    );
}
