//! The storage conformance suite: every line of the checklist at the end of UPSTREAM.md as a
//! public async test function over a backend [`Harness`], so that each backend (the embedded
//! store, etcd, and the cacher over either) runs the very same cases in its own tests.
//!
//! A backend implements [`Harness`] (a fresh, empty, isolated store per case; compaction at a
//! revision; its [`Capabilities`]) and expands [`conformance_tests!`](crate::conformance_tests)
//! with an async constructor of the harness. Each case becomes its own `#[tokio::test]`, named
//! after the case:
//!
//! ```ignore
//! use listwatch_storage::conformance::{Capabilities, Harness};
//!
//! struct Mem;
//!
//! #[async_trait::async_trait]
//! impl Harness for Mem {
//!     type Store = MemStore;
//!     async fn new_store(&self) -> MemStore { MemStore::new() }
//!     async fn compact(&self, s: &MemStore, rev: u64) -> listwatch_storage::Result<()> { s.compact(rev) }
//!     fn capabilities(&self) -> Capabilities { Capabilities::all() }
//! }
//!
//! async fn harness() -> Mem { Mem }
//!
//! listwatch_storage::conformance_tests!(harness);
//! ```
//!
//! Invariants the suite keeps:
//! - it never assumes absolute revision numbers: every revision it uses was returned by the
//!   store (revisions may be global, shared with other tests, and may skip);
//! - every wait on a watch is bounded by [`WAIT`], so a broken backend fails instead of hanging,
//!   and watch cases assert exact event sequences (bookmarks are only skipped where upstream
//!   allows them, and even then their revisions are checked);
//! - a case whose capability the backend lacks does not run: it logs a warning and returns
//!   [`Verdict::NotApplicable`]; [`not_applicable`] lists those cases for a set of capabilities,
//!   so nothing is skipped silently;
//! - cases need a multi-thread tokio runtime (the macro sets one up), because some of them write
//!   from inside the synchronous update and validation callbacks to provoke conflicts.
//!
//! This module is test code: a failed expectation panics, like an `assert!` in a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_trait::async_trait;

use crate::{Result, Storage};

mod create;
mod delete;
mod get;
mod initial_events;
mod list;
mod random;
mod stats;
mod support;
mod ttl;
mod update;
mod watch;

pub use create::*;
pub use delete::*;
pub use get::*;
pub use initial_events::*;
pub use list::*;
pub use random::*;
pub use stats::*;
pub use ttl::*;
pub use update::*;
pub use watch::*;

/// The longest any case waits for a watch event (or a stream end) before failing.
pub const WAIT: Duration = Duration::from_secs(10);

/// What a backend's tests implement so the suite can run against it.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The storage under test.
    type Store: Storage;

    /// A fresh store, empty and isolated from every other store this harness made (its own
    /// process, or its own key prefix). Its revisions need not start anywhere in particular.
    async fn new_store(&self) -> Self::Store;

    /// Compacts the store's history at `revision` (a revision the store returned), so that
    /// reads and watches at older revisions fail with `Expired`. A cacher compacts its backend.
    async fn compact(&self, store: &Self::Store, revision: u64) -> Result<()>;

    /// What the backend offers; cases needing something else are not applicable.
    fn capabilities(&self) -> Capabilities;
}

/// Something a backend may be unable to offer; a case that needs it is not applicable there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Objects created with a TTL expire, and the expiry is seen as a DELETED event.
    Ttl,
    /// [`Harness::compact`] works: old revisions become `Expired`.
    Compaction,
    /// Lists with `ResourceVersionMatch::Exact` at any retained past revision.
    ExactHistory,
    /// A watch from a revision before the compacted one fails with `Expired`. A watch cache
    /// may still serve such a watch from its event window, so it may lack this.
    ExpiredWatch,
    /// [`Storage::request_watch_progress`] makes watches with `progress_notify` report a
    /// bookmark.
    ProgressNotify,
}

impl Capability {
    /// A short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Ttl => "ttl",
            Capability::Compaction => "compaction",
            Capability::ExactHistory => "exact-history",
            Capability::ExpiredWatch => "expired-watch",
            Capability::ProgressNotify => "progress-notify",
        }
    }
}

