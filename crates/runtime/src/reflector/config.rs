//! [`Config`]: what the reflector lists and watches, and its timings.

use std::time::Duration;

use listwatch_api::{FieldSelector, LabelSelector, ShardSelector};

/// client-go `pager.defaultPageSize`.
pub(crate) const DEFAULT_PAGE_SIZE: u32 = 500;

/// Reflector configuration. [`Default`] mirrors client-go.
#[derive(Debug, Clone)]
pub struct Config {
    /// Only objects whose labels match.
    pub label_selector: LabelSelector,
    /// Only objects whose fields match.
    pub field_selector: FieldSelector,
    /// Only this shard of the collection (upstream's `shardSelector`, KEP-5866): sent to the
    /// server with every list and watch, and applied again to what comes back, so the store
    /// holds this shard alone whether or not the server honours it (client-go's
    /// `NewShardedListWatch`). Empty (the default): everything.
    pub shard_selector: ShardSelector,
    /// Objects per list page. `None` (the default) follows client-go: pages of 500
    /// (`pager.defaultPageSize`) when listing at RV `"0"` or `""`, and one unpaginated list
    /// when relisting at a specific version, so that kube-apiserver's watch cache can serve
    /// it (a `limit` with a non-zero RV sends the list to etcd: the thundering herd
    /// client-go avoids) — unless the first list came back paginated, which means the
    /// server has no watch cache for the resource; then pages stay on. `Some(n)` always
    /// pages by `n` (client-go's `WatchListPageSize`, what kube-apiserver's own cacher sets).
    pub page_size: Option<u32>,
    /// Use a streaming list (`sendInitialEvents`) instead of paginated lists, falling back to
    /// a list when it fails (client-go's `WatchListClient` feature). Off by default: client-go
    /// turned it on in 1.35, but kube-apiserver's cacher turns it off for its own reflector
    /// (`UseWatchList = false`), and the cacher is this crate's main in-process user.
    pub streaming_list: bool,
    /// The first list (an informer's start) asks for no version (`resourceVersion` unset: a
    /// consistent read, as fresh as etcd) instead of `"0"` (any version: a server may answer
    /// from a cache that lags). client-go lists at `"0"`, so a controller restarted against
    /// a lagging server can go back in time and act on objects already changed or deleted
    /// (found by `website_operator_sieve::stale_view_after_restart_changes_nothing`: a
    /// deleted Website recorded again for good). Off by default (client-go's behaviour, the
    /// cheaper read for many watchers); a controller whose writes outlive what it read turns
    /// it on. Later relists never go back in time either way (they ask for at least the
    /// last version seen).
    pub consistent_first_list: bool,
    /// A streaming list that delivers nothing, not even its initial-events-end bookmark, for
    /// this long is taken as a server that ignores `sendInitialEvents` (a server without the
    /// feature sends a plain watch: no initial state, no bookmark): the reflector falls back
    /// to a plain list at once and stops asking for streaming lists for good, instead of
    /// waiting the watch's idle deadline (5–10 min) at every relist. 30 s: a server that
    /// honours it sends the bookmark right after the state (at once when empty), and events
    /// of a large state follow each other closely.
    pub streaming_list_idle: Duration,
    /// Watches ask the server for a timeout random in `[this, 2 × this)` (client-go
    /// `defaultMinWatchTimeout = 5 * time.Minute`).
    pub min_watch_timeout: Duration,
    /// A watch that ends sooner than this without any event is an error (client-go's
    /// "very short watch", 1 s).
    pub min_watch_duration: Duration,
    /// Client-side idle deadline of every watch: a watch that delivers no event (bookmarks
    /// included) for its server timeout plus this margin is abandoned as a dead connection
    /// and reopened from the last version. Catches half-open connections (NAT or
    /// load-balancer state lost, a peer gone without a reset, a proxy that drops silently)
    /// and servers that stall mid-frame, which would otherwise leave the store silently
    /// stale. Ours: client-go relies on HTTP/2 pings and the server's timeout instead.
    pub watch_idle_margin: Duration,
    /// An `ERROR` event with code 500 re-watches from the last version after a backoff
    /// instead of relisting, for as long as such errors keep coming within this window of
    /// the first (client-go's `MaxInternalErrorRetryDuration`); `Duration::ZERO` relists at
    /// once like client-go's default.
    pub max_internal_error_retry: Duration,
    /// First backoff delay (800 ms).
    pub initial_backoff: Duration,
    /// Largest backoff base delay (30 s).
    pub max_backoff: Duration,
    /// Backoff returns to `initial_backoff` after this long without failures (2 min).
    pub backoff_reset: Duration,
    /// Jitter factor: a delay is `base × (1 + jitter × rand[0,1))` (client-go 1.0).
    pub backoff_jitter: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            label_selector: LabelSelector::everything(),
            field_selector: FieldSelector::everything(),
            shard_selector: ShardSelector::everything(),
            // client-go reflector.go list(): pager.defaultPageSize = 500, dropped for relists
            page_size: None,
            // client-go WatchListClient: beta, on by default since 1.35; off here (see the field)
            streaming_list: false,
            // client-go lists at "0" first; ours (see the field)
            consistent_first_list: false,
            // ours (see the field)
            streaming_list_idle: Duration::from_secs(30),
            // client-go reflector.go: defaultMinWatchTimeout = 5 * time.Minute
            min_watch_timeout: Duration::from_secs(5 * 60),
            // client-go reflector.go handleWatch: watchDuration < time.Second && eventCount == 0
            min_watch_duration: Duration::from_secs(1),
            // ours (see the field): the server's timeout plus 30 s
            watch_idle_margin: Duration::from_secs(30),
            // ours: client-go's default is 0 (relist on the first in-stream 500); informers
            // that set MaxInternalErrorRetryDuration retry within it, as here for 1 min
            max_internal_error_retry: Duration::from_secs(60),
            // client-go reflector.go: NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)
            initial_backoff: Duration::from_millis(800),
            max_backoff: Duration::from_secs(30),
            backoff_reset: Duration::from_secs(2 * 60),
            backoff_jitter: 1.0,
        }
    }
}

