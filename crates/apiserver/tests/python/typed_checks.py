"""Mistyped bodies from the Python `kubernetes` client: each refused as upstream's decoder
refuses it (400 BadRequest, `... cannot be handled as a ...`), nothing stored, and the
namespace's lists still parse in the client afterwards.

Run by tests/clients/typed_validation.rs with the server's URL. Exits non-zero (with a
traceback) when a check fails.
"""

import inspect
import json
import sys

from kubernetes import client
from kubernetes.client.rest import ApiException


def refused(api, call, *args, expect: str) -> None:
    """Sends `call`'s request with a dict body through the client's own serializer and
    transport (its generated methods validate bodies with pydantic first, so a mistyped
    body needs the step below them, as a client built on its ApiClient sends it)."""
    serialize = getattr(api, f"_{call.__name__}_serialize")
    names = [p for p in inspect.signature(serialize).parameters if p != "self"]
    kwargs = dict(zip(names, args))
    for n in names[len(args):]:
        kwargs[n] = 0 if n == "_host_index" else None
    r = api.api_client.call_api(*serialize(**kwargs))
    r.read()
    body = json.loads(r.data)
    assert r.status == 400, (call.__name__, r.status, body)
    assert body["reason"] == "BadRequest", body
    assert expect in body["message"], (expect, body["message"])


def main(url: str) -> None:
    cfg = client.Configuration()
    cfg.host = url
    api = client.CoreV1Api(client.ApiClient(cfg))
    ns = "default"

    # The red team's case: an Event whose typed fields are mistyped. Dict bodies go out
    # as they are (the client sanitizes only its model objects).
    meta = {"name": "ev-bad", "namespace": ns}
    involved = {"kind": "Pod", "name": "p", "namespace": ns}
    refused(api, api.create_namespaced_event, ns,
            {"metadata": meta, "involvedObject": involved, "count": "three", "reason": "R"},
            expect="json: cannot unmarshal string into Go struct field Event.count of type int32")
    refused(api, api.create_namespaced_event, ns,
            {"metadata": meta, "involvedObject": involved, "firstTimestamp": "yesterday"},
            expect='parsing time "yesterday"')
    refused(api, api.create_namespaced_event, ns,
            {"metadata": meta, "involvedObject": "pod/p"},
            expect="Go struct field Event.involvedObject of type v1.ObjectReference")
    # A well-typed one is stored, and the list still parses (it did not before: the stored
    # mistyped Event made the client's model fail).
    api.create_namespaced_event(ns, client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="ev-good"), involved_object=client.V1ObjectReference(
            kind="Pod", name="p", namespace=ns), reason="R", message="m", count=2, type="Normal"))
    names = [e.metadata.name for e in api.list_namespaced_event(ns).items]
    assert names == ["ev-good"], names

    refused(api, api.create_namespaced_pod, ns,
            {"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "c", "image": "i", "ports": [{"containerPort": "http"}]}]}},
            expect="Go struct field ContainerPort.spec.containers.ports.containerPort of type int32")
    refused(api, api.create_namespaced_pod, ns,
            {"metadata": {"name": "p"}, "spec": {"containers": {"name": "c", "image": "i"}}},
            expect="json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container")
    refused(api, api.create_namespaced_service, ns,
            {"metadata": {"name": "s"}, "spec": {"ports": [{"port": "eighty"}]}},
            expect="Go struct field ServicePort.spec.ports.port of type int32")
    refused(api, api.create_namespaced_config_map, ns,
            {"metadata": {"name": "cm"}, "data": {"n": 5}},
            expect="json: cannot unmarshal number into Go struct field ConfigMap.data of type string")
    refused(api, api.create_namespaced_secret, ns,
            {"metadata": {"name": "sec"}, "data": {"k": "not base64!"}},
            expect="Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3")
    for name in ["p", "s", "cm", "sec"]:
        for read in [api.read_namespaced_pod, api.read_namespaced_service,
                     api.read_namespaced_config_map, api.read_namespaced_secret]:
            try:
                read(name, ns)
            except ApiException as e:
                assert e.status == 404, e
                continue
            raise AssertionError(f"{name} was stored by {read.__name__}")
    # Update: the stored object stays as it was.
    api.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"),
                                                            data={"a": "b"}))
    cur = api.read_namespaced_config_map("cm", ns).to_dict()
    refused(api, api.replace_namespaced_config_map, "cm", ns,
            {"metadata": {"name": "cm", "resourceVersion": cur["metadata"]["resource_version"]},
             "data": {"a": ["b"]}},
            expect="cannot unmarshal array into Go struct field ConfigMap.data of type string")
    assert api.read_namespaced_config_map("cm", ns).data == {"a": "b"}
    print("python typed checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
