//! Layer 5, the backend: the settings ([`options`]), [`RedisBackend`](redis_backend) with its
//! `LockBackend` implementation dispatching to the lock kind, its `SemaphoreBackend`
//! implementation ([`semaphore`]) with its lease-bound permits ([`permits`]),
//! `ReadWriteBackend` one ([`rwlock`]), `FairBackend` one ([`fair`]), `ElectionBackend` one
//! ([`election`]) and `LatchBackend` one ([`latch`]), and the [`builder`] that checks the settings and connects.

pub(crate) mod builder;
pub(crate) mod election;
pub(crate) mod fair;
mod latch;
pub(crate) mod options;
pub(crate) mod permits;
pub(crate) mod redis_backend;
pub(crate) mod rwlock;
mod semaphore;
pub(crate) mod target;

#[cfg(test)]
mod lost_acknowledgement;
