//! Shared code of the distlock demos (`cargo run -p distlock-examples --bin <name>`):
//!
//! - `counter`: many tasks, optionally over several processes, increment a Redis counter with a
//!   deliberately non-atomic GET + SET under one lock; the total comes out exact.
//! - `watchdog`: a job that outlives its lease keeps the lock thanks to the watchdog.
//! - `custom_backend`: [`custom_backend::MapBackend`], a backend written against `lock-core`
//!   alone, at work.
//! - `pick_backend`: the same application code under a single-node lock or, built with
//!   `--features redlock`, a RedLock over several nodes.
//!
//! The Redis demos take `--url`; without it they start a private `redis-server` through
//! [`lock_testkit::RedisServer`] (see [`DemoRedis`]).

pub mod custom_backend;

use std::process::ExitCode;

use lock_testkit::{RedisServer, ServerError};

/// The exit code of a demo that could not get a Redis server.
pub const NO_SERVER_EXIT_CODE: u8 = 2;

/// The Redis a demo talks to: the server at a URL given with `--url`, or a private server started
/// for this run and stopped when this value is dropped.
#[derive(Debug)]
pub struct DemoRedis {
    url: String,
    server: Option<RedisServer>,
}

impl DemoRedis {
    /// Uses `url` when given; otherwise starts a private server and says so on stdout.
    ///
    /// # Errors
    ///
    /// When no server could be started: the testkit's error (which says what to install when no
    /// server binary is found) is printed on stderr, and the exit code to end with
    /// ([`NO_SERVER_EXIT_CODE`]) is returned.
    pub fn from_arg(url: Option<String>) -> Result<DemoRedis, ExitCode> {
        if let Some(url) = url {
            return Ok(DemoRedis { url, server: None });
        }
        match RedisServer::start() {
            Ok(server) => {
                println!(
                    "no --url given: started a private server ({}, {}) at {}; it stops when the demo ends",
                    server.version(),
                    server.binary().display(),
                    server.url()
                );
                Ok(DemoRedis {
                    url: server.url(),
                    server: Some(server),
                })
            }
            Err(error) => {
                if let ServerError::BinaryNotFound { .. } = error {
                    eprintln!("error: no --url given and no server to start: {error}");
                    eprintln!("(or pass --url redis://host:port/ to use a running server)");
                } else {
                    eprintln!(
                        "error: no --url given and the private server did not start: {error}"
                    );
                }
                Err(ExitCode::from(NO_SERVER_EXIT_CODE))
            }
        }
    }

    /// The URL to connect to.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether this run started its own server.
    #[must_use]
    pub fn is_private(&self) -> bool {
        self.server.is_some()
    }

    /// A raw connection for reads the lock API does not offer (`HGETALL`, `PTTL`, ...).
    ///
    /// # Errors
    ///
    /// When the URL is bad or the server cannot be reached.
    pub async fn raw_connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        raw_connection(&self.url).await
    }
}

/// A raw multiplexed connection to `url`, for plain commands next to the locks.
///
/// # Errors
///
/// When the URL is bad or the server cannot be reached.
pub async fn raw_connection(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}
