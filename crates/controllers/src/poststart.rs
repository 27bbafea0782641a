//! Post-start hooks: what the server creates at start and must have done once before it
//! reports ready, as upstream's kube-apiserver holds `/readyz` on its post-start hooks
//! (`[-]poststarthook/<name> failed` until each has finished): the system namespaces and
//! priority classes, the bootstrap RBAC policy, the `kubernetes` Service, the local
//! APIServices, the mandatory flow-control objects, the namespaces' defaults.
//!
//! A hook is a name and a [`Done`]: the work marks it once its first pass has completed
//! (every object in place); the binary registers each hook's receiver with the endpoints
//! (`Api::add_post_start_hook`), which lists it in `/readyz` as `poststarthook/<name>`, and
//! waits for all of them before it announces itself.
//!
//! Invariants: a hook goes from not done to done once and never back; marking is
//! idempotent (a singleton re-run after a new election marks again, harmlessly); a hook
//! whose work stopped before its first pass stays not done (readiness keeps failing rather
//! than claiming objects that may not exist).

use tokio::sync::watch;

/// The handle a hook's work marks once its first pass is done.
#[derive(Debug, Clone)]
pub struct Done(std::sync::Arc<watch::Sender<bool>>);

impl Done {
    /// A hook not done yet, and the receiver that learns when it is.
    pub fn new() -> (Self, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        (Self(std::sync::Arc::new(tx)), rx)
    }

    /// The first pass is done.
    pub fn mark(&self) {
        self.0.send_if_modified(|done| {
            let changed = !*done;
            *done = true;
            changed
        });
    }
}

/// The hooks of a server, by name (upstream's names where upstream has the hook).
#[derive(Debug, Default, Clone)]
pub struct Hooks {
    hooks: Vec<(&'static str, watch::Receiver<bool>)>,
}

impl Hooks {
    /// Adds a hook; returns its handle.
    pub fn add(&mut self, name: &'static str) -> Done {
        let (done, rx) = Done::new();
        self.hooks.push((name, rx));
        done
    }

    /// Adds a hook whose completion is an existing signal (`true` once done).
    pub fn add_signal(&mut self, name: &'static str, rx: watch::Receiver<bool>) {
        self.hooks.push((name, rx));
    }

    /// Every hook with its receiver, in the order added.
    pub fn all(&self) -> &[(&'static str, watch::Receiver<bool>)] {
        &self.hooks
    }

    /// Resolves once every hook is done (a hook whose work went away without finishing
    /// never resolves: readiness is not claimed for it).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait_all(&self) {
        for (_, rx) in &self.hooks {
            if rx.clone().wait_for(|done| *done).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_all_resolves_once_every_hook_is_marked() {
        let mut hooks = Hooks::default();
        let a = hooks.add("a");
        let (b, rx) = Done::new();
        hooks.add_signal("b", rx);
        a.mark();
        let waiting = hooks.clone();
        let mut all = tokio::spawn(async move { waiting.wait_all().await });
        tokio::task::yield_now().await;
        assert!(futures::poll!(&mut all).is_pending());
        b.mark();
        b.mark();
        all.await.unwrap();
        assert!(hooks.all().iter().all(|(_, rx)| *rx.borrow()));
    }
}
