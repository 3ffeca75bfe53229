use super::*;

fn info(devices: Vec<(Vec<&str>, Vec<&str>)>) -> ClaimInfo {
    ClaimInfo {
        uid: "u".into(),
        namespace: "ns".into(),
        name: "c".into(),
        driver_name: String::new(),
        handles: Vec::new(),
        devices: devices
            .into_iter()
            .map(|(r, ids)| DeviceInfo {
                request_names: r.into_iter().map(String::from).collect(),
                cdi_ids: ids.into_iter().map(String::from).collect(),
            })
            .collect(),
        pods: BTreeSet::new(),
        prepared: true,
    }
}

#[test]
fn cdi_devices_follow_the_request_named_and_keep_repeats() {
    let claim = info(vec![
        (vec!["a"], vec!["v/c=common", "v/c=u:0"]),
        (vec!["b"], vec!["v/c=common", "v/c=u:1"]),
        (vec![], vec!["v/c=all"]),
    ]);
    assert_eq!(
        claim.cdi_devices_as_list(None),
        ["v/c=common", "v/c=u:0", "v/c=common", "v/c=u:1", "v/c=all"]
    );
    assert_eq!(
        claim.cdi_devices_as_list(Some("b")),
        ["v/c=common", "v/c=u:1", "v/c=all"]
    );
}

#[test]
fn the_annotation_key_has_room_for_63_characters() {
    let uid = "0123456789abcdef0123456789abcdef0123";
    assert_eq!(
        check_annotation(uid, &"d".repeat(26), &["v/c=x".into()]),
        Ok(())
    );
    let err = check_annotation(uid, &"d".repeat(27), &["v/c=x".into()]).unwrap_err();
    assert!(err.contains("too long"), "{err}");
    assert!(check_annotation(uid, "d", &["x".into()]).is_err());
    assert_eq!(check_annotation(uid, &"d".repeat(40), &[]), Ok(()));
}

#[test]
fn cdi_ids_must_be_qualified() {
    assert!(is_qualified_cdi_id(
        "k8s.fake.resource.3-shake.com/fake=common"
    ));
    assert!(!is_qualified_cdi_id("common"));
    assert!(!is_qualified_cdi_id("k8s.x/fake="));
    assert!(!is_qualified_cdi_id("k8s.x/a.b=c"));
}

#[test]
fn answers_must_cover_exactly_the_batch() {
    let a = info(vec![]);
    let mut b = info(vec![]);
    b.uid = "v".into();
    let batch = vec![&a, &b];
    let ok = check_answers(
        &batch,
        vec![
            ("u".into(), String::new(), vec![]),
            ("v".into(), String::new(), vec![]),
        ],
        "NodePrepareResources",
        true,
    );
    assert_eq!(ok.map(|a| a.len()), Ok(2));
    let left_out = check_answers(
        &batch,
        vec![("u".into(), String::new(), vec![])],
        "NodePrepareResources",
        true,
    );
    assert_eq!(
        left_out.unwrap_err(),
        "NodePrepareResources skipped 1 ResourceClaims"
    );
    let unknown = check_answers(
        &batch,
        vec![("w".into(), String::new(), vec![])],
        "NodePrepareResources",
        false,
    );
    assert!(unknown.unwrap_err().contains("unknown claim UID w"));
    let failed = check_answers(
        &batch,
        vec![("u".into(), "boom".into(), vec![])],
        "NodePrepareResources",
        false,
    );
    assert_eq!(
        failed.unwrap_err(),
        "NodePrepareResources failed for claim ns/c: boom"
    );
}
