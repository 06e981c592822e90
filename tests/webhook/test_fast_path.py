"""The fast path of ``admit serve``'s listener (``webhook.fastpath.FastRequestHandler``): a complete AdmissionReview
on an idle keep-alive connection is answered inside ``data_received``, with the bytes and metrics of aiohttp's own
path; everything else takes aiohttp's path. Each test feeds a connection the bytes kube-apiserver sends and reads
what the server wrote back."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from aiohttp import web

from admit.config import Config
from admit.observability.metrics import _WEBHOOKS
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import parse_review
from admit.webhook.app import create_server
from admit.webhook.connections import ConnectionGuard
from admit.webhook.fastpath import SUPPORTED, FastRequestHandler
from tests.helpers import admission_review, controller_pod, example

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="this aiohttp lacks what the fast path reads")

DEPLOYMENT = example("pause-gang-deployment.yaml")
KNOWN_GROUP_POD = controller_pod(DEPLOYMENT)
KNOWN_GROUP_POD["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pause"
KNOWN_GROUP_POD["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
BARE_POD = controller_pod(DEPLOYMENT)
BARE_POD["metadata"]["annotations"] = {"gang.admit.dev/min-member": "2", "gang.admit.dev/pod-group": "pair"}


def request(path: str, review: dict[str, Any] | bytes, *extra: bytes) -> bytes:
    """The bytes of a POST as kube-apiserver's webhook client sends it (``?timeout=10s``, keep-alive)."""
    body = review if isinstance(review, bytes) else json.dumps(review).encode()
    return (b"POST %s?timeout=10s HTTP/1.1\r\nHost: admit.admit-system.svc:443\r\nUser-Agent: kube-apiserver-admission"
            b"\r\nContent-Type: application/json\r\nAccept: application/json, */*\r\n%sContent-Length: %d\r\n\r\n"
            % (path.encode(), b"".join(extra), len(body))) + body


class Wire(asyncio.Transport):
    """A connection's transport that keeps what the server writes."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def connect(server: web.Server) -> tuple[asyncio.Protocol, Wire]:
    protocol = server()
    wire = Wire()
    protocol.connection_made(wire)
    return protocol, wire


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def answers(raw: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """``(status line, headers without Date, body)`` of each HTTP answer in ``raw``."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", headers.pop("Date"))
        size = int(headers["Content-Length"])
        out.append((lines[0], headers, rest[:size]))
        raw = rest[size:]
    return out


async def both(data: list[bytes], admission: Admission | None = None) -> tuple[Wire, Wire, bool]:
    """Feed ``data`` (one ``data_received`` per item) to the fast server and to aiohttp's plain low-level server
    around the same webhook; returns both wires and whether the fast one had answered inline (its answer made inside
    ``data_received``, waiting for the end of the loop's batch of reads)."""
    fast_server = create_server(admission or Admission(Config()), None, ConnectionGuard(lambda: None))  # type: ignore[arg-type, return-value]
    plain_server = web.Server(fast_server.request_handler, access_log=None)
    fast, fast_wire = connect(fast_server)
    plain, plain_wire = connect(plain_server)
    assert isinstance(fast, FastRequestHandler) and not isinstance(plain, FastRequestHandler)
    await settle()
    for chunk in data:
        fast.data_received(chunk)
        plain.data_received(chunk)
    inline = fast.out is not None or bool(fast_wire.out)
    await settle()
    fast.connection_lost(None)
    plain.connection_lost(None)
    return fast_wire, plain_wire, inline


async def test_a_pod_review_is_answered_inline_with_the_bytes_aiohttps_own_path_sends():
    for path in ("/mutate", "/validate"):
        fast, plain, inline = await both([request(path, admission_review(KNOWN_GROUP_POD, uid="pod-1"))])
        assert inline, path
        assert answers(bytes(fast.out)) == answers(bytes(plain.out))
        status, headers, body = answers(bytes(fast.out))[0]
        assert status == "HTTP/1.1 200 OK" and headers["Content-Type"] == "application/json"
        assert json.loads(body)["response"] == {"uid": "pod-1", "allowed": True}


