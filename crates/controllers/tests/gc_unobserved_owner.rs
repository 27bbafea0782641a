//! The garbage collector and an owner its informer never saw: created and deleted while the
//! informer of the owner's kind could not watch (a just-created custom resource's cache
//! answers 429 "storage is (re)initializing" while it lists, then 410 to a watch from before
//! its list, and the informer relists only after the owner is gone).
//!
//! The scripted order (the widgets' storage refuses the collector's watches on cue):
//! 1. the collector's widget informer has listed (nothing) and its watch is refused (429);
//! 2. a widget `owner` and a ConfigMap `dep` owned by it are created; the collector checks
//!    `dep` — the owner is not in its caches — and a live read finds the owner;
//! 3. the owner is deleted; the informer's next watch gets 410 and it relists: the owner is
//!    in neither list, so no deletion event ever names it.
//!
//! Before: the check of step 2 kept `dep` for good (its owner lived), and nothing queued it
//! again: `dep` stayed forever (`website_operator::listwatch_operator_unperturbed` stuck at
//! step 3 about one run in 15). Now an owner found live but not cached is verified again
//! until the caches show it or it is gone, as upstream's collector re-queues an owner no
//! informer has observed yet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::http::StatusCode;
use listwatch_controllers::gc::GarbageCollector;
use listwatch_endpoints::{Config, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use listwatch_storage::{Error, Key, ListOptions, Result, Storage};
use listwatch_testkit::router::{JSON, call, create_namespace, eventually};
use listwatch_testkit::storage::{Hooked, Hooks};
use serde_json::{Value, json};

/// A store whose watches are refused on cue, as a custom resource's fresh cache refuses
/// them: 429 while `blind`, then 410 once (the cache listed after the watcher did).
type Blinded = Hooked<MemStore, Blind>;

/// The cues and counts of a [`Blinded`] store.
#[derive(Default)]
struct Blind {
    blind: AtomicBool,
    expire_next: AtomicBool,
    /// Watches refused so far.
    refused: AtomicUsize,
    /// Lists answered so far.
    lists: AtomicUsize,
    /// Reads of the widget `owner` answered so far (counted once answered).
    owner_reads: AtomicUsize,
}

impl Hooks for Blind {
    fn after_get(&self, key: &Key) {
        if key.to_string().ends_with("/owner") {
            self.owner_reads.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn after_list(&self, _key: &Key) {
        self.lists.fetch_add(1, Ordering::SeqCst);
    }
    fn before_watch(&self, _key: &Key, opts: &ListOptions) -> Result<()> {
        if self.blind.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(Error::NotReady {
                message: "storage is (re)initializing".into(),
                retry_after_seconds: 0,
            });
        }
        if self.expire_next.swap(false, Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            let rv = opts.resource_version.unwrap_or_default();
            return Err(Error::too_old(rv, rv + 1));
        }
        Ok(())
    }
}

const CM: &str = "/api/v1/namespaces/ns1/configmaps";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/ns1/widgets";

fn count(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

/// The API (namespaces, configmaps, and widgets over a [`Blinded`] store whose watches are
/// refused from the start) with a running collector and namespace `ns1`.
async fn setup() -> (Router, Arc<Blinded>, tokio::task::JoinHandle<()>) {
    let store = MemStore::new();
    let widgets = Arc::new(Hooked::new(
        store.clone(),
        Blind {
            blind: AtomicBool::new(true),
            ..Blind::default()
        },
    ));
    let s: Arc<dyn Storage> = Arc::new(store);
    let api = Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label),
            Arc::clone(&s),
        )
        .resource(KindSpec::new("", "v1", "configmaps", "ConfigMap"), s)
        .resource(
            KindSpec::new("example.com", "v1", "widgets", "Widget"),
            Arc::clone(&widgets) as Arc<dyn Storage>,
        )
        .build();
    let r = api.router();
    let gc = tokio::spawn(GarbageCollector::new(&api).run());
    create_namespace(&r, "ns1").await;
    (r, widgets, gc)
}

/// Creates the widget `owner`; an owner reference to it.
async fn create_owner(r: &Router) -> Value {
    let (st, owner) = call(
        r,
        "POST",
        WIDGETS,
        JSON,
        &json!({"metadata": {"name": "owner"}}).to_string(),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{owner}");
    json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "name": "owner", "uid": owner["metadata"]["uid"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_created_and_deleted_while_its_informer_was_blind_still_frees_its_dependents() {
    let (r, widgets, gc) = setup().await;

    // 1. The widget informer listed (nothing) and cannot watch.
    eventually("the collector's widget watch refused", || async {
        count(&widgets.hooks.refused) > 0
    })
    .await;

    // 2. An owner and its dependent; the collector reads the owner live and finds it.
    let reference = create_owner(&r).await;
    let (st, dep) = call(
        &r,
        "POST",
        CM,
        JSON,
        &json!({"metadata": {"name": "dep", "ownerReferences": [reference]}}).to_string(),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{dep}");
    eventually("the collector's live read of the owner", || async {
        count(&widgets.hooks.owner_reads) > 0
    })
    .await;

    // 3. The owner goes; the informer's next watch gets 410 and it relists without it.
    let lists = count(&widgets.hooks.lists);
    let (st, _) = call(&r, "DELETE", &format!("{WIDGETS}/owner"), "", "").await;
    assert_eq!(st, StatusCode::OK);
    widgets.hooks.expire_next.store(true, Ordering::SeqCst);
    widgets.hooks.blind.store(false, Ordering::SeqCst);
    eventually("the widget informer relisted", || async {
        count(&widgets.hooks.lists) > lists
    })
    .await;

    eventually("the dependent of the deleted owner collected", || async {
        let (st, v) = call(&r, "GET", &format!("{CM}/dep"), "", "").await;
        assert!(
            st == StatusCode::OK || st == StatusCode::NOT_FOUND,
            "{st}: {v}"
        );
        st == StatusCode::NOT_FOUND
    })
    .await;
    gc.abort();
}

/// The re-verification ends once the informer shows the owner: a dependent of an owner that
/// was unobserved when first checked, and that lives on, is kept — and when the owner is
/// deleted later, through the informer's ordinary watch, the dependent goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_checked_before_its_owner_was_cached_is_kept_then_collected_with_it() {
    let (r, widgets, gc) = setup().await;
    eventually("the collector's widget watch refused", || async {
        count(&widgets.hooks.refused) > 0
    })
    .await;
    let reference = create_owner(&r).await;
    let (st, _) = call(
        &r,
        "POST",
        CM,
        JSON,
        &json!({"metadata": {"name": "dep", "ownerReferences": [reference]}}).to_string(),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);
    eventually("the collector's live read of the owner", || async {
        count(&widgets.hooks.owner_reads) > 0
    })
    .await;
    // The informer watches again and sees the owner: the dependent stays.
    widgets.hooks.blind.store(false, Ordering::SeqCst);
    eventually(
        "the owner read again until the informer shows it",
        || async { count(&widgets.hooks.owner_reads) > 1 },
    )
    .await;
    let (st, v) = call(&r, "GET", &format!("{CM}/dep"), "", "").await;
    assert_eq!(st, StatusCode::OK, "a live owner's dependent stays: {v}");
    let (st, _) = call(&r, "DELETE", &format!("{WIDGETS}/owner"), "", "").await;
    assert_eq!(st, StatusCode::OK);
    eventually("the dependent collected with its owner", || async {
        call(&r, "GET", &format!("{CM}/dep"), "", "").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    gc.abort();
}
