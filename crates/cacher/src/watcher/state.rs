//! A watcher registration's state machine: every state, every transition, and what the
//! watcher's stream does once its buffer is drained in each state.
//!
//! A registration (one [`Entry`](crate::dispatch::registry::Entry): spec and buffer) is born
//! [`Active`](WatcherState::Active) and leaves that state once, for good. The state lives in
//! the watcher's buffer, under the buffer's lock, so that a transition and the pushes are
//! ordered: once the consumer finds the buffer empty and the state not active, it has seen
//! every item that will ever be queued to this registration.
//!
//! | from     | cause                                              | to       | by                     |
//! |----------|----------------------------------------------------|----------|------------------------|
//! | Active   | buffer full, stall-and-resume on                   | Detached | dispatcher (`too_slow`) |
//! | Active   | buffer full and the shared wait budget spent (off) | Closed   | dispatcher (`too_slow`) |
//! | Active   | a push found the stream gone                       | Closed   | dispatcher             |
//! | Active   | the stream dropped                                 | Closed   | stream (`Drop`)        |
//! | Active   | the cacher stopped                                 | Closed   | dispatcher (`close_all`) |
//! | Active   | the cache is relisted                              | Reset    | dispatcher (`close_all`) |
//! | other    | any                                                | (none: the first transition wins) | |
//!
//! After the drain ([`WatcherState::after_drain`]):
//!
//! | state    | the stream                                                              |
//! |----------|-------------------------------------------------------------------------|
//! | Active   | waits for the next item                                                 |
//! | Detached | registers anew and catches up from the window after its last delivered version (or ends with 410 if the window moved past it, or "not ready" if the cache was relisted meanwhile) |
//! | Reset    | ends with one "not ready" error (the client relists or retries)         |
//! | Closed   | ends                                                                    |
//!
//! Invariants: [`WatcherState::leave`] is the only transition, and it only leaves `Active`;
//! no state returns to `Active` (a resumed watcher is a new registration).

/// The state of one watcher registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatcherState {
    /// Registered: receives live events.
    Active,
    /// Detached for being slow: drains its buffer, then resumes from the window.
    Detached,
    /// Closed: too slow without stall-and-resume, its stream gone, or the cacher stopped.
    Closed,
    /// Closed because the cache is being relisted: the watch ends with "not ready".
    Reset,
}

/// What a watcher's stream does once its buffer is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterDrain {
    /// Still registered: wait for the next item.
    Wait,
    /// Register anew and catch up from the window.
    Resume,
    /// End with "not ready".
    NotReady,
    /// End.
    End,
}

impl WatcherState {
    /// The state after a transition to `to`, if there is one: only an active registration
    /// moves, and only to a state other than active (see the module's table).
    pub(crate) fn leave(self, to: WatcherState) -> Option<WatcherState> {
        match (self, to) {
            (WatcherState::Active, WatcherState::Active) => None,
            (WatcherState::Active, to) => Some(to),
            (WatcherState::Detached | WatcherState::Closed | WatcherState::Reset, _) => None,
        }
    }

    /// Whether live events may still be queued.
    pub(crate) fn is_active(self) -> bool {
        self == WatcherState::Active
    }

    /// What the stream does once the buffer is drained in this state.
    pub(crate) fn after_drain(self) -> AfterDrain {
        match self {
            WatcherState::Active => AfterDrain::Wait,
            WatcherState::Detached => AfterDrain::Resume,
            WatcherState::Reset => AfterDrain::NotReady,
            WatcherState::Closed => AfterDrain::End,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [WatcherState; 4] = [
        WatcherState::Active,
        WatcherState::Detached,
        WatcherState::Closed,
        WatcherState::Reset,
    ];

    #[test]
    fn only_an_active_registration_moves_and_never_back_to_active() {
        for from in ALL {
            for to in ALL {
                let got = from.leave(to);
                let expected =
                    (from == WatcherState::Active && to != WatcherState::Active).then_some(to);
                assert_eq!(got, expected, "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn the_drain_table_is_the_documented_one() {
        let table = ALL.map(|s| (s, s.after_drain()));
        assert_eq!(
            table,
            [
                (WatcherState::Active, AfterDrain::Wait),
                (WatcherState::Detached, AfterDrain::Resume),
                (WatcherState::Closed, AfterDrain::End),
                (WatcherState::Reset, AfterDrain::NotReady),
            ]
        );
        assert!(
            ALL.iter()
                .all(|s| s.is_active() == (*s == WatcherState::Active))
        );
    }
}
