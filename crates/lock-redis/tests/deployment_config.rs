//! Bad cluster and Sentinel settings are refused with `InvalidConfig` before any connection is
//! tried; good settings of the same shape connect to real servers.
#![cfg(all(feature = "cluster", feature = "sentinel"))]

use lock_core::Error;
use lock_redis::RedisBackend;
use lock_testkit::{RedisCluster, SentinelGroup};

fn invalid(result: Result<RedisBackend, Error>) -> String {
    match result {
        Err(Error::InvalidConfig { reason }) => reason,
        Err(other) => panic!("expected InvalidConfig, got {other:?}"),
        Ok(_) => panic!("expected InvalidConfig, got a backend"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_settings_are_checked_before_connecting() {
    let none: [&str; 0] = [];
    let reason = invalid(
        RedisBackend::builder(lock_redis::RedisTarget::cluster(none))
            .connect()
            .await,
    );
    assert!(reason.contains("seed"), "{reason}");
    let reason = invalid(
        RedisBackend::builder(lock_redis::RedisTarget::cluster(["not a url"]))
            .connect()
            .await,
    );
    assert!(reason.contains("URL"), "{reason}");
    // The same builder with real seeds connects.
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .expect("join")
        .expect("start a cluster");
    RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
        .connect()
        .await
        .expect("connect to the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_settings_are_checked_before_connecting() {
    let none: [&str; 0] = [];
    let reason = invalid(
        RedisBackend::builder(lock_redis::RedisTarget::sentinel(none, "svc"))
            .connect()
            .await,
    );
    assert!(reason.contains("Sentinel URL"), "{reason}");
    let group = tokio::task::spawn_blocking(|| SentinelGroup::start(0))
        .await
        .expect("join")
        .expect("start a Sentinel group");
    let reason = invalid(
        RedisBackend::builder(lock_redis::RedisTarget::sentinel(group.sentinel_urls(), ""))
            .connect()
            .await,
    );
    assert!(reason.contains("service name"), "{reason}");
    let reason = invalid(
        RedisBackend::builder(lock_redis::RedisTarget::sentinel(
            ["not a url"],
            group.service(),
        ))
        .connect()
        .await,
    );
    assert!(reason.contains("URL"), "{reason}");
    RedisBackend::builder(lock_redis::RedisTarget::sentinel(
        group.sentinel_urls(),
        group.service(),
    ))
    .connect()
    .await
    .expect("connect through the Sentinels");
}
