//! Request-body memory ([`BodyBudget`], [`BodyHold`]): the bytes of request bodies held in
//! memory at once, across every request.
//!
//! Invariants: a chunk that does not fit is refused, never waited for; a request's bytes
//! are returned exactly once, by [`BodyHold`]'s `Drop` (the permit it holds).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Rejection;

/// The byte budget of request bodies in memory (`None`: no limit).
#[derive(Clone)]
pub struct BodyBudget(Option<Arc<Semaphore>>);

impl BodyBudget {
    /// `bytes == 0` means no limit.
    pub fn new(bytes: usize) -> Self {
        Self((bytes > 0).then(|| Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS)))))
    }

    /// An empty hold for one request's body.
    pub fn hold(&self) -> BodyHold {
        BodyHold {
            budget: self.0.clone(),
            held: None,
        }
    }
}

/// The budget one request's body holds; dropping it returns the bytes.
pub struct BodyHold {
    budget: Option<Arc<Semaphore>>,
    held: Option<OwnedSemaphorePermit>,
}

impl BodyHold {
    /// Accounts `bytes` more of this body, or refuses when the budget is spent.
    pub fn take(&mut self, bytes: usize) -> Result<(), Rejection> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        if bytes == 0 {
            return Ok(());
        }
        let n = u32::try_from(bytes).map_err(|_| Rejection::BodyMemory)?;
        let permit = Arc::clone(budget)
            .try_acquire_many_owned(n)
            .map_err(|_| Rejection::BodyMemory)?;
        match &mut self.held {
            Some(h) => h.merge(permit),
            None => self.held = Some(permit),
        }
        Ok(())
    }

    /// Bytes held.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.held
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }
}
