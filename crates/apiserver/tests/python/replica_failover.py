"""The Python `kubernetes` client watching through a load balancer while the replica under
its watch is killed (driven by tests/replicas_failover.rs).

Protocol on stdout/stdin, one line each:
  -> "listed RV"            after listing namespace `py`'s ConfigMaps at RV
  -> "event TYPE NAME RV"   for every watch event, flushed at once
  -> "rewatch RV ERROR"     when the watch connection failed and is reopened from RV
  -> "done"                 after `want` events
The watch loop is what a Python controller does: the client does not reconnect by itself,
so on a connection error it opens a new watch from the last resourceVersion it received.
"""

import sys
import time

import urllib3
from kubernetes import client, watch


def main(url: str, want: int) -> None:
    cfg = client.Configuration()
    cfg.host = url
    api = client.CoreV1Api(client.ApiClient(cfg))
    listed = api.list_namespaced_config_map("py")
    rv = listed.metadata.resource_version
    print(f"listed {rv}", flush=True)
    seen = 0
    deadline = time.monotonic() + 120
    while seen < want:
        assert time.monotonic() < deadline, "no progress in 120 s"
        try:
            w = watch.Watch()
            for ev in w.stream(
                api.list_namespaced_config_map, "py", resource_version=rv, timeout_seconds=60
            ):
                obj = ev["object"]
                rv = obj.metadata.resource_version
                print(f"event {ev['type']} {obj.metadata.name} {rv}", flush=True)
                seen += 1
                if seen >= want:
                    w.stop()
                    break
        except (urllib3.exceptions.HTTPError, ConnectionError, OSError) as e:
            print(f"rewatch {rv} {type(e).__name__}", flush=True)
            time.sleep(0.2)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
