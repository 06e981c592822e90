"""``admit serve``'s listener is aiohttp's low-level server (``webhook.app.create_server``): one dispatch instead of
the router, the ConnectionGuard called per request instead of as middleware, pre-encoded allowed answers. Each test
holds it to what the ``Application`` of ``create_app`` answers for the same bytes, so nothing a client sees changed."""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest
from aiohttp import web

from admit.config import Config
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import Decision, dumps, encode_response, review_response
from admit.webhook.app import create_app, create_server
from admit.webhook.connections import ConnectionGuard
from tests.helpers import admission_review, controller_pod, example

DEPLOYMENT = example("pause-gang-deployment.yaml")
KNOWN_GROUP_POD = controller_pod(DEPLOYMENT)  # a pod of the Deployment after admit mutated its template
KNOWN_GROUP_POD["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pause"
KNOWN_GROUP_POD["spec"]["schedulerName"] = "scheduler-plugins-scheduler"


def _json(review: dict) -> bytes:
    return json.dumps(review).encode()


CASES = [
    ("POST", "/mutate?timeout=10s", _json(admission_review(KNOWN_GROUP_POD, uid="pod-1")), "application/json"),
    ("POST", "/validate?timeout=10s", _json(admission_review(KNOWN_GROUP_POD, uid="pod-2")), "application/json"),
    ("POST", "/mutate", _json(admission_review(DEPLOYMENT, uid="deployment-1")), "application/json"),
    ("POST", "/mutate", _json(admission_review(DEPLOYMENT, uid='quote"and\u00e9')), "application/json"),
    ("POST", "/validate", b"{not json", "application/json"),
    ("POST", "/mutate", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "application/json"),
    ("POST", "/mutate", _json(admission_review(DEPLOYMENT)), "text/plain"),
    ("GET", "/healthz", b"", None),
    ("HEAD", "/healthz", b"", None),
    ("GET", "/readyz", b"", None),
    ("GET", "/mutate", b"", None),
    ("PUT", "/healthz", b"", None),
    ("POST", "/nothing-here", b"{}", "application/json"),
    ("GET", "/%6Dutate", b"", None),  # percent-encoded: the router decodes it, so does the dispatch
]


async def _low_level_base_url(server: web.Server) -> tuple[web.ServerRunner, str]:
    runner = web.ServerRunner(server, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _answer(session: aiohttp.ClientSession, url: str, method: str, body: bytes, ctype: str | None) -> tuple:
    headers = {"Content-Type": ctype} if ctype else {}
    async with session.request(method, url, data=body or None, headers=headers) as resp:
        text = await resp.read()
        body_out: object = json.loads(text) if resp.content_type == "application/json" else text
        return resp.status, body_out, resp.headers.get("Allow"), resp.headers.get("Content-Type")


async def test_the_low_level_server_answers_every_request_as_the_application_does(aiohttp_client):
    app_client = await aiohttp_client(create_app(Admission(Config())))
    runner, base = await _low_level_base_url(create_server(Admission(Config()), None,
                                                           ConnectionGuard(lambda: None)))  # type: ignore[arg-type, return-value]
    try:
        async with aiohttp.ClientSession() as session:
            for method, path, body, ctype in CASES:
                want = await _answer(app_client.session, str(app_client.make_url(path)), method, body, ctype)
                got = await _answer(session, base + path, method, body, ctype)
                assert got == want, (method, path)
    finally:
        await runner.cleanup()


async def test_a_pod_review_is_answered_with_its_uid_and_a_deployment_with_its_patch_through_the_low_level_server():
    runner, base = await _low_level_base_url(create_server(Admission(Config())))
    try:
        async with aiohttp.ClientSession() as session:
            status, answer, _, ctype = await _answer(session, base + "/mutate", "POST", CASES[0][2], "application/json")
            assert status == 200 and ctype == "application/json"
            assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": "pod-1", "allowed": True}}
            status, answer, _, _ = await _answer(session, base + "/mutate", "POST", CASES[2][2], "application/json")
            patch = json.loads(base64.b64decode(answer["response"]["patch"]))
            assert status == 200 and answer["response"]["uid"] == "deployment-1"
            assert {"op": "add", "path": "/spec/template/spec/schedulerName",
                    "value": "scheduler-plugins-scheduler"} in patch
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "admission.k8s.io/v2"])
@pytest.mark.parametrize("decision", [
    Decision(),
    Decision(patch=[{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]),
    Decision(message="PodGroup job-a exists"),
    Decision(warnings=["a warning"]),
    Decision.deny("below minMember", 403),
], ids=["allowed", "patched", "message", "warnings", "denied"])
@pytest.mark.parametrize("uid", ["705ab4f5-6393-11e8-b7cc-42010a800002", 'a"quote\\and\u00e9\n'])
def test_an_encoded_answer_is_byte_for_byte_the_review_response_of_its_decision(api_version, decision, uid):
    assert encode_response(api_version, uid, decision) == dumps(review_response(api_version, uid, decision))


async def test_once_closing_both_the_low_level_server_and_an_application_behind_the_guard_answer_connection_close():
    guard = ConnectionGuard(lambda: None)  # type: ignore[arg-type, return-value]
    app = create_app(Admission(Config()))
    app.middlewares.append(guard.middleware)
    app_runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await app_runner.setup()
    app_site = web.TCPSite(app_runner, "127.0.0.1", 0)
    await app_site.start()
    app_base = f"http://127.0.0.1:{app_site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    runner, base = await _low_level_base_url(create_server(Admission(Config()), None, guard))
    try:
        async with aiohttp.ClientSession() as session:
            for url in (base, app_base):
                async with session.get(url + "/healthz") as resp:
                    assert resp.status == 200 and resp.headers.get("Connection") is None
            guard.begin_closing()
            for url in (base, app_base):
                async with session.get(url + "/healthz") as resp:
                    assert resp.status == 200 and resp.headers.get("Connection") == "close"
    finally:
        await runner.cleanup()
        await app_runner.cleanup()
