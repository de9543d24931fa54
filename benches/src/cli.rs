//! `lockbench`'s command line: a subcommand per workload, named by what it measures, with its
//! own flags (each workload's `Args`, next to it in `w*.rs`) and the settings every run takes
//! ([`Shared`]); `suite` runs a chosen set of workloads in one run with every workload's flags,
//! and `plot` draws a picture from a `--json` file.
//!
//! Whatever the subcommand, a run is a [`Suite`]: a single workload's subcommand is the suite of
//! that one workload, the other workloads' settings left at their defaults.

use std::path::PathBuf;

use clap::{FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::contenders::Kind;
use crate::{postgres, w1, w2, w3, w4, w5, w6, w7, w8, w8w, w9, w10};

/// Measures distlock's lock + unlock against raw-protocol floors and rslock.
#[derive(Debug, Parser)]
#[command(
    name = "lockbench",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The workloads (each with its W-number, which the tables of docs/performance.md name), a suite
/// of them, or a picture.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// W1: one task, lock + unlock on a fresh name per pair: each row's uncontended latency.
    Uncontended {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        rows: Rows,
        #[command(flatten)]
        w1: w1::Args,
    },
    /// W2: many tasks on one client, each on fresh names of its own: throughput without
    /// contention.
    DistinctNames {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        rows: Rows,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w2: w2::Args,
    },
    /// W3: tasks contending on one name: handoffs, the release -> next-acquire wait.
    Handoffs {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        slices: Slices,
        #[command(flatten)]
        w3: w3::Args,
    },
    /// W4: one task over several independent servers: MultiLock, RedLock and rslock's Redlock.
    Redlock {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w4: w4::Args,
        #[command(flatten)]
        pairs: w1::Pairs,
    },
    /// W5: locks held under the watchdog: renewal calls, client CPU and memory per lock.
    Renewals {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w5: w5::Args,
    },
    /// W6: waiters on distinct held locks: the waiting client's connections, wake-up latency.
    WakeUps {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w6: w6::Args,
    },
    /// W7: tasks taking and giving back one permit of a semaphore.
    Semaphore {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w7: w7::Args,
    },
    /// W8: tasks taking and releasing the read lock of one name (and the same tasks on the
    /// exclusive lock).
    ReadLock {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w8: w8::Args,
    },
    /// W8W: readers back to back on a read lock and one writer trying to get in: the writer's
    /// wait.
    WriterWait {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w8w: w8w::Args,
    },
    /// W9: tasks handing a fair lock (and a plain one) on: the wait for the grant, arrival
    /// order.
    FairHandoffs {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w9: w9::Args,
    },
    /// W10: leader election failover: a leader crashes (or resigns) and a waiting candidate
    /// takes over, per lease.
    Failover {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w10: w10::Args,
    },
    /// W1C: W1 (uncontended) on a 3-primary cluster, distlock against a raw redis-rs cluster
    /// client.
    UncontendedCluster {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        rows: Rows,
        #[command(flatten)]
        w1: w1::Args,
    },
    /// W2C: W2 (distinct-names) on a 3-primary cluster, distlock against a raw redis-rs cluster
    /// client.
    DistinctNamesCluster {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        rows: Rows,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w2: w2::Args,
    },
    /// W5C: W5 (renewals) on a 3-primary cluster: renewal calls and round trips per node.
    RenewalsCluster {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w5: w5::Args,
    },
    /// W1A: W1 (uncontended) on a primary with one replica: each distlock row with and without
    /// replica acknowledgement.
    UncontendedAcked {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        rows: Rows,
        #[command(flatten)]
        w1: w1::Args,
    },
    /// W2A: W2 (distinct-names) on a primary with one replica: each distlock row with and
    /// without replica acknowledgement.
    DistinctNamesAcked {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        rows: Rows,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w2: w2::Args,
    },
    /// W1P: W1 (uncontended) on PostgreSQL: distlock against its own SQL on a bare client and
    /// against advisory locks.
    UncontendedPostgres {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        w1: w1::Args,
        #[command(flatten)]
        postgres: postgres::Args,
    },
    /// W2P: W2 (distinct-names) on PostgreSQL: distlock against its own SQL on a bare client and
    /// against advisory locks.
    DistinctNamesPostgres {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        paced: Paced,
        #[command(flatten)]
        w2: w2::Args,
        #[command(flatten)]
        postgres: postgres::Args,
    },
    /// W3P: W3 (handoffs) on PostgreSQL: distlock's LISTEN wake-ups against its own SQL retried
    /// every 2 ms and against blocking advisory locks.
    HandoffsPostgres {
        #[command(flatten)]
        shared: Shared,
        #[command(flatten)]
        slices: Slices,
        #[command(flatten)]
        w3: w3::Args,
        #[command(flatten)]
        postgres: postgres::Args,
    },
    /// Several workloads in one run (rows interleaved per round): every row, the ratios, the
    /// targets, one JSON file and one picture. Each workload takes its subcommand's flags.
    Suite(Box<Suite>),
    /// Run nothing: draw the picture of `--plot` from the rows of a `--json` file.
    Plot {
        /// The JSON file written by a run's `--json`.
        #[arg(long)]
        from: PathBuf,
        /// The SVG file to write.
        #[arg(long)]
        to: PathBuf,
    },
}

