//! Whether a lock call asks for a fencing token, carried in the types: a guard from options
//! that asked for one ([`Fenced`]) has a token, always; a guard from options that did not
//! ([`Unfenced`], the default) has no method for one. No `Option` that can never be `None`.

use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Unfenced {}
    impl Sealed for super::Fenced {}
}

/// The fencing choice of [`crate::LockOptions`] and [`crate::LockGuard`]: [`Unfenced`] or
/// [`Fenced`]. Sealed; code generic over both names it as `F: Fencing`.
///
/// # Example
///
/// A function that works with guards of either kind:
///
/// ```
/// use lock_core::{Fencing, LockBackend, LockGuard};
///
/// fn describe<B: LockBackend, F: Fencing>(guard: &LockGuard<B, F>) -> String {
///     match F::token_of(guard.token()) {
///         Some(token) => format!("{} (token {token})", guard.name()),
///         None => guard.name().to_owned(),
///     }
/// }
/// ```
pub trait Fencing: sealed::Sealed + Send + Sync + 'static {
    /// What a guard carries: `()` without fencing, the token (`u64`) with it.
    type Token: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;

    /// Whether the acquire asks the store for a token.
    #[doc(hidden)]
    const WANTED: bool;

    /// The guard's token from a grant's, checked: a fenced acquire that came back without one
    /// is the backend's fault.
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] when a token was asked for and the grant has none.
    #[doc(hidden)]
    fn from_grant(token: Option<u64>) -> Result<Self::Token>;

    /// The token as an `Option`, for code generic over both kinds (`None` for [`Unfenced`]).
    fn token_of(token: Self::Token) -> Option<u64>;
}

/// No fencing token asked for (the default): nothing extra is written per grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unfenced;

/// A fencing token asked for with [`crate::LockOptions::fenced`]: every grant gets a number
/// that strictly increases with each grant of the lock name, read with
/// [`crate::LockGuard::fencing_token`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fenced;

impl Fencing for Unfenced {
    type Token = ();
    const WANTED: bool = false;

    fn from_grant(_token: Option<u64>) -> Result<()> {
        Ok(())
    }

    fn token_of((): ()) -> Option<u64> {
        None
    }
}

impl Fencing for Fenced {
    type Token = u64;
    const WANTED: bool = true;

    fn from_grant(token: Option<u64>) -> Result<u64> {
        token.ok_or_else(|| {
            Error::Protocol("a fencing token was asked for and the grant came without one".into())
        })
    }

    fn token_of(token: u64) -> Option<u64> {
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_grant_without_a_token_is_a_protocol_error() {
        assert!(matches!(Fenced::from_grant(None), Err(Error::Protocol(_))));
        assert_eq!(Fenced::from_grant(Some(7)).unwrap(), 7);
        assert_eq!(Fenced::token_of(7), Some(7));
        Unfenced::from_grant(None).unwrap();
        Unfenced::from_grant(Some(3)).unwrap();
        assert_eq!(Unfenced::token_of(()), None);
    }
}