async def test_a_patch_a_v1beta1_review_and_a_denial_are_the_same_bytes_on_both_paths():
    cases = [request("/mutate", admission_review(BARE_POD, uid="bare")),
             request("/mutate", json.dumps(admission_review(KNOWN_GROUP_POD, uid="b1")).replace(
                 "admission.k8s.io/v1", "admission.k8s.io/v1beta1").encode()),
             request("/validate", admission_review(DEPLOYMENT, uid="deployment", dry_run=True))]
    for data in cases:
        fast, plain, _ = await both([data])
        assert answers(bytes(fast.out)) == answers(bytes(plain.out))
        assert b'"uid":' in fast.out


async def test_malformed_input_still_gets_aiohttps_400_with_the_reason():
    for data in (request("/validate", b"{not json"), request("/mutate", b'{"kind": "AdmissionReview"}'),
                 request("/mutate", admission_review(KNOWN_GROUP_POD)).replace(b"application/json\r\nAccept",
                                                                               b"text/plain\r\nAccept")):
        fast, plain, inline = await both([data])
        assert not inline
        assert answers(bytes(fast.out)) == answers(bytes(plain.out))
        assert answers(bytes(fast.out))[0][0] == "HTTP/1.1 400 Bad Request"


async def test_a_body_that_arrives_in_two_reads_is_answered_by_aiohttps_path_once_it_is_whole():
    data = request("/mutate", admission_review(KNOWN_GROUP_POD, uid="split"))
    fast, plain, inline = await both([data[:300], data[300:]])
    assert not inline
    assert answers(bytes(fast.out)) == answers(bytes(plain.out))
    assert json.loads(answers(bytes(fast.out))[0][2])["response"]["uid"] == "split"


async def test_two_pipelined_reviews_are_answered_in_order():
    data = request("/mutate", admission_review(KNOWN_GROUP_POD, uid="first")) + \
        request("/validate", admission_review(KNOWN_GROUP_POD, uid="second"))
    fast, plain, _ = await both([data])
    got = answers(bytes(fast.out))
    assert got == answers(bytes(plain.out))
    assert [json.loads(body)["response"]["uid"] for _, _, body in got] == ["first", "second"]


async def test_connection_close_from_the_client_takes_aiohttps_path_and_closes():
    fast, plain, inline = await both([request("/mutate", admission_review(KNOWN_GROUP_POD), b"Connection: close\r\n")])
    assert not inline and fast.closed and plain.closed
    assert answers(bytes(fast.out)) == answers(bytes(plain.out))


async def test_once_shutdown_begins_a_review_is_answered_with_connection_close():
    guard = ConnectionGuard(lambda: None)  # type: ignore[arg-type, return-value]
    server = create_server(Admission(Config()), None, guard)
    protocol, wire = connect(server)
    guard.begin_closing()
    await settle()
    protocol.data_received(request("/mutate", admission_review(KNOWN_GROUP_POD, uid="late")))
    await settle()
    status, headers, body = answers(bytes(wire.out))[0]
    assert headers.get("Connection") == "close" and json.loads(body)["response"]["uid"] == "late"


async def test_an_inline_answer_is_counted_in_the_metrics_once():
    def count() -> int:
        return _WEBHOOKS.series[("/validate", "200")].count

    before = count()
    _, _, inline = await both([request("/validate", admission_review(KNOWN_GROUP_POD))])
    assert inline
    assert count() - before == 2  # one from each server: the inline answer once, aiohttp's path once
    assert _WEBHOOKS.in_flight["/validate"][0] == 0


async def test_the_guard_sees_an_inline_answer_as_the_end_of_a_request():
    guard = ConnectionGuard(create_server(Admission(Config()), None, None), read_timeout=5.0)
    conn = guard()
    wire = Wire()
    conn.connection_made(wire)
    await settle()
    conn.data_received(request("/mutate", admission_review(KNOWN_GROUP_POD)))
    await settle()
    assert wire.out.startswith(b"HTTP/1.1 200 OK")
    assert conn.reading_since is None and not conn.in_request  # type: ignore[attr-defined]
    assert guard.expire(now=10**9) == 0
    conn.connection_lost(None)


