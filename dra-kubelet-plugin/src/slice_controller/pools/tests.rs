use super::*;
use crate::pool::SliceContent;

const DRIVER: &str = "gpu.example.com";

fn slice(node: &str, name: &str, rv: &str) -> PublishedSlice {
    PublishedSlice {
        name: name.into(),
        resource_version: Some(rv.into()),
        driver: DRIVER.into(),
        node_name: Some(node.into()),
        pool: node.into(),
        generation: 1,
        slice_count: 1,
        content: SliceContent::default(),
    }
}

fn synced(node: &str, record: Vec<PublishedSlice>) -> PoolState {
    PoolState {
        node: node.into(),
        record,
        in_sync: true,
        ..PoolState::default()
    }
}

#[test]
fn a_relist_marks_the_pools_whose_slices_changed_unseen() {
    let mut pools: BTreeMap<String, PoolState> = [
        ("kept", vec![slice("kept", "kept-a", "1")]),
        ("deleted", vec![slice("deleted", "deleted-a", "2")]),
        ("rewritten", vec![slice("rewritten", "rewritten-a", "3")]),
        ("added", vec![]),
    ]
    .into_iter()
    .map(|(n, r)| (n.to_owned(), synced(n, r)))
    .collect();
    let mut other = slice("kept", "kept-b", "5");
    other.driver = "other.example.com".into();
    let listed = [
        slice("kept", "kept-a", "1"),
        other,
        slice("rewritten", "rewritten-a", "9"),
        slice("added", "added-x", "4"),
    ];
    let stale = stale_after_relist(&mut pools, DRIVER, &listed);
    assert_eq!(stale, ["added", "deleted", "rewritten"]);
    assert!(pools["kept"].in_sync && !pools["kept"].needs_list);
    for node in ["added", "deleted", "rewritten"] {
        assert!(!pools[node].in_sync && pools[node].needs_list, "{node}");
    }
}

#[test]
fn our_own_echo_is_no_change_and_anything_else_is() {
    let mut pools: BTreeMap<String, PoolState> = [(
        "n1".to_owned(),
        synced("n1", vec![slice("n1", "n1-a", "7")]),
    )]
    .into();
    // The echo of our write, and the deletion of a slice we no longer hold.
    assert_eq!(
        external_change(&mut pools, DRIVER, &slice("n1", "n1-a", "7"), false),
        None
    );
    assert_eq!(
        external_change(&mut pools, DRIVER, &slice("n1", "n1-old", "3"), true),
        None
    );
    // Another driver's slice, and a node that is no pool of ours.
    let mut foreign = slice("n1", "n1-a", "8");
    foreign.driver = "other.example.com".into();
    assert_eq!(external_change(&mut pools, DRIVER, &foreign, false), None);
    assert_eq!(
        external_change(&mut pools, DRIVER, &slice("n2", "n2-a", "1"), false),
        None
    );
    assert!(pools["n1"].in_sync);
    // Someone else's write, then a deletion of ours.
    assert_eq!(
        external_change(&mut pools, DRIVER, &slice("n1", "n1-a", "8"), false).as_deref(),
        Some("n1")
    );
    assert!(!pools["n1"].in_sync && pools["n1"].needs_list);
    pools.insert("n1".into(), synced("n1", vec![slice("n1", "n1-a", "7")]));
    assert_eq!(
        external_change(&mut pools, DRIVER, &slice("n1", "n1-a", "7"), true).as_deref(),
        Some("n1")
    );
}

#[test]
fn a_pool_of_a_node_is_told_apart_from_the_others_on_it() {
    let mut nic = slice("n1", "n1-nics-a", "4");
    nic.pool = "n1/nics".into();
    let mut pools: BTreeMap<String, PoolState> = [
        (
            "n1".to_owned(),
            synced("n1", vec![slice("n1", "n1-a", "7")]),
        ),
        ("n1/nics".to_owned(), synced("n1", vec![nic.clone()])),
    ]
    .into();
    // Someone else's write to the NIC pool marks that pool only.
    let mut rewritten = nic.clone();
    rewritten.resource_version = Some("5".into());
    assert_eq!(
        external_change(&mut pools, DRIVER, &rewritten, false).as_deref(),
        Some("n1/nics")
    );
    assert!(pools["n1"].in_sync && !pools["n1/nics"].in_sync);
    // A slice claiming the pool's name from another node is not the pool's.
    let mut elsewhere = nic;
    elsewhere.node_name = Some("n2".into());
    if let Some(p) = pools.get_mut("n1/nics") {
        p.in_sync = true;
    }
    assert_eq!(external_change(&mut pools, DRIVER, &elsewhere, false), None);
    // A relist that still has both pools' slices as written marks nothing.
    let mut listed_nic = slice("n1", "n1-nics-a", "5");
    listed_nic.pool = "n1/nics".into();
    if let Some(p) = pools.get_mut("n1/nics") {
        p.record = vec![listed_nic.clone()];
    }
    let stale = stale_after_relist(&mut pools, DRIVER, &[slice("n1", "n1-a", "7"), listed_nic]);
    assert!(stale.is_empty(), "{stale:?}");
}
