//! The cluster fixture: it forms, and each of its faults does what it says. One test, so only
//! one cluster (6 processes) is alive at a time.

use lock_testkit::{FailoverMode, RedisCluster};

fn get(cluster: &RedisCluster, key: &str) -> Option<String> {
    let node = cluster
        .primary_of_slot(cluster.slot_of(key).unwrap())
        .unwrap();
    redis::cmd("GET")
        .arg(key)
        .query(&mut cluster.node(node).client().get_connection().unwrap())
        .unwrap()
}

#[test]
fn cluster_forms_fails_over_and_moves_slots() {
    let mut cluster = RedisCluster::start(3, 1).unwrap();
    assert_eq!(cluster.len(), 6);
    // Every slot has an owner among the first three nodes, each with one replica.
    let mut owners = std::collections::BTreeSet::new();
    for slot in [0, 5000, 5461, 10_000, 16_383] {
        owners.insert(cluster.primary_of_slot(slot).unwrap());
    }
    assert_eq!(owners.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    for primary in 0..3 {
        assert_eq!(cluster.replicas_of(primary).unwrap(), vec![3 + primary]);
        assert!(cluster.role(primary).unwrap());
        assert!(!cluster.role(3 + primary).unwrap());
    }

    // A write lands on the slot's owner, and a cluster client finds it from any seed.
    let key = "orders:{42}";
    let slot = cluster.slot_of(key).unwrap();
    let owner = cluster.primary_of_slot(slot).unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg("v1")
        .exec(&mut cluster.node(owner).client().get_connection().unwrap())
        .unwrap();

    // A coordinated failover: the replica serves the slot, with the data.
    let replica = cluster.replicas_of(owner).unwrap()[0];
    cluster
        .failover(replica, FailoverMode::Coordinated)
        .unwrap();
    assert_eq!(cluster.primary_of_slot(slot).unwrap(), replica);
    assert!(cluster.role(replica).unwrap());
    assert_eq!(cluster.replicas_of(replica).unwrap(), vec![owner]);
    assert_eq!(get(&cluster, key).as_deref(), Some("v1"));

    // Moving the slot takes its keys along.
    let target = (0..3).find(|&p| p != owner).unwrap();
    cluster.move_slot(slot, target).unwrap();
    assert_eq!(cluster.primary_of_slot(slot).unwrap(), target);
    assert_eq!(get(&cluster, key).as_deref(), Some("v1"));
    let old: Result<Option<String>, _> = redis::cmd("GET")
        .arg(key)
        .query(&mut cluster.node(replica).client().get_connection().unwrap());
    let error = old.unwrap_err();
    assert_eq!(error.code(), Some("MOVED"), "{error}");

    // A killed primary is replaced by its replica (the cluster's own failure detection).
    let victim = cluster.primary_of_slot(slot).unwrap();
    let heir = cluster.replicas_of(victim).unwrap()[0];
    cluster.node_mut(victim).kill().unwrap();
    cluster.wait_ready().unwrap();
    assert_eq!(cluster.primary_of_slot(slot).unwrap(), heir);

    // A forced takeover of a live primary.
    let other = (0..3).find(|&p| p != owner && p != target).unwrap();
    let other_replica = cluster.replicas_of(other).unwrap()[0];
    cluster
        .failover(other_replica, FailoverMode::Takeover)
        .unwrap();
    assert!(cluster.role(other_replica).unwrap());
}

#[test]
fn no_primaries_is_an_error() {
    assert!(matches!(
        RedisCluster::start(0, 1),
        Err(lock_testkit::ServerError::NoNodes)
    ));
}
