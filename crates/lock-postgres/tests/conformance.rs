//! The lock conformance suite against a real PostgreSQL server (one per test binary, shared by
//! its cases: every case uses fresh names), with `LISTEN`/`NOTIFY` wake-ups, and again with
//! waiters that poll.

use std::sync::Arc;
use std::time::Duration;

use lock_postgres::PostgresBackend;
use lock_testkit::conformance::Harness;
use lock_testkit::{PostgresServer, SharedFixture};

static SERVER: SharedFixture<PostgresServer> = SharedFixture::new();

/// The shared server, with the schema installed once.
fn server() -> Arc<PostgresServer> {
    SERVER.get_or_start(|| {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = server.url();
        // The cases run inside a runtime; the installation gets one of its own.
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(async {
                    let config = url.parse().expect("the server's URL");
                    lock_postgres::install_schema(&config).await
                })
        })
        .join()
        .expect("the installing thread")
        .expect("install the schema");
        server
    })
}

struct Postgres {
    server: Arc<PostgresServer>,
    /// `Some`: waiters poll at this interval instead of listening.
    poll: Option<Duration>,
}

impl Harness for Postgres {
    type Backend = PostgresBackend;

    async fn client(&self) -> PostgresBackend {
        let mut builder = PostgresBackend::builder(&self.server.url()).expect("the server's URL");
        if let Some(interval) = self.poll {
            builder = builder.listen(false).poll_interval(interval);
        }
        builder.connect().await.expect("connect to the test server")
    }
}

fn listening() -> Postgres {
    Postgres {
        server: server(),
        poll: None,
    }
}

fn polling() -> Postgres {
    Postgres {
        server: server(),
        poll: Some(Duration::from_millis(50)),
    }
}

mod listen {
    use super::*;
    lock_testkit::conformance_tests!(listening());
}

mod poll {
    use super::*;
    lock_testkit::conformance_tests!(polling());
}
