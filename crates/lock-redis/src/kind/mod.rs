//! Layer 4, the lock kinds: what each lock operation sends and how its answer reads, for the
//! reentrant lock ([`reentrant`]) and the fast lock ([`fast`]), both through the calls layer.
//! [`scripted`] holds the operations both kinds run the same way with their own scripts,
//! [`replicated`] what both do with the replicas' acknowledgement of a write; [`family`] the
//! operations the family's lock sides share, each side a [`family::Primitive`] with its own
//! scripts. [`semaphore`] is
//! the counting semaphore, [`permits`] its lease-bound permits, [`rwlock`] the read-write
//! lock, [`fair`] the fair lock, [`election`] leader election and [`latch`] the countdown
//! latch, on the same calls.

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod family;
pub(crate) mod fast;
pub(crate) mod latch;
pub(crate) mod permits;
pub(crate) mod reentrant;
pub(crate) mod replicated;
pub(crate) mod rwlock;
pub(crate) mod scripted;
pub(crate) mod semaphore;
