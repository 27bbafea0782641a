//! The storage conformance suite against a real etcd: every case of
//! `listwatch_storage::conformance` runs here as its own test, each against its own etcd
//! server (so compaction in one case cannot disturb another), ignored unless etcd is there
//! (`cargo xtask test` runs them with `--include-ignored` after installing it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::SelectableFields;
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{EtcdStore, compact_now};
use listwatch_storage::Result;
use listwatch_storage::conformance::{Capabilities, Harness};

/// One etcd per case; each store gets its own key root on it.
struct EtcdHarness {
    server: EtcdServer,
    next_root: AtomicU64,
}

#[async_trait]
impl Harness for EtcdHarness {
    type Store = EtcdStore;

    async fn new_store(&self) -> EtcdStore {
        let n = self.next_root.fetch_add(1, Ordering::Relaxed);
        EtcdStore::new(
            self.server.client(),
            format!("/registry-{n}"),
            SelectableFields::new(["spec.nodeName", "status.phase"]),
        )
    }

    async fn compact(&self, store: &EtcdStore, revision: u64) -> Result<()> {
        compact_now(store.client(), revision).await
    }

    fn capabilities(&self) -> Capabilities {
        // Revisions are etcd's: one counter for every store of the server.
        Capabilities {
            isolated_revisions: false,
            ..Capabilities::all()
        }
    }
}

async fn harness() -> EtcdHarness {
    // etcd 3.4 answers progress requests out of order (etcd issue 15220); the adapter then
    // waits for etcd's own periodic progress notification, made frequent here.
    let server = EtcdServer::builder()
        .progress_notify_interval(Duration::from_millis(500))
        .start()
        .await
        .expect("start etcd");
    EtcdHarness {
        server,
        next_root: AtomicU64::new(0),
    }
}

/// Like `listwatch_storage::conformance_tests!`, with every case ignored unless etcd is there.
macro_rules! etcd_conformance_tests {
    ($($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs etcd"]
            async fn $case() {
                let h = harness().await;
                if let listwatch_storage::conformance::Verdict::NotApplicable(c) =
                    listwatch_storage::conformance::$case(&h).await
                {
                    panic!("etcd declares every capability, yet {} was not applicable ({})", stringify!($case), c.name());
                }
            }
        )+

        #[test]
        fn every_conformance_case_runs_against_etcd() {
            listwatch_storage::conformance::check_listed(&[$(stringify!($case)),+]);
        }
    };
}

etcd_conformance_tests!(
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
    list_at_resource_version_zero_is_a_consistent_snapshot,
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