/// What a backend declares about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// See [`Capability::Ttl`].
    pub ttl: bool,
    /// See [`Capability::Compaction`].
    pub compaction: bool,
    /// See [`Capability::ExactHistory`].
    pub exact_history: bool,
    /// See [`Capability::ExpiredWatch`].
    pub expired_watch: bool,
    /// See [`Capability::ProgressNotify`].
    pub progress_notify: bool,
    /// Whether each store from [`Harness::new_store`] has its own revision counter, so that
    /// nothing else moves it during a case (the embedded store: yes; a shared etcd: no). When
    /// set, cases assert exact "global revision" values instead of lower and upper bounds.
    pub isolated_revisions: bool,
}

impl Capabilities {
    /// Everything (the embedded store).
    pub const fn all() -> Self {
        Self {
            ttl: true,
            compaction: true,
            exact_history: true,
            expired_watch: true,
            progress_notify: true,
            isolated_revisions: true,
        }
    }

    /// Nothing optional.
    pub const fn none() -> Self {
        Self {
            ttl: false,
            compaction: false,
            exact_history: false,
            expired_watch: false,
            progress_notify: false,
            isolated_revisions: false,
        }
    }

    /// The same, without `c`.
    #[must_use]
    pub const fn without(mut self, c: Capability) -> Self {
        match c {
            Capability::Ttl => self.ttl = false,
            Capability::Compaction => self.compaction = false,
            Capability::ExactHistory => self.exact_history = false,
            Capability::ExpiredWatch => self.expired_watch = false,
            Capability::ProgressNotify => self.progress_notify = false,
        }
        self
    }

    /// Whether `c` is offered.
    pub const fn has(&self, c: Capability) -> bool {
        match c {
            Capability::Ttl => self.ttl,
            Capability::Compaction => self.compaction,
            Capability::ExactHistory => self.exact_history,
            Capability::ExpiredWatch => self.expired_watch,
            Capability::ProgressNotify => self.progress_notify,
        }
    }
}

/// How a case ended (a failure panics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// Every expectation held.
    Passed,
    /// The backend lacks the capability; the case did not run.
    NotApplicable(Capability),
}

/// One case of the suite.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The case's function name (also its test name).
    pub name: &'static str,
    /// The checklist section it belongs to.
    pub area: &'static str,
    /// Capabilities it needs.
    pub requires: &'static [Capability],
}

const fn case(area: &'static str, name: &'static str) -> Case {
    Case {
        name,
        area,
        requires: &[],
    }
}

const fn needs(area: &'static str, name: &'static str, requires: &'static [Capability]) -> Case {
    Case {
        name,
        area,
        requires,
    }
}

use Capability::{Compaction, ExactHistory, ExpiredWatch, ProgressNotify, Ttl};

