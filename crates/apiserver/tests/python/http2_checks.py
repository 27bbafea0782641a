"""The Python `kubernetes` client over HTTP/2 (TLS, ALPN `h2`) against listwatch-apiserver.

Run by tests/python_client.rs with the server's URL and the `--pki-dir` directory (CA,
admin certificate and key). Exits non-zero (with a traceback) when a check fails; prints
`requests: N` (every request the client sent) and the pass line at the end.

The transport is urllib3 2.x's experimental HTTP/2 (`urllib3.http2.inject_into_urllib3()`,
which needs the `h2` package): its connection class negotiates `h2` by ALPN — offering
`h2` alone, so a server that offers only `http/1.1` fails the handshake — and encodes the
client's requests on its `h2` state machine. What it cannot do is a watch: its
`getresponse()` reads the whole stream up to END_STREAM before returning, and its response
object implements neither `stream()` nor `release_conn()` (both raise NotImplementedError),
which `kubernetes.watch.Watch` calls. So this module keeps urllib3's connection and puts a
streaming response in place of the buffered one: the response head is returned as soon as
it arrives, and the body is handed over DATA frame by DATA frame, with flow-control window
released as it is read. The kubernetes client itself (its generated API, its REST layer and
its Watch) is used unmodified. urllib3's HTTP/2 connection carries one stream at a time, so
a watch holds its connection and the pool opens another one for requests made meanwhile.
"""

import sys

import h2.errors
import h2.events
import urllib3
import urllib3.http2
from urllib3._collections import HTTPHeaderDict
from urllib3.exceptions import ProtocolError
from urllib3.http2.connection import HTTP2Connection
from urllib3.response import BaseHTTPResponse

from kubernetes import client, watch


