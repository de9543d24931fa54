//! The Sentinel fixture: it forms, fails over on command, and promotes a replica when the
//! primary is killed.

use lock_testkit::SentinelGroup;

#[test]
fn sentinel_group_fails_over() {
    let mut group = SentinelGroup::start(2).unwrap();
    assert_eq!(group.len(), 3);
    assert_eq!(group.sentinel_urls().len(), 3);
    assert_eq!(group.primary().unwrap(), 0);
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut group.node(0).client().get_connection().unwrap())
        .unwrap();

    group.failover().unwrap();
    let first = group.primary().unwrap();
    assert_ne!(first, 0);
    let value: Option<String> = redis::cmd("GET")
        .arg("k")
        .query(&mut group.node(first).client().get_connection().unwrap())
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));

    // Killing the primary: the Sentinels notice (down-after 1 s) and promote another node.
    group.node_mut(first).kill().unwrap();
    let second = group.wait_new_primary(first).unwrap();
    assert!(second != first);
}