/// Every case, by checklist section. The single source of truth for requirements.
pub const CASES: &[Case] = &[
    // Create
    case("create", "create_sets_resource_version"),
    case("create", "create_revisions_strictly_increase"),
    case("create", "create_with_preset_resource_version_is_rejected"),
    case("create", "create_on_existing_key_is_already_exists"),
    needs("create", "create_with_ttl_expires_as_deleted_event", &[Ttl]),
    // Get
    case("get", "get_existing_returns_latest_state"),
    case("get", "get_at_resource_version_zero_returns_a_known_state"),
    case(
        "get",
        "get_at_creation_resource_version_returns_that_or_newer",
    ),
    case("get", "get_not_older_than_current_returns_current"),
    case("get", "get_at_latest_store_revision_returns_current"),
    case("get", "get_with_resource_version_too_high_is_too_large"),
    case("get", "get_missing_key_is_not_found"),
    case("get", "get_missing_key_with_ignore_not_found_is_none"),
    // Delete
    case("delete", "delete_returns_last_state_at_new_revision"),
    case("delete", "delete_missing_key_is_not_found"),
    case("delete", "delete_of_deleted_object_is_not_found"),
    case("delete", "delete_with_uid_precondition"),
    case("delete", "delete_with_resource_version_precondition"),
    case(
        "delete",
        "delete_with_stale_suggestion_returns_current_state",
    ),
    case(
        "delete",
        "delete_with_suggestion_of_deleted_object_is_not_found",
    ),
    case(
        "delete",
        "delete_validation_error_is_returned_and_keeps_object",
    ),
    case(
        "delete",
        "delete_revalidates_fresh_state_after_stale_suggestion",
    ),
    case(
        "delete",
        "delete_fails_when_only_stale_suggestion_passes_validation",
    ),
    case(
        "delete",
        "delete_precondition_rechecks_current_state_after_stale_suggestion",
    ),
    case(
        "delete",
        "delete_retries_and_revalidates_after_conflicting_write",
    ),
    // List
    case("list", "list_rejects_invalid_resource_version_match"),
    case("list", "list_rejects_resource_version_with_continue"),
    case("list", "list_rejects_malformed_continue_tokens"),
    case("list", "list_with_resource_version_too_high_is_too_large"),
    needs(
        "list",
        "list_exact_at_every_historical_revision",
        &[ExactHistory],
    ),
    case("list", "list_not_older_than_at_every_historical_revision"),
    case(
        "list",
        "list_legacy_resource_version_at_every_historical_revision",
    ),
    needs(
        "list",
        "list_legacy_resource_version_with_limit_is_exact",
        &[ExactHistory],
    ),
    case(
        "list",
        "list_at_resource_version_zero_is_a_consistent_snapshot",
    ),
    needs(
        "list",
        "list_legacy_forms_after_compaction",
        &[Compaction, ExactHistory],
    ),
    case(
        "list",
        "list_without_resource_version_with_limit_is_consistent",
    ),
    needs(
        "list",
        "list_exact_before_compaction_is_expired",
        &[Compaction, ExactHistory],
    ),
    case("list", "list_limit_and_continue_walk_every_page"),
    case("list", "list_limit_one_walks_every_object"),
    needs(
        "list",
        "list_exact_with_limit_pages_through_history",
        &[ExactHistory],
    ),
    case("list", "list_pages_read_at_the_first_page_revision"),
    case("list", "list_selective_filter_fills_pages_across_gaps"),
    case("list", "list_selective_filter_with_limit_across_namespaces"),
    case("list", "list_finds_a_rare_object_in_one_page"),
    case("list", "list_keys_that_prefix_each_other_stay_apart"),
    case(
        "list",
        "list_namespace_scope_from_key_matches_field_selector",
    ),
    case("list", "list_field_and_label_selectors_filter_items"),
    case("list", "list_single_object_key"),
    case("list", "list_consistent_read_sees_every_write"),
    case("list", "list_consistent_read_reports_the_current_revision"),
    needs(
        "list",
        "list_continue_after_compaction_is_expired_with_fresh_token",
        &[Compaction],
    ),
    needs(
        "list",
        "list_exact_and_not_older_than_relists_are_identical",
        &[ExactHistory],
    ),
    // GuaranteedUpdate
    case(
        "guaranteed_update",
        "update_existing_object_writes_new_revision",
    ),
    case("guaranteed_update", "update_missing_key_is_not_found"),
    case("guaranteed_update", "update_with_ignore_not_found_creates"),
    case(
        "guaranteed_update",
        "update_that_changes_nothing_writes_nothing",
    ),
    case(
        "guaranteed_update",
        "update_error_from_closure_is_returned_without_write",
    ),
    case(
        "guaranteed_update",
        "update_retries_on_conflict_with_fresh_state",
    ),
    case(
        "guaranteed_update",
        "update_with_stale_suggestion_and_conflict_rereads",
    ),
    case(
        "guaranteed_update",
        "update_with_current_suggestion_calls_closure_at_most_twice",
    ),
    case("guaranteed_update", "update_with_uid_precondition"),
    case(
        "guaranteed_update",
        "update_with_resource_version_precondition",
    ),
    needs(
        "guaranteed_update",
        "update_with_ttl_creates_an_expiring_object",
        &[Ttl],
    ),
    needs(
        "guaranteed_update",
        "update_with_ttl_keeps_the_object_expiring",
        &[Ttl],
    ),
    needs(
        "guaranteed_update",
        "update_without_ttl_ends_the_expiry",
        &[Ttl],
    ),
    // Watch
    case("watch", "watch_collection_reports_added_modified_deleted"),
    case("watch", "watch_single_object_reports_only_that_object"),
    case("watch", "watch_modified_entering_selection_becomes_added"),
    case("watch", "watch_modified_leaving_selection_becomes_deleted"),
    case("watch", "watch_label_selection_sequence"),
    case("watch", "watch_from_zero_sends_current_state_first"),
    needs(
        "watch",
        "watch_from_zero_after_compaction_sends_current_state",
        &[Compaction],
    ),
    case("watch", "watch_from_non_zero_sends_only_later_changes"),
    case("watch", "watch_from_past_revision_replays_history_in_order"),
    needs(
        "watch",
        "watch_from_compacted_revision_is_expired",
        &[Compaction, ExpiredWatch],
    ),
    case("watch", "watch_deleted_event_carries_the_deletion_revision"),
    case("watch", "watch_dropped_stream_does_not_block_writers"),
    case("watch", "watch_delayed_consumer_gets_events_in_order"),
    case("watch", "watch_stalled_watcher_does_not_block_another"),
    case("watch", "watch_cluster_scoped_objects"),
    case("watch", "watch_namespace_scoped_with_field_selectors"),
    needs(
        "watch",
        "watch_without_allow_bookmarks_sends_no_bookmarks",
        &[ProgressNotify],
    ),
    needs(
        "watch",
        "watch_progress_notify_sends_bookmark_after_last_event",
        &[ProgressNotify],
    ),
    needs(
        "watch",
        "watch_bookmarks_carry_monotonic_revisions",
        &[ProgressNotify],
    ),
    needs(
        "watch",
        "watch_nothing_after_error_event",
        &[Compaction, ExpiredWatch],
    ),
    // Watch: sendInitialEvents × RV × bookmarks
    case("watch", "initial_events_true_rv_unset_with_bookmarks"),
    case("watch", "initial_events_true_rv_unset_without_bookmarks"),
    case("watch", "initial_events_false_rv_unset_with_bookmarks"),
    case("watch", "initial_events_false_rv_unset_without_bookmarks"),
    case("watch", "initial_events_true_rv_zero_with_bookmarks"),
    case("watch", "initial_events_true_rv_zero_without_bookmarks"),
    case("watch", "initial_events_false_rv_zero_with_bookmarks"),
    case("watch", "initial_events_false_rv_zero_without_bookmarks"),
    case("watch", "initial_events_true_rv_past_with_bookmarks"),
    case("watch", "initial_events_true_rv_past_without_bookmarks"),
    case("watch", "initial_events_false_rv_past_with_bookmarks"),
    case("watch", "initial_events_false_rv_past_without_bookmarks"),
    case("watch", "initial_events_true_rv_current_with_bookmarks"),
    case("watch", "initial_events_true_rv_current_without_bookmarks"),
    case("watch", "initial_events_false_rv_current_with_bookmarks"),
    case("watch", "initial_events_false_rv_current_without_bookmarks"),
    case("watch", "initial_events_legacy_rv_zero"),
    case("watch", "initial_events_legacy_rv_unset"),
    case(
        "watch",
        "initial_events_end_bookmark_is_at_the_global_revision",
    ),
    case("watch", "initial_events_for_a_single_object_selector"),
    // Model-based: a random history against every list and watch
    needs(
        "list",
        "list_matches_a_random_history_at_every_revision",
        &[ExactHistory],
    ),
    case("watch", "watch_replays_a_random_history_exactly"),
    case(
        "watch",
        "watch_concurrent_writes_reach_every_watcher_once_in_order",
    ),
    // Stats
    case("stats", "stats_counts_objects"),
    case("stats", "stats_is_scoped_to_the_key"),
];

