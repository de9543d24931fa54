//! Real `redis-server` (or `valkey-server`) processes for tests, with fault controls.
//!
//! [`RedisServer`] spawns a throw-away server on a free loopback port, in its own temporary
//! directory, and lets a test [`pause`](RedisServer::pause), [`resume`](RedisServer::resume),
//! [`kill`](RedisServer::kill), [`restart`](RedisServer::restart) or
//! [`stop`](RedisServer::stop) it. The process never outlives its [`RedisServer`] (it is
//! killed on drop) nor, on Linux, the test process itself (it gets `SIGKILL` through
//! `PR_SET_PDEATHSIG` when the test process dies, even by `SIGKILL`).
//!
//! The server binary is found by [`find_server_binary`]: the `DISTLOCK_REDIS_SERVER`
//! environment variable, else `redis-server` on `PATH`, else `valkey-server` on `PATH`.
//!
//! Fault controls use POSIX signals and are only available on Unix. Server-side faults
//! (closing client connections, flushing the script cache) and `CLIENT LIST` are sent as
//! commands: see [`RedisServer::kill_pubsub_clients`] and the methods next to it.

mod binary;
mod client_info;
mod commands;
#[cfg(feature = "testcontainers")]
pub(crate) mod container;
mod error;
pub(crate) mod info;
mod launch;
mod options;
mod ports;
mod postgres;
mod probe;
mod process;
mod signals;
mod spawn;
mod twemproxy;

pub use binary::{SERVER_BINARY_ENV, find_server_binary};
pub use client_info::ClientInfo;
pub use error::ServerError;
pub use options::ServerOptions;
pub use postgres::{
    POSTGRES_BIN_DIR_ENV, POSTGRES_USER, PostgresReplication, PostgresServer, PostgresServerError,
    find_postgres_bin_dir,
};
pub use process::RedisServer;
pub use twemproxy::{TWEMPROXY_BINARY_ENV, Twemproxy, find_twemproxy_binary};