impl Config {
    /// Sets the label selector.
    #[must_use]
    pub fn labels(mut self, selector: LabelSelector) -> Self {
        self.label_selector = selector;
        self
    }

    /// Sets the field selector.
    #[must_use]
    pub fn fields(mut self, selector: FieldSelector) -> Self {
        self.field_selector = selector;
        self
    }

    /// Keeps to one shard of the collection: a sharded reflector (see
    /// [`Config::shard_selector`]; `ShardSelector::nth_of` splits the hash space evenly).
    #[must_use]
    pub fn shard(mut self, selector: ShardSelector) -> Self {
        self.shard_selector = selector;
        self
    }

    /// Always pages lists by `n` (at least 1), relists included.
    #[must_use]
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n.max(1));
        self
    }

    /// Sets how long in-stream 500 errors are retried with a re-watch before a relist.
    #[must_use]
    pub fn max_internal_error_retry(mut self, d: Duration) -> Self {
        self.max_internal_error_retry = d;
        self
    }

    /// Turns the streaming list on or off.
    #[must_use]
    pub fn streaming_list(mut self, on: bool) -> Self {
        self.streaming_list = on;
        self
    }

    /// Sets the minimum watch timeout.
    #[must_use]
    pub fn min_watch_timeout(mut self, d: Duration) -> Self {
        self.min_watch_timeout = d;
        self
    }

    /// Sets the shortest healthy watch.
    #[must_use]
    pub fn min_watch_duration(mut self, d: Duration) -> Self {
        self.min_watch_duration = d;
        self
    }

    /// Sets the margin of the watch idle deadline over the server timeout.
    #[must_use]
    pub fn watch_idle_margin(mut self, d: Duration) -> Self {
        self.watch_idle_margin = d;
        self
    }

    /// Sets the backoff: first delay, cap, healthy period that resets it, jitter factor.
    #[must_use]
    pub fn backoff(
        mut self,
        initial: Duration,
        max: Duration,
        reset: Duration,
        jitter: f64,
    ) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self.backoff_reset = reset;
        self.backoff_jitter = jitter;
        self
    }
}