/// The cases that cannot run on a backend with `caps`, with the capability each lacks.
pub fn not_applicable(caps: &Capabilities) -> Vec<(&'static str, Capability)> {
    CASES
        .iter()
        .filter_map(|c| {
            c.requires
                .iter()
                .find(|r| !caps.has(**r))
                .map(|r| (c.name, *r))
        })
        .collect()
}

/// Decides whether case `name` runs on this harness; `Some` when it does not (logged).
pub(crate) fn gate<H: Harness>(h: &H, name: &str) -> Option<Verdict> {
    let caps = h.capabilities();
    let Some(case) = CASES.iter().find(|c| c.name == name) else {
        panic!("conformance case {name} is missing from CASES");
    };
    let missing = case.requires.iter().find(|r| !caps.has(**r))?;
    tracing::warn!(
        case = name,
        capability = missing.name(),
        "conformance case not applicable: the backend declares it lacks this capability"
    );
    Some(Verdict::NotApplicable(*missing))
}

/// Checks that a macro expansion runs exactly the cases of [`CASES`].
pub fn check_listed(listed: &[&str]) {
    for c in CASES {
        assert!(
            listed.contains(&c.name),
            "case {} is in CASES but not run by the macro",
            c.name
        );
    }
    for l in listed {
        assert!(
            CASES.iter().any(|c| c.name == *l),
            "case {l} is run by the macro but not in CASES"
        );
    }
    let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CASES.len(), "CASES has duplicate names");
}