/// The settings of every run.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "shared")]
pub struct Shared {
    /// The workloads on one server (W1, W2, W3, W5–W10): use this server instead of starting a
    /// throw-away `redis-server`.
    #[arg(long)]
    pub url: Option<String>,
    /// Run every workload × row this many times, interleaved; the summary and the ratios use
    /// each row's median round.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Tokio worker threads (1 = current-thread runtime).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Skip `redis-benchmark` (never run against `--url`, as it writes a key of its own).
    #[arg(long)]
    pub no_redis_benchmark: bool,
    /// Also write the results to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw the summary rows (each row's median round) to this SVG file: one panel per
    /// workload, ops/s and p99 latency side by side.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// A seconds-long pass for CI: overrides the counts (`--iterations 300 --w4-iterations 300
    /// --warmup 50 --chunk 100 --duration 0.5 --slices 2 --w3-duration 1 --locks 1000
    /// --w5-periods 1 --waiters 500 --w8w-duration 1 --w8w-give-up 1 --w10-leases-ms 1000
    /// --w10-failovers 1 --w10-handovers 3`, no `--per-task`: those of the workloads run) and
    /// skips `redis-benchmark`.
    #[arg(long)]
    pub smoke: bool,
}

/// The rows of W1 and W2 (and of W1C, W2C, W1A, W2A).
#[derive(Clone, Debug, clap::Args)]
#[group(id = "rows")]
pub struct Rows {
    /// Contenders to run (default: all; W1C and W2C: `ping2`, `raw-script`, `distlock-fixed`,
    /// `distlock-lock`, `distlock-fast`, and only those and the other distlock rows; W1A and
    /// W2A: `distlock-lock`, `distlock-fast-lock`, and only distlock rows).
    #[arg(long, value_delimiter = ',')]
    pub contenders: Option<Vec<Kind>>,
    /// W1, W2 distlock rows: hold this many watchdog locks on the same locker while measuring (a
    /// non-empty watchdog registry).
    #[arg(long, default_value_t = 0)]
    pub background_holds: usize,
}

/// The measured time of the timed workloads (W2, W2C, W2A, W2P, W7, W8, W9) and its slices.
#[derive(Clone, Debug, clap::Args)]
pub struct Paced {
    /// Measured seconds per row.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    #[command(flatten)]
    pub slices: Slices,
}

impl Paced {
    /// `--smoke`'s duration and slices.
    fn smoke(&mut self) {
        self.duration = 0.5;
        self.slices.slices = 2;
    }
}

/// The slices of the timed workloads (and of W3, which has a duration of its own).
#[derive(Clone, Debug, clap::Args)]
pub struct Slices {
    /// The measured phase of each row is cut into this many slices, which take turns between the
    /// rows.
    #[arg(long, default_value_t = 6)]
    pub slices: u32,
}

