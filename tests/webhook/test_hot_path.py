"""The admission hot path on the paths a plain install takes: the stdlib JSON backend (no orjson), the stdlib asyncio
loop (no uvloop), and request bodies that arrive in several pieces."""

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from admit import eventloop as admit_loop
from admit.webhook.admission import Admission
from admit.config import Config
from admit.webhook.app import create_app
from tests.helpers import ROOT, admission_review, controller_pod, example


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter at the repository root; fails the test on a non-zero exit."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


NOTE = "caf\u00e9 \u2603 \"quoted\" \\ /"
STDLIB_ROUND_TRIP = """
import base64, json, os, sys
if os.environ["BACKEND"] == "json":
    sys.modules["orjson"] = None  # import orjson now raises ImportError
from admit.webhook import admissionreview as review
from admit.webhook.admissionreview import Decision, dumps, parse_review, review_response
assert review.JSON_BACKEND == os.environ["BACKEND"], review.JSON_BACKEND
with open(os.environ["REVIEW"], "rb") as f:
    req = parse_review(f.read())
assert req.object["metadata"]["annotations"]["note"] == os.environ["NOTE"]
decision = Decision(patch=[{"op": "add", "path": "/spec/schedulerName", "value": os.environ["NOTE"]}], warnings=["w"])
answer = dumps(review_response(req.api_version, req.uid, decision))
assert isinstance(answer, bytes) and b", " not in answer and b": " not in answer  # compact
doc = json.loads(answer)
doc["response"]["patch"] = json.loads(base64.b64decode(doc["response"]["patch"]))
print(json.dumps(doc, sort_keys=True))
"""


def test_the_stdlib_json_backend_parses_and_answers_like_orjson(tmp_path):
    review = admission_review(controller_pod(example("pause-gang-deployment.yaml")))
    review["request"]["object"]["metadata"]["annotations"] = {"note": NOTE}
    path = tmp_path / "review.json"
    path.write_text(json.dumps(review, ensure_ascii=False), encoding="utf-8")
    stdlib = json.loads(run_python(STDLIB_ROUND_TRIP, BACKEND="json", REVIEW=str(path), NOTE=NOTE).stdout)
    assert stdlib["response"]["uid"] == review["request"]["uid"]
    assert stdlib["response"]["patch"] == [{"op": "add", "path": "/spec/schedulerName", "value": NOTE}]
    try:
        import orjson  # noqa: F401
    except ImportError:
        pytest.skip("orjson not installed: the stdlib backend is the only one here (checked above)")
    assert stdlib == json.loads(run_python(STDLIB_ROUND_TRIP, BACKEND="orjson", REVIEW=str(path), NOTE=NOTE).stdout)


def test_the_server_answers_over_http_with_the_stdlib_json_backend():
    pod = controller_pod(example("pause-gang-deployment.yaml"))
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pause"
    review = admission_review(pod, strip_namespace=True)
    run_python(f"""
        import asyncio, json, sys
        sys.modules["orjson"] = None
        from aiohttp.test_utils import TestClient, TestServer
        from admit.webhook import admissionreview as review
        from admit.webhook.admission import Admission
        from admit.config import Config
        from admit.webhook.app import create_app
        assert review.JSON_BACKEND == "json"

        async def main():
            async with TestClient(TestServer(create_app(Admission(Config())))) as client:
                for path in ("/mutate", "/validate"):
                    resp = await client.post(path, data={json.dumps(json.dumps(review))},
                                             headers={{"Content-Type": "application/json"}})
                    assert resp.status == 200, await resp.text()
                    answer = json.loads(await resp.read())
                    assert answer["response"]["uid"] == {review["request"]["uid"]!r}
                    assert answer["response"]["allowed"] is True
                    print(path, answer["response"].get("patchType"))

        asyncio.run(main())
    """)


async def test_a_body_sent_in_pieces_with_content_length_is_read_whole(aiohttp_server):
    server = await aiohttp_server(create_app(Admission(Config())))
    review = admission_review(example("pause-gang-deployment.yaml"))
    body = json.dumps(review).encode()
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body[:300])
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(body[300:900])
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(body[900:])
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head + await reader.read(500)
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
    answer = json.loads(await reader.readexactly(length))
    assert answer["response"]["uid"] == review["request"]["uid"] and answer["response"]["patchType"] == "JSONPatch"
    writer.close()


async def test_a_chunked_body_is_read_whole_and_an_oversized_one_is_refused(aiohttp_client):
    client = await aiohttp_client(create_app(Admission(Config(max_body_bytes=20_000))))
    review = admission_review(example("pause-gang-deployment.yaml"))
    body = json.dumps(review).encode()

    async def pieces(data: bytes, size: int):
        for i in range(0, len(data), size):
            yield data[i:i + size]
            await asyncio.sleep(0.01)

    resp = await client.post("/validate", data=pieces(body, 250), headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["response"]["uid"] == review["request"]["uid"]
    big = body[:-1] + b"," + b'"pad":"' + b"x" * 30_000 + b'"}'
    resp = await client.post("/validate", data=pieces(big, 8000), headers={"Content-Type": "application/json"})
    assert resp.status == 400 and "larger than the limit" in await resp.text()


def test_the_stdlib_loop_is_used_when_forced_or_when_uvloop_is_missing(monkeypatch):
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.setenv(admit_loop.ENV_VAR, "asyncio")
    assert admit_loop.loop_name() == "asyncio"
    assert admit_loop.run(which()).startswith("asyncio")
    monkeypatch.delenv(admit_loop.ENV_VAR)
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert admit_loop.loop_name() == "asyncio"
    assert admit_loop.run(which()).startswith("asyncio")


def test_uvloop_is_used_when_installed(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(admit_loop.ENV_VAR, raising=False)

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert admit_loop.loop_name() == "uvloop"
    assert admit_loop.run(which()).startswith("uvloop")
