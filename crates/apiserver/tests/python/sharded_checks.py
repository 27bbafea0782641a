"""The Python `kubernetes` client's `shard_selector` against listwatch-apiserver (KEP-5866).

Run by tests/python_client.rs with the server's URL: two shard lists of one namespace's
ConfigMaps split it (disjoint, together everything, each item's uid hashed into its shard's
range with 64-bit FNV-1a), each echoes its selector in `metadata.shardInfo.selector`, a
sharded watch sees only its shard's changes, and a malformed selector is a 400.
Exits non-zero (with a traceback) when a check fails.
"""

import sys

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

HALF = 1 << 63
SHARDS = [
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
]


def fnv1a64(s: str) -> int:
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main(url: str) -> None:
    cfg = client.Configuration()
    cfg.host = url
    api = client.CoreV1Api(client.ApiClient(cfg))
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="shards")))
    for i in range(40):
        api.create_namespaced_config_map(
            "shards", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"c{i}"), data={"i": "0"})
        )
    everything = {c.metadata.name for c in api.list_namespaced_config_map("shards").items}
    assert len(everything) == 40, everything

    seen = set()
    rvs = []
    for n, sel in enumerate(SHARDS):
        listed = api.list_namespaced_config_map("shards", shard_selector=sel)
        assert listed.metadata.shard_info is not None, listed.metadata
        assert listed.metadata.shard_info.selector == sel, listed.metadata.shard_info
        names = {c.metadata.name for c in listed.items}
        assert names and not names & seen, (names, seen)
        seen |= names
        for c in listed.items:
            assert (fnv1a64(c.metadata.uid) >= HALF) == (n == 1), (c.metadata.uid, n)
        rvs.append((sel, names, listed.metadata.resource_version))
    assert seen == everything, (seen, everything)

    # A plain list says nothing of shards.
    assert api.list_namespaced_config_map("shards").metadata.shard_info is None

    # Each shard's watch sees exactly its own objects' changes.
    for i in range(40):
        api.patch_namespaced_config_map(f"c{i}", "shards", {"data": {"i": "1"}})
    for sel, names, rv in rvs:
        got = []
        w = watch.Watch()
        for ev in w.stream(
            api.list_namespaced_config_map, "shards", resource_version=rv, shard_selector=sel, timeout_seconds=5
        ):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == len(names):
                w.stop()
        assert sorted(got) == sorted(("MODIFIED", n) for n in names), (sel, got)

    # Upstream's 400 for a selector it cannot parse.
    for bad in [
        "shardRange(object.metadata.name, '0x0', '0x1')",
        "shardRange(object.metadata.uid, '0x0')",
        "shardRange(object.metadata.uid, '0xZZ', '0x1')",
    ]:
        try:
            api.list_namespaced_config_map("shards", shard_selector=bad)
        except ApiException as e:
            assert e.status == 400, (bad, e.status, e.body)
            assert "invalid shard selector: " in e.body, e.body
        else:
            raise AssertionError(f"{bad!r} was accepted")
    print("python shard checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
