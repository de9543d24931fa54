//! Locks through twemproxy (Debian's `nutcracker`), which closes the connection on every command
//! it does not know (`CLIENT`, `SCRIPT`, `PING <id>`, pub/sub, keyless `EVAL`, `WAIT`): the
//! capability probe finds each refusal on connections of its own, the backend leaves them out
//! (no `CLIENT SETINFO` or fence, scripts sent whole, the request-id echo by script, waiters
//! polling), and the conformance suite passes for both lock kinds.

use lock_redis::{Capability, LockKind, RedisBackend, Support};
use lock_testkit::conformance::Harness;
use lock_testkit::{RedisServer, Twemproxy};

struct BehindTwemproxy {
    // Dropped first: the proxy, then its server.
    proxy: Twemproxy,
    _server: RedisServer,
    kind: LockKind,
}

impl Harness for BehindTwemproxy {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(self.proxy.url())
            .lock_kind(self.kind)
            .connect()
            .await
            .expect("connect through twemproxy")
    }
}

fn start(kind: LockKind) -> BehindTwemproxy {
    let server = RedisServer::start().expect("start redis-server");
    let proxy = Twemproxy::start(&[&server]).expect("start twemproxy (nutcracker)");
    BehindTwemproxy {
        proxy,
        _server: server,
        kind,
    }
}

mod reentrant {
    use super::*;

    #[test]
    fn conformance_through_twemproxy() {
        lock_testkit::conformance::run(
            lock_testkit::conformance_tests!(@sequence &start(LockKind::Reentrant)),
        );
    }
}

mod fast {
    use super::*;

    #[test]
    fn conformance_through_twemproxy() {
        lock_testkit::conformance::run(
            lock_testkit::conformance_tests!(@sequence &start(LockKind::Fast)),
        );
    }
}

#[tokio::test]
async fn the_probe_finds_what_twemproxy_refuses_and_what_it_passes() {
    let harness = start(LockKind::Reentrant);
    let backend = harness.client().await;
    let capabilities = backend.capabilities();
    for refused in [
        Capability::Hello,
        Capability::PingEcho,
        Capability::ClientInfo,
        Capability::ClientKill,
        Capability::ClientSetInfo,
        Capability::ScriptLoad,
        Capability::EvalKeyless,
        Capability::Publish,
        Capability::Subscribe,
        Capability::SSubscribe,
        Capability::Wait,
        Capability::ClusterSlots,
    ] {
        assert_eq!(
            capabilities.get(refused),
            &Support::ClosesConnection,
            "{refused}:\n{capabilities}"
        );
    }
    for passed in [
        Capability::EvalSha,
        Capability::Eval,
        Capability::PublishInScript,
    ] {
        assert!(
            capabilities.get(passed).is_yes(),
            "{passed}:\n{capabilities}"
        );
    }
    // The backend's own connections never sent what the proxy hangs up on: every refusal in
    // the proxy's log is the probe's, at most one per command it found refused and one more
    // for the pipeline that was cut at the first (`PING <id>` and a keyless `EVAL` are
    // refused without a line).
    let log = harness.proxy.log();
    let refusals = log.matches("parsed unsupported command").count();
    let probed = capabilities
        .iter()
        .filter(|(_, support)| **support == Support::ClosesConnection)
        .count();
    assert!(refusals <= probed + 1, "{refusals} > {probed} + 1:\n{log}");
}

#[tokio::test]
async fn the_probe_finds_a_full_server_full() {
    let server = RedisServer::start().expect("start redis-server");
    let backend = RedisBackend::connect(server.url()).await.expect("connect");
    let capabilities = backend.capabilities();
    let info = capabilities.server().expect("HELLO answered");
    assert!(
        ["redis", "valkey"].contains(&info.name.as_str()),
        "{info:?}"
    );
    for capability in [
        Capability::Hello,
        Capability::PingEcho,
        Capability::ClientInfo,
        Capability::ClientKill,
        Capability::ScriptLoad,
        Capability::EvalSha,
        Capability::Eval,
        Capability::EvalKeyless,
        Capability::PublishInScript,
        Capability::Publish,
        Capability::Subscribe,
        Capability::SSubscribe,
        Capability::Wait,
    ] {
        assert!(
            capabilities.get(capability).is_yes(),
            "{capability}:\n{capabilities}"
        );
    }
    // A standalone server is no cluster.
    assert!(
        matches!(
            capabilities.get(Capability::ClusterSlots),
            Support::Unknown(_)
        ),
        "{capabilities}"
    );
}
