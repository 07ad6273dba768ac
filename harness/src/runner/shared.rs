//! A cause kept by an error that is cloned (every writer a cut hits learns the one result; a
//! port's readiness goes to every step that judges it): shared, and still the error's source
//! itself, so that `source()` is the cause and downcasts to its type.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// `E`, shared. Not an error itself: an error's `#[source]` field of this type gives `E` as
/// the source (thiserror reaches it through `Deref`), never a wrapper around it.
pub struct Shared<E: ?Sized>(Arc<E>);

/// A cause of one of several kinds (a readiness wait's last failure, why a session was lost).
pub type Cause = Shared<dyn std::error::Error + Send + Sync>;

impl<E> Shared<E> {
    pub fn new(e: E) -> Self {
        Shared(Arc::new(e))
    }
}

impl Cause {
    /// `e` as a cause of any kind.
    pub fn of(e: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Shared(Arc::new(e))
    }

    /// A cause that is text alone (a device not back yet, as the sysfs scan found it).
    pub fn text(s: impl Into<String>) -> Cause {
        Shared(Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(s.into())))
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for Cause {
    fn from(e: E) -> Cause {
        Cause::of(e)
    }
}

impl<E: ?Sized> Clone for Shared<E> {
    fn clone(&self) -> Self {
        Shared(Arc::clone(&self.0))
    }
}

impl<E: ?Sized> Deref for Shared<E> {
    type Target = E;
    fn deref(&self) -> &E {
        &self.0
    }
}

impl<E: ?Sized + fmt::Display> fmt::Display for Shared<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: ?Sized + fmt::Debug> fmt::Debug for Shared<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
