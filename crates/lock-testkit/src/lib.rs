//! Test support for distlock: real `redis-server` processes and the backend conformance suite.
//!
//! - [`RedisServer`]: a real server on a free loopback port in a temp dir, with fault controls
//!   (pause, resume, kill, restart), stopped by pid on drop.
//! - [`RedisNodes`]: `n` independent real servers (no replication, no cluster) for tests of
//!   multi-node locks (RedLock, MultiLock), with the same fault controls per node.
//! - [`FaultProxy`]: a loopback TCP proxy in front of a server with faults switchable at run
//!   time (latency, black hole, lost or cut-off replies, refused or reset connections).
//! - [`ReplicatedPair`]: a primary and a replica, with the link cut and the replica promoted
//!   on demand (failover before replication).
//! - Server-side faults on any [`RedisServer`]: [`RedisServer::kill_pubsub_clients`],
//!   [`RedisServer::kill_normal_clients`], [`RedisServer::script_flush`],
//!   [`RedisServer::client_list`].
//! - `tls` (feature `tls`, off by default): `ServerOptions::tls` runs a server, a cluster or
//!   a Sentinel group on TLS only, with certificates made at run time (`TestCerts`).
//! - `containers` (feature `testcontainers`, off by default): the same fixtures with their
//!   servers in containers of an exact image, on the host network; process-based servers are
//!   the default.
//! - [`conformance`]: the behaviour every backend must show, as async functions plus the
//!   [`conformance_tests!`] macro that turns them into one test each;
//!   [`semaphore_conformance`] and [`semaphore_conformance_tests!`] the same for semaphores,
//!   [`latch_conformance`] and [`latch_conformance_tests!`] for countdown latches,
//!   [`permit_conformance`] and [`permit_conformance_tests!`] for lease-bound permits,
//!   [`rw_conformance`] and [`rw_conformance_tests!`] for read-write locks,
//!   [`fair_conformance`] and [`fair_conformance_tests!`] for fair locks,
//!   [`election_conformance`] and [`election_conformance_tests!`] for leader election.
//! - [`FencedResource`]: a protected counter on its own server that refuses stale fencing
//!   tokens, and [`History`]: a recorder of lock holds whose [`check`](History::check) finds
//!   overlaps, lost updates and fence rejections, and draws the holds around a violation as an
//!   SVG timeline under `target/distlock-timelines/` ([`Report::timeline`]).
//! - [`granted`]: a bounded acquire's result with "not acquired" as `Ok(None)`.
//! - [`SpanRecorder`]: a `tracing` subscriber that records the spans a backend reports.
//! - [`assert_nothing_left`] / [`check_nothing_left`]: after a test, no lock key and no
//!   subscription is left on its servers (with a bounded wait for unsubscribes in flight).
//! - [`commandstats`]: how often a server ran a command (`INFO commandstats`).
//! - [`hang_watch`]: a thread that aborts a test binary, naming the test and printing every
//!   thread's stack, when a test hangs where its own timeout cannot fire.
//! - [`faults`]: fault sequences for the batteries ([`faults::single_node`]).
//! - [`assert_battery_verdict`]: the verdict every fault battery ([`run_schedule`]) must reach:
//!   no overlap, no lost update, no fence rejection, enough faults and acquisitions, and
//!   nothing left on the servers.

// On docs.rs (`--cfg docsrs`, nightly) every item that needs a cargo feature gets a badge naming
// it; `doc_cfg` adds them from the `#[cfg]`s alone. Other builds never see the nightly feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod arrivals;
pub mod cluster;
pub mod commandstats;
pub mod conformance;
pub mod election_conformance;
pub mod fair_conformance;
pub mod fault_loop;
pub mod faults;
mod fixture;
pub mod flaky;
pub mod hang_watch;
pub mod history;
pub mod latch_conformance;
pub mod leftovers;
pub mod matrix;
pub mod nodes;
pub mod permit_conformance;
pub mod proxy;
pub mod relock;
pub mod replication;
pub mod resource;
pub mod restrictions;
pub mod rw_conformance;
pub mod schedule;
pub mod semaphore_conformance;
pub mod sentinel;
pub mod server;
pub mod sharing;
pub mod slow_node;
pub mod spans;
mod timeline;
pub mod usage;
pub mod verdict;

#[cfg(feature = "testcontainers")]
pub mod containers;
#[cfg(feature = "tls")]
pub mod tls;

pub use cluster::{FailoverMode, RedisCluster};
pub use conformance::granted;
pub use fault_loop::FaultLoop;
pub use fixture::SharedFixture;
pub use history::{CheckOptions, History, Hold, HoldRecorder, Report, WriteStatus};
pub use leftovers::{Leftovers, ServerLeftovers, assert_nothing_left, check_nothing_left};
pub use nodes::RedisNodes;
pub use proxy::{Fault, FaultProxy};
pub use replication::ReplicatedPair;
pub use resource::{FencedResource, WriteOutcome};
pub use schedule::{FaultFuture, Schedule, ScheduleReport, run_schedule};
pub use sentinel::SentinelGroup;
pub use server::ClientInfo;
pub use server::{
    POSTGRES_BIN_DIR_ENV, POSTGRES_USER, PostgresReplication, PostgresServer, PostgresServerError,
    find_postgres_bin_dir,
};
pub use server::{RedisServer, ServerError, ServerOptions, Twemproxy};
pub use slow_node::SlowNode;
pub use spans::SpanRecorder;
pub use timeline::escape as xml_escape;
#[cfg(feature = "tls")]
pub use tls::TestCerts;
pub use verdict::assert_battery_verdict;