/// Expands to one `#[tokio::test]` per conformance case, each named after its case, plus
/// a test that the expansion covers [`CASES`](crate::conformance::CASES) and one that prints
/// the cases not applicable to the harness.
///
/// The argument is a path to an `async fn() -> impl Harness`, optionally followed by
/// attributes for every generated test that needs the harness, e.g.
/// `conformance_tests!(harness, #[ignore = "needs etcd"])`. The calling crate needs
/// `tokio` (with `macros` and `rt-multi-thread`) as a dev-dependency.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:path $(, #[$attr:meta])* $(,)?) => {
        $crate::__conformance_tests!($harness; [$(#[$attr])*];
            create_sets_resource_version,
            create_revisions_strictly_increase,
            create_with_preset_resource_version_is_rejected,
            create_on_existing_key_is_already_exists,
            create_with_ttl_expires_as_deleted_event,
            get_existing_returns_latest_state,
            get_at_resource_version_zero_returns_a_known_state,
            get_at_creation_resource_version_returns_that_or_newer,
            get_not_older_than_current_returns_current,
            get_at_latest_store_revision_returns_current,
            get_with_resource_version_too_high_is_too_large,
            get_missing_key_is_not_found,
            get_missing_key_with_ignore_not_found_is_none,
            delete_returns_last_state_at_new_revision,
            delete_missing_key_is_not_found,
            delete_of_deleted_object_is_not_found,
            delete_with_uid_precondition,
            delete_with_resource_version_precondition,
            delete_with_stale_suggestion_returns_current_state,
            delete_with_suggestion_of_deleted_object_is_not_found,
            delete_validation_error_is_returned_and_keeps_object,
            delete_revalidates_fresh_state_after_stale_suggestion,
            delete_fails_when_only_stale_suggestion_passes_validation,
            delete_precondition_rechecks_current_state_after_stale_suggestion,
            delete_retries_and_revalidates_after_conflicting_write,
            list_rejects_invalid_resource_version_match,
            list_rejects_resource_version_with_continue,
            list_rejects_malformed_continue_tokens,
            list_with_resource_version_too_high_is_too_large,
            list_exact_at_every_historical_revision,
            list_not_older_than_at_every_historical_revision,
            list_legacy_resource_version_at_every_historical_revision,
            list_legacy_resource_version_with_limit_is_exact,
            list_at_resource_version_zero_is_a_consistent_snapshot,
            list_legacy_forms_after_compaction,
            list_without_resource_version_with_limit_is_consistent,
            list_exact_before_compaction_is_expired,
            list_limit_and_continue_walk_every_page,
            list_limit_one_walks_every_object,
            list_exact_with_limit_pages_through_history,
            list_pages_read_at_the_first_page_revision,
            list_selective_filter_fills_pages_across_gaps,
            list_selective_filter_with_limit_across_namespaces,
            list_finds_a_rare_object_in_one_page,
            list_keys_that_prefix_each_other_stay_apart,
            list_namespace_scope_from_key_matches_field_selector,
            list_field_and_label_selectors_filter_items,
            list_single_object_key,
            list_consistent_read_sees_every_write,
            list_consistent_read_reports_the_current_revision,
            list_continue_after_compaction_is_expired_with_fresh_token,
            list_exact_and_not_older_than_relists_are_identical,
            update_existing_object_writes_new_revision,
            update_missing_key_is_not_found,
            update_with_ignore_not_found_creates,
            update_that_changes_nothing_writes_nothing,
            update_error_from_closure_is_returned_without_write,
            update_retries_on_conflict_with_fresh_state,
            update_with_stale_suggestion_and_conflict_rereads,
            update_with_current_suggestion_calls_closure_at_most_twice,
            update_with_uid_precondition,
            update_with_resource_version_precondition,
            update_with_ttl_creates_an_expiring_object,
            update_with_ttl_keeps_the_object_expiring,
            update_without_ttl_ends_the_expiry,
            watch_collection_reports_added_modified_deleted,
            watch_single_object_reports_only_that_object,
            watch_modified_entering_selection_becomes_added,
            watch_modified_leaving_selection_becomes_deleted,
            watch_label_selection_sequence,
            watch_from_zero_sends_current_state_first,
            watch_from_zero_after_compaction_sends_current_state,
            watch_from_non_zero_sends_only_later_changes,
            watch_from_past_revision_replays_history_in_order,
            watch_from_compacted_revision_is_expired,
            watch_deleted_event_carries_the_deletion_revision,
            watch_dropped_stream_does_not_block_writers,
            watch_delayed_consumer_gets_events_in_order,
            watch_stalled_watcher_does_not_block_another,
            watch_cluster_scoped_objects,
            watch_namespace_scoped_with_field_selectors,
            watch_without_allow_bookmarks_sends_no_bookmarks,
            watch_progress_notify_sends_bookmark_after_last_event,
            watch_bookmarks_carry_monotonic_revisions,
            watch_nothing_after_error_event,
            initial_events_true_rv_unset_with_bookmarks,
            initial_events_true_rv_unset_without_bookmarks,
            initial_events_false_rv_unset_with_bookmarks,
            initial_events_false_rv_unset_without_bookmarks,
            initial_events_true_rv_zero_with_bookmarks,
            initial_events_true_rv_zero_without_bookmarks,
            initial_events_false_rv_zero_with_bookmarks,
            initial_events_false_rv_zero_without_bookmarks,
            initial_events_true_rv_past_with_bookmarks,
            initial_events_true_rv_past_without_bookmarks,
            initial_events_false_rv_past_with_bookmarks,
            initial_events_false_rv_past_without_bookmarks,
            initial_events_true_rv_current_with_bookmarks,
            initial_events_true_rv_current_without_bookmarks,
            initial_events_false_rv_current_with_bookmarks,
            initial_events_false_rv_current_without_bookmarks,
            initial_events_legacy_rv_zero,
            initial_events_legacy_rv_unset,
            initial_events_end_bookmark_is_at_the_global_revision,
            initial_events_for_a_single_object_selector,
            list_matches_a_random_history_at_every_revision,
            watch_replays_a_random_history_exactly,
            watch_concurrent_writes_reach_every_watcher_once_in_order,
            stats_counts_objects,
            stats_is_scoped_to_the_key,
        );
    };
}

