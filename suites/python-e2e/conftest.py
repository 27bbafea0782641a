# listwatch's harness for the vendored e2e suite of the Python kubernetes client (not from
# upstream; see README.md). It is what `cargo xtask python-e2e` runs pytest with:
#
# - the installed `kubernetes` package gets this directory's `kubernetes/` as a second
#   path entry, so that the suite's `from kubernetes.e2e_test import base` finds the vendored
#   `kubernetes/e2e_test` beside the installed client (the suite is not in the PyPI package);
# - the tests named in deselected.txt (those that need a kubelet) are deselected, with their
#   reasons printed; those in retried.txt get a shorter timeout (the runner retries them,
#   at most twice); an entry of either naming no collected test is an error;
# - a skipped test fails the run: upstream's tests skip themselves when they find no cluster
#   or a missing feature, and a skip must not pass for a pass here;
# - KUBECONFIG must be set and name a file, so that the suite never falls back to
#   ~/.kube/config or a guessed 127.0.0.1:8080 and runs against some other cluster;
# - with LISTWATCH_PY_E2E_FAILED set, the failed node ids are written there, one a line
#   (the runner retries those that retried.txt names, and only those).

import os

import kubernetes
import kubernetes.aio
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DESELECTED_FILE = os.path.join(HERE, "deselected.txt")
RETRIED_FILE = os.path.join(HERE, "retried.txt")
# The per-test timeout of a test in retried.txt: its own waits are at most 30 s, and a hang
# there should cost less than the runner's general timeout before the retry.
RETRIED_TIMEOUT = 40

kubernetes.__path__.append(os.path.join(HERE, "kubernetes"))
kubernetes.aio.__path__.append(os.path.join(HERE, "kubernetes", "aio"))


def read_list(path):
    """{node id: reason} from deselected.txt or retried.txt (comments, blanks ignored)."""
    entries = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise pytest.UsageError(
                    "%s:%d: a node id and a reason are needed" % (path, number))
            entries[parts[0]] = parts[1]
    return entries


def pytest_configure(config):
    path = os.environ.get("KUBECONFIG", "")
    if not path or not os.path.isfile(path):
        raise pytest.UsageError(
            "KUBECONFIG must name the kubeconfig of the server under test "
            "(cargo xtask python-e2e sets it); got %r" % path)
    config._listwatch_deselected = read_list(DESELECTED_FILE)
    config._listwatch_retried = read_list(RETRIED_FILE)
    config._listwatch_skipped = []
    config._listwatch_failed = []


def pytest_collection_modifyitems(session, config, items):
    wanted = config._listwatch_deselected
    retried = config._listwatch_retried
    keep, dropped = [], []
    for item in items:
        (dropped if item.nodeid in wanted else keep).append(item)
        if item.nodeid in retried:
            item.add_marker(pytest.mark.timeout(RETRIED_TIMEOUT))
    # An entry is stale when its file is gone, or when its file was collected without it
    # (a run narrowed by -k or to node ids cannot tell).
    collected = {item.nodeid for item in items}
    files = {nodeid.split("::", 1)[0] for nodeid in collected}
    narrowed = bool(config.getoption("keyword")) or any("::" in a for a in config.args)
    stale = sorted(
        nodeid for nodeid in list(wanted) + list(retried)
        if not os.path.isfile(os.path.join(HERE, nodeid.split("::", 1)[0]))
        or (not narrowed and nodeid.split("::", 1)[0] in files and nodeid not in collected))
    if stale:
        raise pytest.UsageError(
            "deselected.txt or retried.txt names tests that were not collected: %s"
            % ", ".join(stale))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_runtest_logreport(report):
    config = pytest_runtest_logreport.config
    if config is None:
        return
    if report.skipped:
        config._listwatch_skipped.append(report.nodeid)
    if report.failed and report.nodeid not in config._listwatch_failed:
        config._listwatch_failed.append(report.nodeid)


pytest_runtest_logreport.config = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    pytest_runtest_logreport.config = session.config


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    wanted = config._listwatch_deselected
    if wanted:
        terminalreporter.section("deselected (need a kubelet): deselected.txt")
        for nodeid, reason in wanted.items():
            terminalreporter.write_line("%s: %s" % (nodeid, reason))
    retried = config._listwatch_retried
    if retried:
        terminalreporter.section(
            "retried by the runner when they fail (at most twice): retried.txt")
        for nodeid, reason in retried.items():
            terminalreporter.write_line("%s: %s" % (nodeid, reason))
    skipped = config._listwatch_skipped
    if skipped:
        terminalreporter.section("skipped tests fail this run")
        for nodeid in skipped:
            terminalreporter.write_line(nodeid)


def pytest_sessionfinish(session, exitstatus):
    if session.config._listwatch_skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # For the runner: the node ids that failed (it retries those of retried.txt).
    out = os.environ.get("LISTWATCH_PY_E2E_FAILED")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            for nodeid in session.config._listwatch_failed:
                fh.write(nodeid + "\n")