class StreamingHTTP2Connection(HTTP2Connection):
    """urllib3's HTTP/2 connection, answering with a streaming response."""

    requests = 0

    def request(self, method, url, body=None, headers=None, **kwargs):
        StreamingHTTP2Connection.requests += 1
        super().request(method, url, body, headers, **kwargs)

    def _receive(self, stream_id, on_data):
        """Reads from the socket once and feeds the h2 state machine; returns its events
        for `stream_id` other than DATA, which goes to `on_data`."""
        data = self.sock.recv(65535)
        if not data:
            raise ProtocolError("the connection closed mid-response")
        out = []
        with self._h2_conn as conn:
            for ev in conn.receive_data(data):
                if getattr(ev, "stream_id", None) != stream_id:
                    continue
                if isinstance(ev, h2.events.DataReceived):
                    on_data(ev.data)
                    conn.acknowledge_received_data(ev.flow_controlled_length, stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    raise ProtocolError(f"stream reset by the server: {ev.error_code!r}")
                else:
                    out.append(ev)
            if pending := conn.data_to_send():
                self.sock.sendall(pending)
        return out

    def getresponse(self):
        stream_id = self._h2_stream
        response = StreamingHTTP2Response(self, stream_id, self._request_url)
        while response.status is None:
            for ev in self._receive(stream_id, response._pending.append):
                response._event(ev)
        return response


class StreamingHTTP2Response(BaseHTTPResponse):
    """One HTTP/2 response stream, read as its DATA frames arrive."""

    opened = 0

    def __init__(self, conn, stream_id, request_url):
        self._conn = conn
        self._stream_id = stream_id
        self._pending = []
        self._ended = False
        self._head = HTTPHeaderDict()
        self.status = None
        self.length_remaining = None
        self._request_url = request_url
        StreamingHTTP2Response.opened += 1

    def _event(self, ev):
        if isinstance(ev, h2.events.ResponseReceived):
            for name, value in ev.headers:
                if name == b":status":
                    status = int(value.decode())
                else:
                    self._head.add(name.decode("ascii"), value.decode("ascii"))
            super().__init__(
                headers=self._head,
                status=status,
                version=20,
                version_string="HTTP/2",
                reason=None,
                decode_content=False,
                request_url=self._request_url,
            )
        if isinstance(ev, h2.events.StreamEnded):
            self._ended = True

    def stream(self, amt=None, decode_content=None):
        while True:
            while self._pending:
                yield self._pending.pop(0)
            if self._ended:
                self.release_conn()
                return
            for ev in self._conn._receive(self._stream_id, self._pending.append):
                self._event(ev)

    def read(self, amt=None, decode_content=None, cache_content=False):
        return b"".join(self.stream())

    @property
    def data(self):
        return self.read()

    def release_conn(self):
        pool = getattr(self, "_pool", None)
        conn = getattr(self, "_connection", None)
        if conn is not None and not self._ended:
            # Stopped mid-stream (a watch the caller left): cancel it, drop the connection.
            self.close()
        if pool is not None and conn is not None:
            pool._put_conn(conn)
            self._connection = None

    def drain_conn(self):
        self.read()

    def close(self):
        if self._ended:
            return
        self._ended = True
        self._pending.clear()
        try:
            with self._conn._h2_conn as conn:
                conn.reset_stream(self._stream_id, h2.errors.ErrorCodes.CANCEL)
                if pending := conn.data_to_send():
                    self._conn.sock.sendall(pending)
        except Exception:
            pass
        self._conn.close()

    def get_redirect_location(self):
        return None

    @property
    def connection(self):
        return getattr(self, "_connection", None)

    @property
    def url(self):
        return self._request_url

    @url.setter
    def url(self, value):
        self._request_url = value


def use_http2():
    urllib3.http2.inject_into_urllib3()
    urllib3.connectionpool.HTTPSConnectionPool.ConnectionCls = StreamingHTTP2Connection
    assert urllib3.util.ALPN_PROTOCOLS == ["h2"], urllib3.util.ALPN_PROTOCOLS


def main(url: str, pki: str) -> None:
    use_http2()
    cfg = client.Configuration()
    cfg.host = url
    cfg.ssl_ca_cert = f"{pki}/ca.crt"
    cfg.cert_file = f"{pki}/admin.crt"
    cfg.key_file = f"{pki}/admin.key"
    api = client.CoreV1Api(client.ApiClient(cfg))

    # Creates.
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py-h2")))
    for i in range(3):
        cm = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"c{i}", labels={"app": "py"}), data={"i": str(i)}
        )
        created = api.create_namespaced_config_map("py-h2", cm)
        assert created.metadata.uid, created

    # A list, with a selector.
    listed = api.list_namespaced_config_map("py-h2", label_selector="app=py")
    assert sorted(c.metadata.name for c in listed.items) == ["c0", "c1", "c2"], listed.items
    rv = listed.metadata.resource_version
    assert rv and rv.isdigit(), rv

    # A watch from the list's version: the create made after the list arrives first; then,
    # while the watch is open, another create (on another connection) arrives as an event
    # of the same stream. A response read only at END_STREAM would get neither before the
    # server's 60 s timeout, and then not the second one.
    api.create_namespaced_config_map("py-h2", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c3")))
    opened = StreamingHTTP2Response.opened
    events = []
    w = watch.Watch()
    for ev in w.stream(api.list_namespaced_config_map, "py-h2", resource_version=rv, timeout_seconds=60):
        events.append((ev["type"], ev["object"].metadata.name))
        if len(events) == 1:
            api.create_namespaced_config_map(
                "py-h2", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c4"))
            )
        if len(events) == 2:
            w.stop()
    assert events == [("ADDED", "c3"), ("ADDED", "c4")], events
    # The watch and the create during it were HTTP/2 responses of this module.
    assert StreamingHTTP2Response.opened == opened + 2, StreamingHTTP2Response.opened

    # The connection the watch held was given up; the client goes on.
    # (kube-root-ca.crt: the namespace's CA bundle, published by the server.)
    names = sorted(c.metadata.name for c in api.list_namespaced_config_map("py-h2").items
                   if c.metadata.name != "kube-root-ca.crt")
    assert names == ["c0", "c1", "c2", "c3", "c4"], names
    print(f"requests: {StreamingHTTP2Connection.requests}")
    print("python http2 checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
