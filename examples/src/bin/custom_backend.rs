//! A backend written against `lock-core` alone ([`MapBackend`], in
//! `examples/src/custom_backend.rs`) driving the same `Locker` API as Redis: exclusion between
//! clients, re-entry, a waiter woken by a release, a lease that expires, fencing tokens.
//!
//! ```text
//! cargo run -p distlock-examples --bin custom_backend
//! ```
//!
//! No server needed. `examples/tests/custom_backend_conformance.rs` runs the conformance suite
//! on the same backend.

use std::error::Error;
use std::time::Duration;

use distlock::{LockOptions, Locker, ReleaseOutcome};
use distlock_examples::custom_backend::MapBackend;
use tokio::time::{Instant, sleep};

type BoxError = Box<dyn Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // One store, two clients of it: "process A" and "process B".
    let store = MapBackend::new();
    let a = Locker::new(store.clone());
    let b = Locker::new(store.new_client());
    let name = "jobs:nightly-report";

    // 1. Exclusion and re-entry.
    let first = a.lock(name).await?;
    let again = a.lock(name).await?;
    println!(
        "A locked {name:?} twice as the same owner: hold counts {} then {}",
        first.hold_count(),
        again.hold_count()
    );
    println!(
        "B try_lock while A holds it: {:?}",
        b.try_lock(name).await?.map(|_| "got it")
    );
    let state = a.state(name).await?;
    println!(
        "state: holders {:?}, ttl {:?}",
        state.holders,
        state.ttl.map(|ttl| ttl.as_millis())
    );

    // 2. A waiter is woken by the release (through the backend's ReleaseHub), not by a timer.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let guard = b.lock(name).await?;
            let acquired_at = Instant::now();
            let outcome = guard.release().await?;
            Ok::<_, BoxError>((acquired_at, outcome))
        }
    });
    sleep(Duration::from_millis(100)).await;
    println!("A release #1: {:?}", again.release().await?);
    let released_at = Instant::now();
    println!("A release #2: {:?}", first.release().await?);
    let (acquired_at, outcome) = waiter.await??;
    println!(
        "B, waiting meanwhile, got the lock {} µs after A's last release, then released it: {outcome:?}",
        acquired_at
            .saturating_duration_since(released_at)
            .as_micros()
    );

    // 3. A fixed lease runs out by itself; lost() says so and the release reports NotHeld.
    let lease = Duration::from_millis(200);
    let guard = a
        .lock_with(name, &LockOptions::new().fixed_lease(lease))
        .await?;
    let loss = guard.lost().await;
    println!("A held it with a fixed {lease:?} lease: lost() -> {loss:?}");
    let by_b = b.try_lock(name).await?.ok_or("the lease ran out")?;
    println!("B takes the expired lock at once");
    println!(
        "A release after expiry: {:?} (B's hold is untouched)",
        guard.release().await?
    );
    assert!(by_b.release().await?.was_held());

    // 4. Fencing tokens increase with every grant, whoever gets it.
    let fenced = LockOptions::new().fenced();
    let mut tokens = Vec::new();
    for locker in [&a, &b, &a] {
        let guard = locker.lock_with(name, &fenced).await?;
        tokens.push(guard.fencing_token());
        assert_eq!(guard.release().await?, ReleaseOutcome::Released);
    }
    println!("fencing tokens of three grants: {tokens:?}");
    Ok(())
}
