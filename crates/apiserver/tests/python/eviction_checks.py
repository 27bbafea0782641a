"""The Python `kubernetes` client's `create_namespaced_pod_eviction` against listwatch-apiserver.

Run by tests/clients/pod_eviction.rs with the server's URL (started with
--acknowledge-pod-deletion). A budget that allows no disruption answers 429 with its
DisruptionBudget cause; once its status allows one, the eviction deletes the pod and spends it.
Exits non-zero (with a traceback) when a check fails.
"""

import json
import sys
import time

from kubernetes import client
from kubernetes.client.rest import ApiException


def main(url: str) -> None:
    cfg = client.Configuration()
    cfg.host = url
    api_client = client.ApiClient(cfg)
    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="evict")))
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="web", labels={"app": "web"}),
        spec=client.V1PodSpec(node_name="n1", containers=[client.V1Container(name="c", image="nginx")]),
    )
    core.create_namespaced_pod("evict", pod)
    core.patch_namespaced_pod_status(
        "web", "evict", {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )
    pdb = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1PodDisruptionBudgetSpec(
            min_available=1, selector=client.V1LabelSelector(match_labels={"app": "web"})
        ),
    )
    policy.create_namespaced_pod_disruption_budget("evict", pdb)
    status = {"observedGeneration": 1, "disruptionsAllowed": 0, "desiredHealthy": 1,
              "currentHealthy": 1, "expectedPods": 1}
    policy.patch_namespaced_pod_disruption_budget_status("web", "evict", {"status": status})

    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="web", namespace="evict"))
    try:
        core.create_namespaced_pod_eviction("web", "evict", eviction)
        raise AssertionError("eviction allowed by a budget with disruptionsAllowed 0")
    except ApiException as e:
        assert e.status == 429, (e.status, e.body)
        body = json.loads(e.body)
        causes = body["details"]["causes"]
        assert causes == [{"reason": "DisruptionBudget",
                           "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}], body
    assert core.read_namespaced_pod("web", "evict").metadata.deletion_timestamp is None

    status["disruptionsAllowed"] = 1
    policy.patch_namespaced_pod_disruption_budget_status("web", "evict", {"status": status})
    core.create_namespaced_pod_eviction("web", "evict", eviction)
    deadline = time.monotonic() + 60
    while True:
        try:
            core.read_namespaced_pod("web", "evict")
        except ApiException as e:
            assert e.status == 404, e
            break
        assert time.monotonic() < deadline, "the evicted pod is still there"
        time.sleep(0.05)
    spent = policy.read_namespaced_pod_disruption_budget("web", "evict").status
    assert spent.disruptions_allowed == 0, spent
    assert list(spent.disrupted_pods) == ["web"], spent
    print("python eviction checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
