//! The two tiers of the API stay apart and documented: lock-core lists the application's names
//! once (`lock_core::api`) and the backend author's once (`lock_core::backend`); this crate's root
//! is the first list, its `backend` module the second, and its crate docs name every root item.
//! Read from the sources, so a name added to one list without its place in the other files
//! fails here.

use std::collections::BTreeSet;

const CORE_LIB: &str = include_str!("../../lock-core/src/lib.rs");
const FACADE_LIB: &str = include_str!("../src/lib.rs");

/// The names re-exported by the `pub use` items inside `pub mod <module> { ... }` of `source`.
fn names_in_module(source: &str, module: &str) -> BTreeSet<String> {
    let start = source
        .find(&format!("pub mod {module} {{"))
        .unwrap_or_else(|| panic!("lock-core's lib.rs has no inline `pub mod {module}`"));
    let body = &source[start..];
    let end = body.find("\n}\n").expect("the module ends");
    let body = &body[..end];
    let mut names = BTreeSet::new();
    for item in body.split("pub use ").skip(1) {
        let item = &item[..item.find(';').expect("a use item ends")];
        let list = match item.find('{') {
            Some(open) => &item[open + 1..item.rfind('}').expect("a use list closes")],
            None => item.rsplit("::").next().expect("a path"),
        };
        for name in list.split(',') {
            let name = name.trim();
            if !name.is_empty() {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_tiers_are_disjoint_and_the_root_is_derived_from_them() {
    let api = names_in_module(CORE_LIB, "api");
    let backend = names_in_module(CORE_LIB, "backend");
    assert!(api.len() >= 20, "{api:?}");
    assert!(backend.len() >= 10, "{backend:?}");
    let both: Vec<_> = api.intersection(&backend).collect();
    assert!(both.is_empty(), "in both tiers: {both:?}");
    // lock-core's root is the two lists and nothing else.
    let root_uses: Vec<&str> = CORE_LIB
        .lines()
        .filter(|line| line.starts_with("pub use "))
        .collect();
    assert_eq!(root_uses, ["pub use api::*;", "pub use backend::*;"]);
    // The facade derives its root and its backend module from them.
    assert!(FACADE_LIB.contains("\npub use lock_core::api::*;\n"));
    assert!(FACADE_LIB.contains("    pub use lock_core::backend::*;\n"));
}

#[test]
fn the_application_tier_holds_no_contract() {
    for name in names_in_module(CORE_LIB, "api") {
        let contract_like = (name.ends_with("Backend") && name != "MemoryBackend")
            || name.ends_with("Side")
            || [
                "AcquireRequest",
                "AcquireOutcome",
                "Grant",
                "Renewal",
                "RenewOutcome",
            ]
            .contains(&name.as_str());
        assert!(
            !contract_like,
            "{name} is for backend authors: list it in lock_core::backend"
        );
    }
}

#[test]
fn the_crate_docs_name_every_root_item() {
    let docs: String = FACADE_LIB
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    for name in names_in_module(CORE_LIB, "api") {
        assert!(
            docs.contains(&format!("[`{name}`]")),
            "the crate docs' table of root names lacks [`{name}`]"
        );
    }
}

/// A handle on every primitive from one `Locker`, each as the crate docs' chooser shows it.
#[tokio::test(flavor = "current_thread")]
async fn every_primitive_is_reached_from_a_locker() -> distlock::Result<()> {
    let locker = distlock::Locker::new(distlock::MemoryBackend::new());
    assert!(locker.lock("tiers:lock").await?.release().await?.was_held());
    assert!(
        locker
            .fair("tiers:fair")?
            .lock()
            .await?
            .release()
            .await?
            .was_held()
    );
    let rw = locker.read_write("tiers:rw")?;
    assert!(rw.write().await?.release().await?.was_held());
    let permits = locker.permits("tiers:permits")?;
    permits.try_set_permits(1).await?;
    assert!(permits.acquire().await?.release().await?.was_held());
    let semaphore = locker.semaphore("tiers:semaphore")?;
    semaphore.try_set_permits(1).await?;
    semaphore.acquire(1).await?;
    let latch = locker.latch("tiers:latch")?;
    latch.try_set_count(1).await?;
    latch.count_down().await?;
    latch.wait().await?;
    let leadership = locker.election("tiers:election")?.campaign("me").await?;
    assert!(leadership.resign().await?);
    Ok(())
}
