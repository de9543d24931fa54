//! A span recorder for tests: which spans a backend reports, with which fields.
//!
//! A small subscriber of our own (no subscriber crate needed).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_core::span::Current;

/// A span's name and the fields recorded on it.
type Recorded = (&'static str, HashMap<String, String>);

/// A `tracing` subscriber that records every span's name and fields (for tests of the spans a
/// backend reports), and answers `Span::current()` for the spans entered.
///
/// Install it as the thread's default (`tracing::subscriber::set_default`) on a
/// single-threaded runtime, so it sees every span.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use lock_core::{Locker, MemoryBackend};
/// use lock_testkit::SpanRecorder;
///
/// let spans = SpanRecorder::default();
/// let _default = tracing::subscriber::set_default(spans.clone());
/// let locker = Locker::new(MemoryBackend::new());
/// locker.lock("x").await?.release().await?;
/// let acquires = spans.named("distlock.acquire");
/// assert_eq!(acquires[0]["kind"], "memory");
/// assert_eq!(acquires[0]["outcome"], "granted");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct SpanRecorder {
    next: Arc<AtomicU64>,
    seen: Arc<Mutex<HashMap<u64, Recorded>>>,
    metadata: Arc<Mutex<HashMap<u64, &'static Metadata<'static>>>>,
    entered: Arc<Mutex<Vec<u64>>>,
    /// The most verbose level recorded (`None`: every level), as an application's filter.
    max_level: Option<Level>,
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

impl Subscriber for SpanRecorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.max_level.is_none_or(|max| *metadata.level() <= max)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.max_level.map(LevelFilter::from_level)
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

impl SpanRecorder {
    /// A recorder of the spans at `max` and less verbose levels only, as a subscriber filtered
    /// at `max` (say `INFO`, a usual production setting) sees them.
    ///
    /// ```
    /// use lock_testkit::SpanRecorder;
    ///
    /// let spans = SpanRecorder::up_to(tracing::Level::INFO);
    /// # let _ = spans;
    /// ```
    #[must_use]
    pub fn up_to(max: Level) -> Self {
        SpanRecorder {
            max_level: Some(max),
            ..SpanRecorder::default()
        }
    }

    /// The fields of every span named `name`, in creation order.
    #[must_use]
    pub fn named(&self, name: &str) -> Vec<HashMap<String, String>> {
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
