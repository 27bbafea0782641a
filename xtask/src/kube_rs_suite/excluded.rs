//! The kube-rs cluster tests `cargo xtask kube-rs-suite` does not run, each with its reason.
//!
//! Only tests that need a kubelet belong here: a container that really runs (a `Running` pod,
//! exec, attach, logs, port-forward). A test that fails for any other reason is a server gap
//! to fix, not an entry of this list. docs/testing.md ("Other projects' test suites") shows
//! the same list; keep the two in step.
//!
//! Invariant (checked by the runner): every entry names a test that exists among the ignored
//! tests of its crate, so the list cannot silently outlive a kube-rs upgrade.

/// One excluded test: its crate, its full libtest name and why it cannot pass here.
pub struct Exclusion {
    pub krate: &'static str,
    pub test: &'static str,
    pub reason: &'static str,
}

pub const EXCLUDED: &[Exclusion] = &[
    Exclusion {
        krate: "kube",
        test: "test::pod_can_await_conditions",
        // It waits (with a 15 s then a 10 s `timeout(..)?`) for `is_pod_running()` and then
        // for the `ContainersReady` condition, which only a kubelet writes.
        reason: "waits for a Running pod with ready containers (needs a kubelet)",
    },
    Exclusion {
        krate: "kube-client",
        test: "test::pod_can_exec_and_write_to_stdin",
        // `pods/exec` over WebSocket into a running busybox container, reading its stdout.
        reason: "execs into a running container (needs a kubelet)",
    },
    Exclusion {
        krate: "kube-client",
        test: "test::can_get_pod_logs_and_evict",
        // Follows `pods/log` and asserts the container's output before evicting the pod.
        reason: "reads a container's logs (needs a kubelet)",
    },
];

/// Tests that fail today for a gap of this server, not for want of a kubelet. They run;
/// their failure is reported and tolerated, and their passing fails the command, so that a
/// fixed gap leaves this list (and docs/testing.md) at once.
pub const GAPS: &[Exclusion] = &[];
