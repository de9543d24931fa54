//! The restriction sets of managed services and proxies that an ACL can express
//! (`lock_testkit::restrictions`), each as a user on a real server: the capability probe finds
//! what is missing, and the lock conformance suite passes for both lock kinds under each
//! (`docs/deployments.md`, "Proxies and managed services"). Under a set with no scripts at
//! all only the fast lock runs, on a server with native compare-and-set and compare-and-delete
//! (Valkey 9; the CI's second step), without fencing tokens; elsewhere `connect` refuses it,
//! naming what is missing.

use lock_core::Error;
use lock_redis::{Capability, LockKind, RedisBackend, Support};
use lock_testkit::RedisServer;
use lock_testkit::conformance::Harness;
use lock_testkit::restrictions::{RESTRICTIONS, restricted_user};

struct Restricted {
    url: String,
    kind: LockKind,
    fences: bool,
}

impl Harness for Restricted {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(self.url.as_str())
            .lock_kind(self.kind)
            .connect()
            .await
            .expect("connect as the restricted user")
    }

    fn fences(&self) -> bool {
        self.fences
    }
}

/// Whether the server keeps the fast lock without scripts (asked as an unrestricted user).
async fn has_natives(server: &RedisServer) -> bool {
    let backend = RedisBackend::connect(server.url()).await.expect("connect");
    backend.capabilities().keeps_fast_lock_natively().is_ok()
}

#[test]
fn the_conformance_suite_passes_under_each_restriction_set() {
    let server = RedisServer::start().expect("start redis-server");
    for (index, restriction) in RESTRICTIONS.iter().enumerate() {
        let url = restricted_user(&server, &format!("restricted{index}"), restriction.denied)
            .expect("make the user");
        let kinds = if restriction.scripts {
            vec![LockKind::Reentrant, LockKind::Fast]
        } else if tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(has_natives(&server))
        {
            vec![LockKind::Fast]
        } else {
            eprintln!(
                "{}: the server has no native compare-and-set",
                restriction.name
            );
            vec![]
        };
        for kind in kinds {
            eprintln!("{}: {kind:?}", restriction.name);
            let harness = Restricted {
                url: url.clone(),
                kind,
                fences: restriction.scripts,
            };
            lock_testkit::conformance::run(async {
                let backend = harness.client().await;
                let capabilities = backend.capabilities();
                for command in restriction.refused {
                    let capability = Capability::ALL
                        .into_iter()
                        .find(|capability| capability.command() == *command)
                        .expect("a capability of that name");
                    assert!(
                        matches!(capabilities.get(capability), Support::NotPermitted(_)),
                        "{}: {capability}:\n{capabilities}",
                        restriction.name
                    );
                }
                lock_testkit::conformance_tests!(@sequence &harness).await;
            });
        }
    }
}

/// On a server without scripts (OCI Cache sharded; here a user without `@scripting`) the
/// reentrant lock is refused at `connect`, with an error that names what is missing, and so is
/// the fast lock where the server has no native compare-and-set (Redis before 8.4); where it has
/// (Valkey 9), the fast lock connects. `replica_ack` without `WAIT` is refused too.
#[tokio::test]
async fn what_cannot_work_is_refused_at_connect_naming_what_is_missing() {
    let server = RedisServer::start().expect("start redis-server");
    let natives = has_natives(&server).await;
    let url = restricted_user(&server, "noscripts", &["-@scripting"]).expect("make the user");
    for kind in [LockKind::Reentrant, LockKind::Fast] {
        let connected = RedisBackend::builder(url.as_str())
            .lock_kind(kind)
            .connect()
            .await;
        match connected {
            Ok(_) if kind == LockKind::Fast && natives => {}
            Err(Error::NotPermitted(cause)) => {
                let text = cause.to_string();
                assert!(text.contains("EVAL") && text.contains("EVALSHA"), "{text}");
                let names_natives = text.contains("SET IFEQ") && text.contains("DELIFEQ");
                match kind {
                    LockKind::Fast => assert!(!natives && names_natives, "{text}"),
                    _ => assert!(text.contains("only the fast lock"), "{text}"),
                }
            }
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    let url = restricted_user(&server, "nowait", &["-wait"]).expect("make the user");
    let refused = RedisBackend::builder(url.as_str())
        .replica_ack(lock_redis::ReplicaAck::replicas(1))
        .connect()
        .await;
    assert!(
        matches!(&refused, Err(Error::NotPermitted(cause)) if cause.to_string().contains("+wait")),
        "{refused:?}"
    );
    let keys: u64 = redis::cmd("DBSIZE")
        .query(
            &mut redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(keys, 0, "nothing written");
}
