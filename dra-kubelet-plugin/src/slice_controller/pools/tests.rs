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

fn synced(record: Vec<PublishedSlice>) -> PoolState {
    PoolState {
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
    .map(|(n, r)| (n.to_owned(), synced(r)))
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
    let mut pools: BTreeMap<String, PoolState> =
        [("n1".to_owned(), synced(vec![slice("n1", "n1-a", "7")]))].into();
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
    pools.insert("n1".into(), synced(vec![slice("n1", "n1-a", "7")]));
    assert_eq!(
        external_change(&mut pools, DRIVER, &slice("n1", "n1-a", "7"), true).as_deref(),
        Some("n1")
    );
}