/// A set of workloads in one run, each with its own settings.
#[derive(Debug, clap::Args)]
pub struct Suite {
    /// Workloads to run, in this order (their W-numbers or their subcommands' names).
    #[arg(long, value_delimiter = ',', default_value = "w1,w2")]
    pub workloads: Vec<Workload>,
    #[command(flatten)]
    pub shared: Shared,
    #[command(flatten, next_help_heading = "Rows of W1, W2, W1C, W2C, W1A, W2A")]
    pub rows: Rows,
    #[command(
        flatten,
        next_help_heading = "Timed workloads: --duration W2, W7, W8, W9; --slices those and W3"
    )]
    pub paced: Paced,
    #[command(
        flatten,
        next_help_heading = "W1, W1C, W1A: uncontended (--warmup, --chunk: also W4)"
    )]
    pub w1: w1::Args,
    #[command(flatten, next_help_heading = "W2, W2C, W2A: distinct-names")]
    pub w2: w2::Args,
    #[command(flatten, next_help_heading = "W3: handoffs")]
    pub w3: w3::Args,
    #[command(flatten, next_help_heading = "W4: redlock")]
    pub w4: w4::Args,
    #[command(flatten, next_help_heading = "W5, W5C: renewals")]
    pub w5: w5::Args,
    #[command(flatten, next_help_heading = "W6: wake-ups")]
    pub w6: w6::Args,
    #[command(flatten, next_help_heading = "W7: semaphore")]
    pub w7: w7::Args,
    #[command(flatten, next_help_heading = "W8: read-lock")]
    pub w8: w8::Args,
    #[command(flatten, next_help_heading = "W8W: writer-wait")]
    pub w8w: w8w::Args,
    #[command(flatten, next_help_heading = "W9: fair-handoffs")]
    pub w9: w9::Args,
    #[command(flatten, next_help_heading = "W10: failover")]
    pub w10: w10::Args,
    #[command(
        flatten,
        next_help_heading = "W1P, W2P, W3P: PostgreSQL (their loops take W1's, W2's, W3's flags)"
    )]
    pub postgres: postgres::Args,
}

impl Suite {
    /// `workload` alone, every setting but `shared` at its default.
    fn of(workload: Workload, shared: Shared) -> Self {
        Suite {
            workloads: vec![workload],
            shared,
            rows: defaults(),
            paced: defaults(),
            w1: defaults(),
            w2: defaults(),
            w3: defaults(),
            w4: defaults(),
            w5: defaults(),
            w6: defaults(),
            w7: defaults(),
            w8: defaults(),
            w8w: defaults(),
            w9: defaults(),
            w10: defaults(),
            postgres: defaults(),
        }
    }

    /// Applies `--smoke`.
    pub fn smoke(&mut self) {
        self.shared.no_redis_benchmark = true;
        self.paced.smoke();
        self.w1.smoke();
        self.w2.smoke();
        self.w3.smoke();
        self.w4.smoke();
        self.w5.smoke();
        self.w6.smoke();
        self.w8w.smoke();
        self.w10.smoke();
    }
}

/// `T` as the command line leaves it when none of its flags is given.
fn defaults<T: clap::Args + FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults"));
    T::from_arg_matches(&command.get_matches_from(["defaults"]))
        .expect("every flag of a workload has a default")
}

/// What a command line asks for.
pub enum Plan {
    /// Run these workloads.
    Run(Box<Suite>),
    /// Draw the rows of a JSON file (`from`) to an SVG file (`to`).
    Plot { from: PathBuf, to: PathBuf },
}

impl Command {
    /// The run a subcommand stands for.
    pub fn plan(self) -> Plan {
        use Workload as W;
        let suite = match self {
            Command::Suite(suite) => *suite,
            Command::Plot { from, to } => return Plan::Plot { from, to },
            Command::Uncontended { shared, rows, w1 } => Suite {
                rows,
                w1,
                ..Suite::of(W::W1, shared)
            },
            Command::DistinctNames {
                shared,
                rows,
                paced,
                w2,
            } => Suite {
                rows,
                paced,
                w2,
                ..Suite::of(W::W2, shared)
            },
            Command::Handoffs { shared, slices, w3 } => Suite {
                paced: Paced {
                    slices,
                    ..defaults()
                },
                w3,
                ..Suite::of(W::W3, shared)
            },
            Command::Redlock { shared, w4, pairs } => {
                let w1 = w1::Args {
                    pairs,
                    ..defaults()
                };
                Suite {
                    w1,
                    w4,
                    ..Suite::of(W::W4, shared)
                }
            }
            Command::Renewals { shared, w5 } => Suite {
                w5,
                ..Suite::of(W::W5, shared)
            },
            Command::WakeUps { shared, w6 } => Suite {
                w6,
                ..Suite::of(W::W6, shared)
            },
            Command::Semaphore { shared, paced, w7 } => Suite {
                paced,
                w7,
                ..Suite::of(W::W7, shared)
            },
            Command::ReadLock { shared, paced, w8 } => Suite {
                paced,
                w8,
                ..Suite::of(W::W8, shared)
            },
            Command::WriterWait { shared, w8w } => Suite {
                w8w,
                ..Suite::of(W::W8w, shared)
            },
            Command::FairHandoffs { shared, paced, w9 } => Suite {
                paced,
                w9,
                ..Suite::of(W::W9, shared)
            },
            Command::Failover { shared, w10 } => Suite {
                w10,
                ..Suite::of(W::W10, shared)
            },
            Command::UncontendedCluster { shared, rows, w1 } => Suite {
                rows,
                w1,
                ..Suite::of(W::W1c, shared)
            },
            Command::DistinctNamesCluster {
                shared,
                rows,
                paced,
                w2,
            } => Suite {
                rows,
                paced,
                w2,
                ..Suite::of(W::W2c, shared)
            },
            Command::RenewalsCluster { shared, w5 } => Suite {
                w5,
                ..Suite::of(W::W5c, shared)
            },
            Command::UncontendedAcked { shared, rows, w1 } => Suite {
                rows,
                w1,
                ..Suite::of(W::W1a, shared)
            },
            Command::DistinctNamesAcked {
                shared,
                rows,
                paced,
                w2,
            } => Suite {
                rows,
                paced,
                w2,
                ..Suite::of(W::W2a, shared)
            },
            Command::UncontendedPostgres {
                shared,
                w1,
                postgres,
            } => Suite {
                w1,
                postgres,
                ..Suite::of(W::W1p, shared)
            },
            Command::DistinctNamesPostgres {
                shared,
                paced,
                w2,
                postgres,
            } => Suite {
                paced,
                w2,
                postgres,
                ..Suite::of(W::W2p, shared)
            },
            Command::HandoffsPostgres {
                shared,
                slices,
                w3,
                postgres,
            } => Suite {
                paced: Paced {
                    slices,
                    ..defaults()
                },
                w3,
                postgres,
                ..Suite::of(W::W3p, shared)
            },
        };
        Plan::Run(Box::new(suite))
    }
}

