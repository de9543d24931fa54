//! The spans a Redis lock reports: `distlock.acquire` and `distlock.release` carry the lock's
//! kind and the node that served the call, against a real server.
//!
//! A small subscriber of our own records every span's fields (no subscriber crate needed);
//! it is the thread's default, and the runtime is single-threaded, so it sees every span.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lock_core::Locker;
use lock_redis::{LockKind, RedisBackend};
use lock_testkit::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// A span's name and the fields recorded on it.
type Recorded = (&'static str, HashMap<String, String>);

/// Each span's name and the fields recorded on it, by span id, and the spans entered (for
/// `Span::current()`, which the backend records the node on).
#[derive(Clone, Default)]
struct Spans {
    next: Arc<AtomicU64>,
    seen: Arc<Mutex<HashMap<u64, Recorded>>>,
    metadata: Arc<Mutex<HashMap<u64, &'static Metadata<'static>>>>,
    entered: Arc<Mutex<Vec<u64>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _metadata: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = HashMap::new();
        span.record(&mut Fields(&mut fields));
        self.seen
            .lock()
            .unwrap()
            .insert(id, (span.metadata().name(), fields));
        self.metadata.lock().unwrap().insert(id, span.metadata());
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some((_, fields)) = self.seen.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, _event: &Event<'_>) {}

    fn enter(&self, span: &Id) {
        self.entered.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut entered = self.entered.lock().unwrap();
        if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
            entered.remove(at);
        }
    }

    fn current_span(&self) -> Current {
        let Some(&id) = self.entered.lock().unwrap().last() else {
            return Current::none();
        };
        match self.metadata.lock().unwrap().get(&id) {
            Some(metadata) => Current::new(Id::from_u64(id), metadata),
            None => Current::none(),
        }
    }
}

impl Spans {
    /// The fields of every span named `name`, in creation order.
    fn named(&self, name: &str) -> Vec<HashMap<String, String>> {
        let seen = self.seen.lock().unwrap();
        let mut spans: Vec<_> = seen
            .iter()
            .filter(|(_, (span, _))| *span == name)
            .map(|(id, (_, fields))| (*id, fields.clone()))
            .collect();
        spans.sort_by_key(|(id, _)| *id);
        spans.into_iter().map(|(_, fields)| fields).collect()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn acquire_and_release_spans_name_the_kind_and_the_node() {
    let server = RedisServer::start().expect("start redis-server");
    let node = format!("127.0.0.1:{}", server.port());
    for (kind, label) in [(LockKind::Reentrant, "reentrant"), (LockKind::Fast, "fast")] {
        let spans = Spans::default();
        let _default = tracing::subscriber::set_default(spans.clone());
        let backend = RedisBackend::builder(server.url())
            .lock_kind(kind)
            .connect()
            .await
            .expect("connect");
        let locker = Locker::new(backend);
        let guard = locker.lock("spans:orders").await.expect("lock");
        assert!(guard.release().await.expect("release").was_held());

        let acquires = spans.named("distlock.acquire");
        let [acquire] = acquires.as_slice() else {
            panic!("{label}: one acquire span, got {acquires:?}");
        };
        assert_eq!(acquire.get("kind").map(String::as_str), Some(label));
        assert_eq!(acquire.get("node"), Some(&node), "{label}: {acquire:?}");
        assert_eq!(acquire.get("outcome").map(String::as_str), Some("granted"));
        assert_eq!(
            acquire.get("name").map(String::as_str),
            Some("spans:orders")
        );

        let releases = spans.named("distlock.release");
        let [release] = releases.as_slice() else {
            panic!("{label}: one release span, got {releases:?}");
        };
        assert_eq!(release.get("kind").map(String::as_str), Some(label));
        assert_eq!(release.get("node"), Some(&node), "{label}: {release:?}");
        assert_eq!(release.get("outcome").map(String::as_str), Some("released"));
    }
}