/// The body of [`conformance_tests!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($harness:path; $attrs:tt; $($case:ident),+ $(,)?) => {
        $(
            $crate::__conformance_case!($harness; $case; $attrs);
        )+

        #[test]
        fn conformance_macro_runs_every_case() {
            $crate::conformance::check_listed(&[$(stringify!($case)),+]);
        }

        $crate::__conformance_not_applicable!($harness; $attrs);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_not_applicable {
    ($harness:path; [$(#[$attr:meta])*]) => {
        #[::tokio::test]
        $(#[$attr])*
        async fn conformance_not_applicable_cases_are_declared() {
            let harness = $harness().await;
            let caps = $crate::conformance::Harness::capabilities(&harness);
            for (case, capability) in $crate::conformance::not_applicable(&caps) {
                eprintln!("conformance case {case} NOT APPLICABLE: the backend lacks {}", capability.name());
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case {
    ($harness:path; $case:ident; [$(#[$attr:meta])*]) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $(#[$attr])*
        async fn $case() {
            let harness = $harness().await;
            if let $crate::conformance::Verdict::NotApplicable(c) =
                $crate::conformance::$case(&harness).await
            {
                eprintln!(
                    "conformance case {} NOT APPLICABLE: the backend lacks {}",
                    stringify!($case),
                    c.name()
                );
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_are_unique_and_requirements_filter() {
        let names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        check_listed(&names);
        assert!(
            CASES.len() >= 60,
            "the suite has only {} cases",
            CASES.len()
        );
        assert!(not_applicable(&Capabilities::all()).is_empty());
        let no_ttl = not_applicable(&Capabilities::all().without(Capability::Ttl));
        assert_eq!(
            no_ttl,
            vec![
                ("create_with_ttl_expires_as_deleted_event", Capability::Ttl),
                (
                    "update_with_ttl_creates_an_expiring_object",
                    Capability::Ttl
                ),
                ("update_with_ttl_keeps_the_object_expiring", Capability::Ttl),
                ("update_without_ttl_ends_the_expiry", Capability::Ttl),
            ]
        );
    }
}