/// The workloads, as `suite --workloads` names them: by W-number or by subcommand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// `uncontended`: one task, fresh name per pair.
    #[value(alias = "uncontended")]
    W1,
    /// `distinct-names`: `--tasks` tasks on one client, fresh names.
    #[value(alias = "distinct-names")]
    W2,
    /// `handoffs`: `--w3-tasks` tasks contending on one name: handoffs, release → acquire wait.
    #[value(alias = "handoffs")]
    W3,
    /// `redlock`: one task, fresh name per pair, MultiLock / RedLock / rslock over `--nodes`
    /// nodes.
    #[value(alias = "redlock")]
    W4,
    /// `renewals`: `--locks` locks held under the watchdog: renewal calls, client CPU and memory
    /// per lock.
    #[value(alias = "renewals")]
    W5,
    /// `wake-ups`: `--waiters` waiters on distinct held locks: connections used, wake-up
    /// latency.
    #[value(alias = "wake-ups")]
    W6,
    /// `semaphore`: `--w7-tasks` tasks taking and giving back one permit of a `--w7-permits`
    /// semaphore.
    #[value(alias = "semaphore")]
    W7,
    /// `read-lock`: `--w8-tasks` tasks taking and releasing the read lock of one name; the same
    /// tasks on the exclusive lock.
    #[value(alias = "read-lock")]
    W8,
    /// `writer-wait`: `--w8w-readers` readers back to back on a read lock and one writer trying
    /// to get in: the writer's wait.
    #[value(alias = "writer-wait")]
    W8w,
    /// `uncontended-cluster`: W1 on a 3-primary cluster.
    #[value(alias = "uncontended-cluster")]
    W1c,
    /// `distinct-names-cluster`: W2 on a 3-primary cluster.
    #[value(alias = "distinct-names-cluster")]
    W2c,
    /// `renewals-cluster`: W5 on a 3-primary cluster: renewal calls and round trips per node.
    #[value(alias = "renewals-cluster")]
    W5c,
    /// `uncontended-acked`: W1 on a primary with one replica, with and without replica
    /// acknowledgement.
    #[value(alias = "uncontended-acked")]
    W1a,
    /// `distinct-names-acked`: W2 on a primary with one replica, with and without replica
    /// acknowledgement.
    #[value(alias = "distinct-names-acked")]
    W2a,
    /// `fair-handoffs`: `--w9-tasks` tasks handing a fair lock (and a plain one) on: waits,
    /// arrival order.
    #[value(alias = "fair-handoffs")]
    W9,
    /// `failover`: leader election failover, for each lease of `--w10-leases-ms`.
    #[value(alias = "failover")]
    W10,
    /// `uncontended-postgres`: W1 on PostgreSQL (distlock, its SQL on a bare client, advisory
    /// locks).
    #[value(alias = "uncontended-postgres")]
    W1p,
    /// `distinct-names-postgres`: W2 on PostgreSQL.
    #[value(alias = "distinct-names-postgres")]
    W2p,
    /// `handoffs-postgres`: W3 on PostgreSQL: LISTEN wake-ups, polling, blocking advisory
    /// locks.
    #[value(alias = "handoffs-postgres")]
    W3p,
}

