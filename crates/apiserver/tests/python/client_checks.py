"""The Python `kubernetes` client against listwatch-apiserver.

Run by tests/python_client.rs with the server's URL. The server keeps a short history
(--embedded-retain-revisions), so an old resource version expires after a few writes.
Exits non-zero (with a traceback) when a check fails.
"""

import sys

from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def main(url: str) -> None:
    cfg = client.Configuration()
    cfg.host = url
    api = client.CoreV1Api(client.ApiClient(cfg))

    # VersionApi requests `/version/` (with the slash); the fields are the build's.
    code = client.VersionApi(client.ApiClient(cfg)).get_code()
    assert (code.major, code.minor) == ("1", "32"), code
    assert code.git_version.startswith("v1.32."), code
    assert code.git_commit != "listwatch" and not code.build_date.startswith("1970"), code

    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
    for i in range(3):
        cm = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"c{i}", labels={"app": "py"}), data={"i": str(i)}
        )
        api.create_namespaced_config_map("py", cm)

    # List, with a selector.
    listed = api.list_namespaced_config_map("py", label_selector="app=py")
    assert sorted(c.metadata.name for c in listed.items) == ["c0", "c1", "c2"], listed.items
    rv = listed.metadata.resource_version
    assert rv and rv.isdigit(), rv

    # Watch from the list's resource version: exactly the changes made after it, in order.
    api.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c3")))
    api.patch_namespaced_config_map("c0", "py", {"data": {"i": "changed"}})
    api.delete_namespaced_config_map("c1", "py")
    events = []
    w = watch.Watch()
    for ev in w.stream(api.list_namespaced_config_map, "py", resource_version=rv, timeout_seconds=5):
        events.append((ev["type"], ev["object"].metadata.name))
        if len(events) == 3:
            w.stop()
    assert events == [("ADDED", "c3"), ("MODIFIED", "c0"), ("DELETED", "c1")], events
    assert api.read_namespaced_config_map("c0", "py").data == {"i": "changed"}

    # 410: push the history past `rv`, then ask for it again.
    for i in range(60):
        api.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"x{i}")))
    try:
        api.list_namespaced_config_map("py", resource_version=rv, resource_version_match="Exact")
        raise AssertionError("an expired list succeeded")
    except ApiException as e:
        assert e.status == 410, e
    try:
        for ev in watch.Watch().stream(
            api.list_namespaced_config_map, "py", resource_version=rv, timeout_seconds=5
        ):
            raise AssertionError(f"an expired watch delivered {ev['type']}")
        raise AssertionError("an expired watch ended without an error")
    except ApiException as e:
        assert e.status == 410, e

    # A name with a ':' (events take any path-segment name): the client percent-encodes
    # path parameters, so it reads `.../events/a%3Ab`, which must name `a:b`.
    ev = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="a:b"),
        involved_object=client.V1ObjectReference(kind="Pod", name="x", namespace="py"),
        reason="Test",
    )
    api.create_namespaced_event("py", ev)
    assert api.read_namespaced_event("a:b", "py").metadata.name == "a:b"
    api.patch_namespaced_event("a:b", "py", {"reason": "Patched"})
    assert api.read_namespaced_event("a:b", "py").reason == "Patched"
    api.delete_namespaced_event("a:b", "py")

    # Not found is an ApiException with the server's Status.
    try:
        api.read_namespaced_config_map("nope", "py")
        raise AssertionError("read of a missing object succeeded")
    except ApiException as e:
        assert e.status == 404, e
    print("python client checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