async def test_inline_answers_are_written_once_the_loop_has_handled_its_batch_of_reads():
    server = create_server(Admission(Config()), None, None)
    connections = [connect(server) for _ in range(3)]
    await settle()
    for i, (protocol, _) in enumerate(connections):  # one batch: the loop read three connections in a row
        protocol.data_received(request("/validate", admission_review(KNOWN_GROUP_POD, uid=f"pod-{i}")))
    assert not any(wire.out for _, wire in connections)  # nothing written while the batch is being read
    await asyncio.sleep(0)
    for i, (protocol, wire) in enumerate(connections):
        ((status, _, body),) = answers(bytes(wire.out))
        assert status == "HTTP/1.1 200 OK" and json.loads(body)["response"] == {"uid": f"pod-{i}", "allowed": True}
        protocol.connection_lost(None)


async def test_a_request_read_before_the_answer_was_written_is_answered_after_it():
    server = create_server(Admission(Config()), None, None)
    protocol, wire = connect(server)
    await settle()
    protocol.data_received(request("/mutate", admission_review(KNOWN_GROUP_POD, uid="first")))
    protocol.data_received(request("/validate", admission_review(KNOWN_GROUP_POD, uid="second")))
    await settle()
    assert [json.loads(body)["response"]["uid"] for _, _, body in answers(bytes(wire.out))] == ["first", "second"]
    protocol.connection_lost(None)


@pytest.mark.parametrize("close", ["shutdown", "keep-alive timeout", "close"])
async def test_an_answer_not_yet_written_goes_out_before_aiohttp_closes_the_connection(close):
    server = create_server(Admission(Config()), None, None)
    protocol, wire = connect(server)
    await settle()
    protocol.data_received(request("/mutate", admission_review(KNOWN_GROUP_POD, uid="last")))
    assert not wire.out
    if close == "shutdown":  # admit serve's runner cleanup: every connection's handler is shut down
        await server.shutdown(1.0)
    elif close == "keep-alive timeout":
        protocol.force_close()  # type: ignore[attr-defined]  # what aiohttp's _process_keepalive calls
    else:  # aiohttp's close(): no further request is taken on this connection
        protocol.close()  # type: ignore[attr-defined]
    assert wire.closed or close == "close"
    assert json.loads(answers(bytes(wire.out))[0][2])["response"]["uid"] == "last"
    protocol.connection_lost(None)


@pytest.mark.parametrize("review", [
    admission_review(KNOWN_GROUP_POD), admission_review(BARE_POD), admission_review(KNOWN_GROUP_POD, dry_run=True),
    admission_review(DEPLOYMENT), admission_review(DEPLOYMENT, "UPDATE", old=DEPLOYMENT),
    admission_review(KNOWN_GROUP_POD, "DELETE"),
], ids=["known-group pod", "bare gang pod", "dry-run pod", "deployment create", "deployment update", "pod delete"])
async def test_verdict_now_gives_validates_decision_or_leaves_it_to_validate(review):
    admission = Admission(Config())
    req = parse_review(json.dumps(review).encode())
    now = admission.verdict_now(req)[0]
    later = await admission.validate(parse_review(json.dumps(review).encode()))
    if req.kind == "Pod" and req.operation == "CREATE":
        assert now is not None  # a pod needs no API call here: the fast path answers it
    if now is not None:
        assert now == later


async def test_a_review_the_fast_path_leaves_to_aiohttps_path_is_parsed_and_decided_once(monkeypatch):
    import admit.webhook.admission as admission_module
    import admit.webhook.app as app_module
    calls = {"parse": 0, "validate": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(app_module, "parse_review", counted("parse", app_module.parse_review))
    monkeypatch.setattr(admission_module, "validate", counted("validate", admission_module.validate))
    server = create_server(Admission(Config()), None, ConnectionGuard(lambda: None))  # type: ignore[arg-type]
    conn, wire = connect(server)
    await settle()
    conn.data_received(request("/validate", admission_review(DEPLOYMENT, uid="deployment")))
    assert not wire.out  # a gang workload's PodGroup is made on aiohttp's path (it awaits the API)
    await settle()
    conn.connection_lost(None)
    status, _, body = answers(bytes(wire.out))[0]
    assert status == "HTTP/1.1 200 OK" and json.loads(body)["response"]["uid"] == "deployment"
    assert calls == {"parse": 1, "validate": 1}