impl Workload {
    /// The workload's label in rows, ratios and targets (`W1`, `W2C`, ...).
    pub fn label(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W5 => "W5",
            Workload::W6 => "W6",
            Workload::W7 => "W7",
            Workload::W8 => "W8",
            Workload::W8w => "W8W",
            Workload::W1c => "W1C",
            Workload::W2c => "W2C",
            Workload::W5c => "W5C",
            Workload::W1a => "W1A",
            Workload::W2a => "W2A",
            Workload::W9 => "W9",
            Workload::W10 => "W10",
            Workload::W1p => "W1P",
            Workload::W2p => "W2P",
            Workload::W3p => "W3P",
        }
    }

    /// W1, W2, W3, W5, W6, W7, W8, W8W and W9 run on one server (`--url` or a throw-away one).
    fn single_server(self) -> bool {
        matches!(
            self,
            Workload::W1
                | Workload::W2
                | Workload::W3
                | Workload::W5
                | Workload::W6
                | Workload::W7
                | Workload::W8
                | Workload::W8w
                | Workload::W9
        )
    }

    /// W1C, W2C and W5C run on a throw-away cluster.
    pub fn on_cluster(self) -> bool {
        matches!(self, Workload::W1c | Workload::W2c | Workload::W5c)
    }

    /// W1A and W2A run on a throw-away primary with one replica.
    pub fn on_replicated_pair(self) -> bool {
        matches!(self, Workload::W1a | Workload::W2a)
    }

    /// Whether the workload needs the one server: the single-server workloads and W10.
    pub fn on_one_server(self) -> bool {
        self.single_server() || self == Workload::W10
    }

    /// W1P, W2P and W3P run on PostgreSQL (`--postgres-url` or a throw-away server).
    pub fn on_postgres(self) -> bool {
        matches!(self, Workload::W1p | Workload::W2p | Workload::W3p)
    }
}

/// Checks the command line's definition (flags defined once, each workload's in the suite too).
#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_subcommand_is_the_suite_of_its_workload() {
        let cli = Cli::parse_from(["lockbench", "handoffs", "--w3-tasks", "4", "--slices", "3"]);
        let Plan::Run(suite) = cli.command.plan() else {
            panic!("handoffs runs")
        };
        assert_eq!(suite.workloads, [Workload::W3]);
        assert_eq!((suite.w3.w3_tasks, suite.paced.slices.slices), (4, 3));
        assert_eq!(suite.w1.iterations, 20_000);
    }

    #[test]
    fn the_postgres_workloads_take_their_loops_flags() {
        let cli = Cli::parse_from([
            "lockbench",
            "suite",
            "--workloads",
            "w1p,distinct-names-postgres,handoffs-postgres",
            "--iterations",
            "500",
            "--w3-tasks",
            "4",
            "--pg-contenders",
            "raw-sql,distlock-lock",
        ]);
        let Plan::Run(suite) = cli.command.plan() else {
            panic!("the suite runs")
        };
        assert_eq!(
            suite.workloads,
            [Workload::W1p, Workload::W2p, Workload::W3p]
        );
        assert!(
            suite
                .workloads
                .iter()
                .all(|workload| workload.on_postgres())
        );
        assert_eq!((suite.w1.iterations, suite.w3.w3_tasks), (500, 4));
        assert_eq!(suite.postgres.pg_connections, 4);
        let cli = Cli::parse_from(["lockbench", "handoffs-postgres", "--w3p-retry-ms", "5"]);
        let Plan::Run(suite) = cli.command.plan() else {
            panic!("handoffs-postgres runs")
        };
        assert_eq!(suite.workloads, [Workload::W3p]);
        assert_eq!(suite.postgres.w3p_retry_ms, 5);
    }

    #[test]
    fn the_suite_takes_every_workloads_flags_and_names() {
        let cli = Cli::parse_from([
            "lockbench",
            "suite",
            "--workloads",
            "w1,redlock,w10",
            "--warmup",
            "7",
            "--nodes",
            "2",
        ]);
        let Plan::Run(suite) = cli.command.plan() else {
            panic!("the suite runs")
        };
        let expected = [Workload::W1, Workload::W4, Workload::W10];
        assert_eq!(suite.workloads, expected);
        assert!(
            !suite
                .workloads
                .iter()
                .any(|workload| workload.on_postgres())
        );
        assert_eq!(
            (suite.w1.pairs.warmup, suite.w4.nodes.clone()),
            (7, vec![2])
        );
    }
}
