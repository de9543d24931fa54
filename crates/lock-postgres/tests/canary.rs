//! The replication canary: what a failover does to a lock held on PostgreSQL.
//!
//! - Asynchronous streaming replication: the primary acknowledges a grant the standby never
//!   received; the primary dies, the standby is promoted, and it grants the same lock to a
//!   second owner while the first one's lease still runs. Fencing tokens keep the damage out of
//!   a fenced store: the second owner's token is larger (tokens are floored at the server's
//!   clock in µs, so they grow across the counter lost with the primary), and the store refuses
//!   the first owner's stale write.
//! - Synchronous replication: the grant is acknowledged only once the standby flushed it, so
//!   the promoted standby knows the lock is held and refuses the second owner.
//!
//! Each case runs a primary and a standby of its own (real PostgreSQL servers), and prints one
//! summary line.

use std::time::Duration;

use lock_core::{Fenced, LockOptions, Locker};
use lock_postgres::PostgresBackend;
use lock_testkit::{PostgresReplication, PostgresServer};
use tokio::task::block_in_place;

const NAME: &str = "canary-ledger";

/// Long enough that no timing on a loaded machine lets A's lease run out during a case.
const LEASE: Duration = Duration::from_secs(30);

fn options() -> LockOptions<Fenced> {
    LockOptions::new().fenced().fixed_lease(LEASE).no_wait()
}

/// A backend (a client of its own) on `server`. A synchronous commit waits for the standby:
/// give a step more than the default 2 s on a loaded machine.
async fn locker(server: &PostgresServer) -> Locker<PostgresBackend> {
    let backend = PostgresBackend::builder(&server.url())
        .expect("the server's URL")
        .call_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect");
    Locker::new(backend)
}

/// A primary with the schema, and a streaming standby of it.
async fn pair(replication: PostgresReplication) -> (PostgresServer, PostgresServer) {
    let primary = block_in_place(PostgresServer::start).expect("start the primary");
    let config = primary.url().parse().expect("the primary's URL");
    lock_postgres::install_schema(&config)
        .await
        .expect("install the schema");
    let standby = block_in_place(|| PostgresServer::start_standby_of(&primary, replication))
        .expect("start the standby");
    (primary, standby)
}

/// The store the lock protects, on `server`: one row keeping the highest token that wrote.
struct FencedStore {
    client: tokio_postgres::Client,
}

impl FencedStore {
    async fn create(server: &PostgresServer) -> Self {
        let (client, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the store");
        tokio::spawn(connection);
        client
            .batch_execute(
                "CREATE TABLE canary_store (id int PRIMARY KEY, token bigint NOT NULL, \
                 value text NOT NULL); INSERT INTO canary_store VALUES (1, 0, '')",
            )
            .await
            .expect("create the store");
        FencedStore { client }
    }

    /// Writes `value` unless a larger token wrote before; whether it was accepted.
    async fn write(&self, token: u64, value: &str) -> bool {
        let token = i64::try_from(token).expect("a token fits a bigint");
        let updated = self
            .client
            .execute(
                "UPDATE canary_store SET token = $1, value = $2 WHERE id = 1 AND token <= $1",
                &[&token, &value],
            )
            .await
            .expect("write to the store");
        updated == 1
    }

    async fn value(&self) -> String {
        self.client
            .query_one("SELECT value FROM canary_store WHERE id = 1", &[])
            .await
            .expect("read the store")
            .get(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_failover_grants_twice_and_fencing_refuses_the_stale_holder() {
    let (mut primary, mut standby) = pair(PostgresReplication::Asynchronous).await;
    // The standby misses what follows, as a lagging or partitioned one would. (Freezing it
    // is not enough: the primary's WAL sender writes the grant into the connection, the
    // kernel keeps it, and a standby thawed a moment before its promotion reads it.)
    block_in_place(|| standby.detach_from_primary()).expect("cut the standby off");

    let a = locker(&primary).await;
    let guard_a = a.lock_with(NAME, &options()).await.expect("A's grant");
    let token_a = guard_a.fencing_token();

    block_in_place(|| primary.kill()).expect("crash the primary");
    block_in_place(|| standby.promote()).expect("promote the standby");

    let b = locker(&standby).await;
    let granted_b = b.lock_with(NAME, &options()).await;
    let guard_b = granted_b.expect("the canary: the promoted standby grants the lock A holds");
    let token_b = guard_b.fencing_token();
    assert!(
        token_b > token_a,
        "B's token {token_b} must exceed A's {token_a}"
    );

    let store = FencedStore::create(&standby).await;
    assert!(store.write(token_b, "B").await, "B's write is accepted");
    let stale_accepted = store.write(token_a, "A").await;
    assert!(!stale_accepted, "A's stale write is refused");
    assert_eq!(store.value().await, "B");

    // The grant was acknowledged and durable on the primary: its crash recovery finds it.
    // Only replication lost it.
    block_in_place(|| primary.restart()).expect("recover the old primary");
    let old = locker(&primary).await;
    let on_old_primary = old.state(NAME).await.expect("the old primary's state");
    assert_eq!(
        on_old_primary.hold_count(guard_a.owner_field()),
        1,
        "the old primary kept A's grant: {on_old_primary:?}"
    );

    eprintln!(
        "canary async: A granted token {token_a} on the primary; primary killed, standby \
         promoted; B granted too (token {token_b}, +{} µs) while A's {}s lease ran (the \
         recovered old primary still shows A's hold); fenced store: B's write accepted, A's \
         stale write refused",
        token_b - token_a,
        LEASE.as_secs()
    );
    let _ = guard_b.release().await.expect("B releases");
    // A's release goes, in the background, to the old primary it was granted on.
    drop(guard_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_failover_keeps_the_lock_held() {
    let (mut primary, mut standby) = pair(PostgresReplication::Synchronous).await;

    let a = locker(&primary).await;
    // The grant is acknowledged only once the standby flushed it: not while it is frozen.
    // (A slow machine can only make the grant later, never make this check fail.)
    block_in_place(|| standby.freeze()).expect("freeze the standby");
    let options = options();
    let grant = a.lock_with(NAME, &options);
    tokio::pin!(grant);
    let frozen_for = Duration::from_secs(1);
    assert!(
        tokio::time::timeout(frozen_for, &mut grant).await.is_err(),
        "A's grant must wait for the synchronous standby"
    );
    block_in_place(|| standby.thaw()).expect("thaw the standby");
    let guard_a = grant.await.expect("A's grant");
    let token_a = guard_a.fencing_token();

    block_in_place(|| primary.kill()).expect("crash the primary");
    block_in_place(|| standby.promote()).expect("promote the standby");

    let b = locker(&standby).await;
    let refused = b.try_lock(NAME).await.expect("B's attempt");
    assert!(
        refused.is_none(),
        "the promoted standby must refuse B while A's lease lasts"
    );
    let state = b.state(NAME).await.expect("the lock's state");
    assert_eq!(
        state.hold_count(guard_a.owner_field()),
        1,
        "A still holds the lock on the promoted standby: {state:?}"
    );

    eprintln!(
        "canary sync: A's grant waited while the standby was frozen ({frozen_for:?}), then \
         came with token {token_a}; primary killed, standby promoted; B refused (held by A, \
         {:?} of its {}s lease left)",
        state.ttl.unwrap_or_default(),
        LEASE.as_secs()
    );
    drop(guard_a);
}
