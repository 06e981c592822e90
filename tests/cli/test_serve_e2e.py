"""``admit serve`` as a real process: HTTPS on loopback, its Kubernetes API a fake over HTTP, in both cert modes."""

import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import sys
from typing import Any
from pathlib import Path

import aiohttp
import pytest

from admit.tls.certs import write_development_certificates
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import EXAMPLES, ROOT, admission_review, apply_answer, example


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: ``python -c`` program that runs ``admit`` as ``-m admit.cli`` does, with the modules named in ``sys.argv[1]``
#: (comma-separated) not importable: an install without the test extra.
WITHOUT_MODULES = ("import sys; sys.modules.update(dict.fromkeys(sys.argv.pop(1).split(','))); "
                   "from admit.cli import main; sys.exit(main(sys.argv[1:]))")


async def start_serve(*args: str, without: tuple[str, ...] = ()) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``admit serve`` (``--shutdown-delay 0`` unless given: the tests stop it at once); ``without``: modules it
    cannot import (:data:`WITHOUT_MODULES`)."""
    port = free_port()
    if "--shutdown-delay" not in args:
        args = (*args, "--shutdown-delay", "0")
    program = ("-c", WITHOUT_MODULES, ",".join(without)) if without else ("-m", "admit.cli")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *program, "serve", "--host", "127.0.0.1", "--port", str(port), *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc, port


async def wait_ready(url: str, ssl_ctx: ssl.SSLContext, proc: asyncio.subprocess.Process, timeout: float = 20.0,
                     server_hostname: str | None = None):
    async with aiohttp.ClientSession() as session:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            if proc.returncode is not None:
                out = (await proc.stdout.read()).decode()
                raise AssertionError(f"admit serve exited {proc.returncode}:\n{out}")
            try:
                async with session.get(url + "/readyz", ssl=ssl_ctx, server_hostname=server_hostname) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("admit serve did not become ready")
            await asyncio.sleep(0.1)


async def start_dev(tmp_path: Path, *extra: str, without: tuple[str, ...] = (), lines: list[str] | None = None
                    ) -> tuple[asyncio.subprocess.Process, int, str, ssl.SSLContext]:
    """``admit serve --dev`` with its certificates in ``tmp_path/certs``, once it is ready: (process, port, the URL of
    the fake Kubernetes API it started, a client TLS context trusting its CA). The caller stops it. ``lines``
    receives the log lines read up to the fake's startup line (they are not in :func:`stop`'s output)."""
    certs = tmp_path / "certs"
    proc, port = await start_serve("--dev", "--tls-cert-file", str(certs / "tls.crt"),
                                   "--tls-key-file", str(certs / "tls.key"), *extra, without=without)
    try:
        line = ""
        while "fake Kubernetes API at" not in line:
            line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert line, "admit serve --dev exited before starting the fake API"
            if lines is not None:
                lines.append(line)
        fake_url = line.split("fake Kubernetes API at ")[1].split()[0]
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        await wait_ready(f"https://127.0.0.1:{port}", ctx, proc)
    except BaseException:
        await stop(proc)
        raise
    return proc, port, fake_url, ctx


async def stop(proc: asyncio.subprocess.Process) -> str:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    return (await proc.stdout.read()).decode()


async def test_serve_in_files_mode_answers_over_https_and_creates_the_pod_group(tmp_path):
    paths = write_development_certificates(tmp_path, service="admit", namespace="default")
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve(
            "--cert-mode", "files", "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]),
            "--api-server", fake.url, "--no-controller",
        )
        url = f"https://127.0.0.1:{port}"
        try:
            await wait_ready(url, ctx, proc)
            dep = example("pause-gang-deployment.yaml")
            async with aiohttp.ClientSession() as session:
                review = admission_review(dep)
                async with session.post(url + "/mutate", json=review, ssl=ctx) as resp:
                    answer = await resp.json()
                assert answer["response"]["uid"] == review["request"]["uid"]
                mutated = apply_answer(dep, answer)
                async with session.post(url + "/validate", json=admission_review(mutated), ssl=ctx) as resp:
                    assert (await resp.json())["response"]["allowed"] is True
            pg = fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "default", "pause")
            assert pg is not None and pg["spec"]["minMember"] == 3
        finally:
            log = await stop(proc)
        assert proc.returncode == 0, log
        assert "admit serving https://127.0.0.1" in log


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_serve_refuses_plain_http_and_old_tls(tmp_path):
    paths = write_development_certificates(tmp_path)
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve(
            "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]),
            "--api-server", fake.url, "--no-controller",
        )
        try:
            ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
            await wait_ready(f"https://127.0.0.1:{port}", ctx, proc)
            old = ssl.create_default_context(cafile=str(paths["ca.crt"]))
            old.maximum_version = ssl.TLSVersion.TLSv1_1
            with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
                async with aiohttp.ClientSession() as session:
                    await session.get(f"https://127.0.0.1:{port}/healthz", ssl=old)
            with pytest.raises(aiohttp.ClientError):
                async with aiohttp.ClientSession() as session:
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                        await resp.read()
        finally:
            await stop(proc)


async def test_serve_in_self_mode_creates_its_secret_and_injects_the_ca_bundle(tmp_path):
    async with FakeKubeAPI() as fake:
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            fake.put({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "admit"},
                "webhooks": [{"name": "gang.admit.dev", "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
                              "clientConfig": {"service": {"name": "admit", "namespace": "admit-system",
                                                           "path": "/mutate"}}}],
            })
        proc, port = await start_serve("--cert-mode", "self", "--namespace", "admit-system", "--api-server", fake.url,
                                       "--no-controller")
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while fake.get("v1", "secrets", "admit-system", "admit-tls") is None:
                assert asyncio.get_running_loop().time() < deadline, "no Secret created"
                assert proc.returncode is None
                await asyncio.sleep(0.1)
            import base64
            ca = base64.b64decode(fake.get("v1", "secrets", "admit-system", "admit-tls")["data"]["ca.crt"])
            ca_file = tmp_path / "ca.crt"
            ca_file.write_bytes(ca)
            ctx = ssl.create_default_context(cafile=str(ca_file))
            # the serving certificate names the Service, as kube-apiserver dials it
            await wait_ready(f"https://127.0.0.1:{port}", ctx, proc, server_hostname="admit.admit-system.svc")
            mwc = fake.get("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", None, "admit")
            assert base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]) == ca
        finally:
            await stop(proc)


async def test_serve_without_a_certificate_exits_1_with_one_clear_line(tmp_path):
    async with FakeKubeAPI() as fake:
        proc, _ = await start_serve("--tls-cert-file", str(tmp_path / "missing.crt"),
                                    "--tls-key-file", str(tmp_path / "missing.key"), "--api-server", fake.url,
                                    "--no-controller")
        await asyncio.wait_for(proc.wait(), 20)
        out = (await proc.stdout.read()).decode()
    assert proc.returncode == 1
    assert "cannot start:" in out and "Traceback" not in out


async def test_on_sigterm_readyz_fails_at_once_and_admissions_are_still_answered_for_the_shutdown_delay(tmp_path):
    paths = write_development_certificates(tmp_path, service="admit", namespace="default")
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve(
            "--cert-mode", "files", "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]),
            "--api-server", fake.url, "--no-controller", "--shutdown-delay", "1.5",
        )
        url = f"https://127.0.0.1:{port}"
        try:
            await wait_ready(url, ctx, proc)
            loop = asyncio.get_running_loop()
            proc.send_signal(signal.SIGTERM)
            signalled = loop.time()
            async with aiohttp.ClientSession() as session:
                while True:  # /readyz turns 503 at once
                    async with session.get(url + "/readyz", ssl=ctx) as resp:
                        if resp.status == 503:
                            assert "shutting down" in await resp.text()
                            break
                    assert loop.time() - signalled < 0.5
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.5)  # endpoints still route here for a moment: answered
                review = admission_review(example("pause-gang-deployment.yaml"))
                async with session.post(url + "/mutate", json=review, ssl=ctx) as resp:
                    assert resp.status == 200
                    assert (await resp.json())["response"]["uid"] == review["request"]["uid"]
            await asyncio.wait_for(proc.wait(), 10)
            assert 1.4 <= loop.time() - signalled < 5
        finally:
            out = await stop(proc)
        assert proc.returncode == 0, out


def lease_holder(fake: FakeKubeAPI) -> str | None:
    lease = fake.get("coordination.k8s.io/v1", "leases", "admit-system", "admit-controller")
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


async def test_serve_with_the_controller_takes_the_lease_and_gives_it_back_on_sigterm(tmp_path):
    paths = write_development_certificates(tmp_path)
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve("--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file",
                                       str(paths["tls.key"]), "--api-server", fake.url, "--namespace", "admit-system")
        try:
            await wait_ready(f"https://127.0.0.1:{port}", ctx, proc)
            deadline = asyncio.get_running_loop().time() + 10
            while not lease_holder(fake):
                assert asyncio.get_running_loop().time() < deadline, "no Lease taken"
                await asyncio.sleep(0.05)
        finally:
            log = await stop(proc)
        assert proc.returncode == 0, log
        assert not lease_holder(fake), "the Lease is released on SIGTERM"


async def test_a_port_in_use_exits_1_after_stopping_the_started_controller_cleanly(tmp_path):
    paths = write_development_certificates(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        async with FakeKubeAPI() as fake:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]),
                "--api-server", fake.url, "--namespace", "admit-system",
                cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            await asyncio.wait_for(proc.wait(), 30)
            out = (await proc.stdout.read()).decode()
            assert proc.returncode == 1, out
            assert "cannot start:" in out and "Traceback" not in out
            assert "Unclosed" not in out  # controller, its ApiClient and watches were closed
            assert not lease_holder(fake)


async def test_serve_without_any_kubernetes_configuration_says_how_to_give_one(tmp_path):
    paths = write_development_certificates(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config there
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(free_port()),
        "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]), "--no-controller",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )
    await asyncio.wait_for(proc.wait(), 20)
    out = (await proc.stdout.read()).decode()
    assert proc.returncode == 1
    assert "does not exist" in out and "--api-server" in out and "Traceback" not in out


async def test_serve_dev_runs_against_the_in_repo_fake_api_without_a_cluster(tmp_path):
    proc, port, fake_url, ctx = await start_dev(tmp_path)
    try:
        dep = example("pause-gang-deployment.yaml")
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://127.0.0.1:{port}/mutate", json=admission_review(dep), ssl=ctx) as r:
                mutated = apply_answer(dep, await r.json())
            async with session.post(f"https://127.0.0.1:{port}/validate", json=admission_review(mutated),
                                    ssl=ctx) as r:
                assert (await r.json())["response"]["allowed"] is True
            async with session.get(f"{fake_url}/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/pause"
                                   ) as r:
                assert r.status == 200 and (await r.json())["spec"]["minMember"] == 3
    finally:
        log = await stop(proc)
    assert proc.returncode == 0, log


async def test_serve_dev_keeps_only_the_counts_of_the_requests_it_receives_not_each_request_and_its_body(
        tmp_path, monkeypatch):
    # admit serve --dev runs until Ctrl-C: a request log (every request, with its body) would grow for as long as it
    # runs. Here admit serve's place is taken by a client that reads the fake, as admit's caches list and watch it.
    import argparse

    import admit.cli.serve
    import admit.testing.fake_kube
    from admit.cli.dev import serve_dev
    from admit.config import Config

    made: list[FakeKubeAPI] = []

    class Kept(FakeKubeAPI):
        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            made.append(self)

    async def a_client_of_the_fake(args: argparse.Namespace, config: Config) -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.get(f"{args.api_server}/apis/apps/v1/namespaces/default/deployments") as r:
                    assert r.status == 200

    monkeypatch.setattr(admit.testing.fake_kube, "FakeKubeAPI", Kept)
    monkeypatch.setattr(admit.cli.serve, "serve", a_client_of_the_fake)
    certs = tmp_path / "certs"
    await serve_dev(argparse.Namespace(tls_cert_file=str(certs / "tls.crt"), tls_key_file=str(certs / "tls.key"),
                                       host="127.0.0.1", port=free_port()), Config())
    [fake] = made
    assert fake.stats()["counts"] == {"GET deployments": 3}  # what /_fake/stats answers stays
    assert fake.requests == []


async def test_the_readme_dev_walkthrough_answers_as_written_for_a_reader_who_pauses(tmp_path):
    # README "Try it without a cluster": source certs/dev.env; the fake holds the example Deployments pause, web and
    # batch-workers (stored as kube-apiserver stores them after admission), so their PodGroups are claimed and stay;
    # admit status lists the three gangs waiting (no pods in the fake); /validate allows pause's CREATE; the scale of
    # web to 2 is refused; the Pod review's patch decodes to the schedulerName; kubectl's scale of web to 2 and create
    # of the denied Deployment through the fake are refused with admit's messages (kubectl is not installed here: its
    # requests, sent as it sends them).
    proc, port, fake_url, ctx = await start_dev(tmp_path)
    try:
        assert (tmp_path / "certs" / "dev.env").read_text() == (f"export ADMIT_FAKE_API={fake_url}\n"
                                                                f"export ADMIT_URL=https://127.0.0.1:{port}\n")
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            for name in ("pause", "web", "batch-workers"):
                async with session.get(f"{fake_url}/apis/apps/v1/namespaces/default/deployments/{name}") as r:
                    stored = await r.json()
                    assert r.status == 200 and stored["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
            groups: dict[str, Any] = {}
            while set(groups) != {"pause", "web", "batch-workers"}:  # the controller makes them as it starts leading
                async with session.get(f"{fake_url}/apis/scheduling.x-k8s.io/v1alpha1/podgroups") as r:
                    groups = {g["metadata"]["name"]: g for g in (await r.json())["items"]}
                await asyncio.sleep(0.05)
            assert groups["pause"]["spec"] == {"minMember": 3, "minResources": {"cpu": "300m", "memory": "192Mi"},
                                               "scheduleTimeoutSeconds": 10}
            assert groups["web"]["spec"]["minMember"] == 6
            assert groups["batch-workers"]["spec"]["minMember"] == 3  # at 0 replicas, the PodGroup keeps its minMember
            assert list(groups) == ["batch-workers", "pause", "web"]  # the order the README's curl prints them in
            # `admit status --api-server $ADMIT_FAKE_API -A`: no pods in the fake, so pause and web wait for theirs
            status_run = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "admit.cli", "status", "--api-server", fake_url, "-A", cwd=ROOT,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            table, _ = await asyncio.wait_for(status_run.communicate(), 60)
            rows = {line.split()[1]: line for line in table.decode().splitlines()[1:]}
            assert status_run.returncode == 0 and list(rows) == ["batch-workers", "pause", "web"], table
            assert "ScaledToZero" in rows["batch-workers"] and all("NotEnoughPods" in rows[g] for g in ("pause", "web")), table
            body = (EXAMPLES / "admission-review-deployment-validate.json").read_bytes()
            async with session.post(f"https://127.0.0.1:{port}/validate", data=body, headers=headers, ssl=ctx) as r:
                answer = (await r.json())["response"]
                assert answer["allowed"] is True and answer["uid"] == json.loads(body)["request"]["uid"]
            body = (EXAMPLES / "denied" / "admission-review-scale-below-min-member.json").read_bytes()
            async with session.post(f"https://127.0.0.1:{port}/validate", data=body, headers=headers, ssl=ctx) as r:
                answer = (await r.json())["response"]
                assert answer["allowed"] is False and "below its gang minMember 6" in answer["status"]["message"]
            body = (EXAMPLES / "admission-review-pod-from-replicaset.json").read_bytes()
            async with session.post(f"https://127.0.0.1:{port}/mutate", data=body, headers=headers, ssl=ctx) as r:
                patch = json.loads(base64.b64decode((await r.json())["response"]["patch"]))
            assert patch == [{"op": "replace", "path": "/spec/schedulerName", "value": "scheduler-plugins-scheduler"}]
            # `kubectl --server $ADMIT_FAKE_API scale deploy web --replicas=2`: kubectl's merge PATCH of the scale
            # subresource (kubectl/pkg/scale ScaleSimple), refused by the chart's scale webhook with admit's message
            web = f"{fake_url}/apis/apps/v1/namespaces/default/deployments/web"
            async with session.patch(f"{web}/scale", data=json.dumps({"spec": {"replicas": 2}}),
                                     headers={"Content-Type": "application/merge-patch+json"}) as r:
                status = await r.json()
            assert r.status == 403 and status["reason"] == "Forbidden", status
            assert status["message"].startswith('admission webhook "scale.validate.admit.dev" denied the request: '
                                                "Scale to at least 6 (or to 0 to pause it), or lower "
                                                "gang.admit.dev/min-member first: scaling Deployment default/web to 2 "
                                                "replicas goes below its gang minMember 6"), status
            async with session.get(web) as r:
                assert (await r.json())["spec"]["replicas"] == 8  # not scaled
            # `kubectl --server $ADMIT_FAKE_API create --validate=false -f examples/denied/deployment-below-min-member.yaml`
            denied = example("denied/deployment-below-min-member.yaml")
            async with session.post(f"{fake_url}/apis/apps/v1/namespaces/default/deployments", json=denied) as r:
                status = await r.json()
            assert r.status == 403, status
            assert status["message"].startswith('admission webhook "workloads.validate.admit.dev" denied the request: '
                                                "Set spec.replicas to at least 3, or lower gang.admit.dev/min-member: "
                                                "Deployment default/pause-too-small runs 2 pods (spec.replicas=2) but "
                                                "its gang needs minMember 3"), status
    finally:
        log = await stop(proc)
    assert proc.returncode == 0, log


async def test_serve_dev_refuses_every_example_under_examples_denied_as_a_cluster_holding_its_workloads_does(tmp_path):
    # each document as kube-apiserver sends it: a manifest as its CREATE, /mutate then /validate of the mutated
    # object; an AdmissionReview file as written. Before, the scale of batch-workers from zero was allowed: the dev
    # fake did not hold the Deployment the example scales.
    import yaml

    files = sorted(p for p in (EXAMPLES / "denied").iterdir() if p.suffix in (".yaml", ".yml", ".json"))
    assert any(p.name == "admission-review-scale-from-zero.json" for p in files)
    proc, port, _, ctx = await start_dev(tmp_path)
    answers: dict[str, list[Any]] = {}
    try:
        async with aiohttp.ClientSession() as session:
            async def post(endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
                async with session.post(f"https://127.0.0.1:{port}{endpoint}", json=review, ssl=ctx) as r:
                    assert r.status == 200, await r.text()
                    response = (await r.json())["response"]
                assert response["uid"] == review["request"]["uid"]
                return response

            for path in files:
                docs = [json.loads(path.read_text())] if path.suffix == ".json" else [
                    d for d in yaml.safe_load_all(path.read_text()) if d]
                for doc in docs:
                    review = doc if doc.get("kind") == "AdmissionReview" else admission_review(doc)
                    mutated = await post("/mutate", review)
                    assert mutated["allowed"] is True  # the mutating webhook never refuses
                    checked = json.loads(json.dumps(review))
                    checked["request"]["object"] = apply_answer(review["request"]["object"], {"response": mutated})
                    answers.setdefault(path.name, []).append(await post("/validate", checked))
    finally:
        log = await stop(proc)
    assert proc.returncode == 0, log
    allowed = {name: [a for a in got if a["allowed"]] for name, got in answers.items()}
    assert not any(allowed.values()), {name: got for name, got in allowed.items() if got}
    (scale,) = answers["admission-review-scale-from-zero.json"]
    assert "Deployment default/batch-workers to 2 replicas" in scale["status"]["message"]
    assert "minMember 3" in scale["status"]["message"]


async def test_a_second_dev_server_on_a_taken_port_names_a_free_port_and_leaves_the_first_ones_dev_env_and_pair(
        tmp_path):
    # Before, the second one wrote a new serving pair before it found the port taken, and the first one hot-reloaded
    # it: nothing may be written until the port is known to be free.
    proc, port, fake_url, _ = await start_dev(tmp_path)
    env_file = tmp_path / "certs" / "dev.env"
    try:
        before = env_file.read_text()
        certs = tmp_path / "certs"
        pair = {name: (certs / name).read_bytes() for name in ("tls.crt", "tls.key", "ca.crt", "ca.key")}
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "serve", "--dev", "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key"),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        await asyncio.wait_for(second.wait(), 30)
        out = (await second.stdout.read()).decode()
        assert second.returncode == 1 and "Traceback" not in out, out
        assert f"127.0.0.1:{port} is taken" in out and "pass --port " in out
        suggested = int(out.split("pass --port ")[1].split(",")[0])
        assert suggested != port
        assert env_file.read_text() == before and fake_url in before  # the running server's walk-through still works
        assert {name: (certs / name).read_bytes() for name in pair} == pair
    finally:
        await stop(proc)


@pytest.mark.parametrize("without", [(), ("celpy",)], ids=["with-cel", "without-cel-python"])
async def test_kubectl_writes_to_the_dev_fake_api_go_through_admits_webhooks_as_in_a_cluster_with_admit_installed(
        tmp_path, without):
    # Before, a Deployment POSTed to $ADMIT_FAKE_API was stored unmutated and never checked. Now the fake's admission
    # chain holds the chart's webhooks, called at the dev server: a gang Deployment is mutated and gets its PodGroup
    # at once, one below minMember is refused, a plain one is stored as sent. Without cel-python (a plain
    # `pip install .`) the chart's matchConditions are left out and admit answers what they would have skipped.
    startup: list[str] = []
    proc, port, fake_url, _ = await start_dev(tmp_path, without=without, lines=startup)
    deployments = f"{fake_url}/apis/apps/v1/namespaces/default/deployments"
    try:
        gang = example("deployment-replicaset.yaml")  # Deployment api, min-member 4, 4 replicas
        plain = example("deployment-replicaset.yaml")
        plain["metadata"] = {"name": "plain", "namespace": "default", "labels": {"app": "plain"}}
        plain["spec"]["selector"] = {"matchLabels": {"app": "plain"}}
        plain["spec"]["template"]["metadata"] = {"labels": {"app": "plain"}}
        small = example("deployment-replicaset.yaml")
        small["metadata"]["name"], small["spec"]["replicas"] = "api-small", 2
        async with aiohttp.ClientSession() as session:
            async with session.post(deployments, json=gang) as r:
                stored = await r.json()
                assert r.status == 201, stored
            assert stored["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
            assert stored["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
            async with session.get(f"{fake_url}/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/api"
                                   ) as r:
                assert r.status == 200 and (await r.json())["spec"]["minMember"] == 4  # made by /validate
            async with session.post(deployments, json=plain) as r:
                stored = await r.json()
                assert r.status == 201, stored
            assert stored["metadata"]["labels"] == {"app": "plain"}
            assert stored["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"  # the decoding default
            async with session.post(deployments, json=small) as r:
                status = await r.json()
            assert r.status == 403 and "runs 2 pods (spec.replicas=2) but its gang needs minMember 4" in \
                status["message"], status
            async with session.get(f"{deployments}/api-small") as r:
                assert r.status == 404
    finally:
        log = await stop(proc)
    assert proc.returncode == 0, log
    assert f"its writes go through admit's 5 webhooks of deploy/admit.yaml at https://127.0.0.1:{port}" in startup[-1]
    assert ("without their CEL matchConditions" in startup[-1]) == bool(without)
    assert "(sets ADMIT_FAKE_API and ADMIT_URL)" in startup[-1]


async def test_a_webhook_slower_than_the_charts_timeout_fails_the_dev_fakes_write_under_fail_and_not_under_ignore(
        tmp_path):
    # The dev chain waits for admit as long as the webhooks' timeoutSeconds (the chart's 5 s): a slower answer is
    # "failed calling webhook" (500) under failurePolicy Fail and skipped under Ignore, as kube-apiserver does.
    from aiohttp import web

    from admit.cli.dev import dev_admission_chain

    paths = write_development_certificates(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(paths["tls.crt"], paths["tls.key"])

    async def slow(request: web.Request) -> web.Response:
        review = await request.json()
        await asyncio.sleep(3)
        return web.json_response({**review, "response": {"uid": review["request"]["uid"], "allowed": True}})

    app = web.Application()
    app.router.add_post("/validate", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_ctx).start()
    hook = {"name": "workloads.validate.admit.dev", "clientConfig": {"service": {"path": "/validate"}},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
                       "operations": ["CREATE"], "scope": "Namespaced"}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 1}
    try:
        for policy, expected in (("Fail", 500), ("Ignore", 201)):
            configuration = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                             "metadata": {"name": "admit"}, "webhooks": [{**hook, "failurePolicy": policy}]}
            chain, _ = dev_admission_chain(f"https://127.0.0.1:{port}", paths["ca.crt"], [configuration])
            async with FakeKubeAPI(admission=chain) as fake, aiohttp.ClientSession() as session:
                started = asyncio.get_running_loop().time()
                async with session.post(f"{fake.url}/apis/apps/v1/namespaces/default/deployments",
                                        json=example("pause-gang-deployment.yaml")) as r:
                    answer = await r.json()
                assert r.status == expected, answer
                assert asyncio.get_running_loop().time() - started < 2.5  # the 1 s timeout, not the 3 s answer
                if policy == "Fail":
                    assert 'failed calling webhook "workloads.validate.admit.dev"' in answer["message"]
    finally:
        await runner.cleanup()


def test_dev_mode_reads_the_charts_webhooks_from_the_plain_manifest_and_runs_without_them_when_it_is_absent(
        tmp_path, monkeypatch):
    from admit.cli.dev import dev_admission_chain, webhook_configurations

    monkeypatch.chdir(ROOT)
    configurations, path = webhook_configurations()
    assert path == Path("deploy/admit.yaml")
    policies = {hook["name"]: hook["failurePolicy"] for conf in configurations for hook in conf["webhooks"]}
    assert policies == {"workloads.mutate.admit.dev": "Fail", "pods.mutate.admit.dev": "Ignore",
                        "workloads.validate.admit.dev": "Fail", "scale.validate.admit.dev": "Ignore",
                        "pods.validate.admit.dev": "Ignore"}
    assert webhook_configurations((tmp_path / "deploy" / "admit.yaml",)) == ([], None)
    ca = write_development_certificates(tmp_path / "certs")["ca.crt"]
    chain, note = dev_admission_chain("https://127.0.0.1:8443", ca, search=(tmp_path / "deploy" / "admit.yaml",))
    assert chain is None and "skip admit's webhooks" in note
    chain, note = dev_admission_chain("https://127.0.0.1:8443", ca, cel=False)
    assert [h.name for h in chain.mutating] == ["workloads.mutate.admit.dev", "pods.mutate.admit.dev"]
    assert not any(h.spec.get("matchConditions") for h in (*chain.mutating, *chain.validating))
    assert any(hook.get("matchConditions") for conf in configurations for hook in conf["webhooks"])  # not changed


async def test_plain_serve_without_certificates_names_admit_certs_and_dev_mode(tmp_path):
    # Before: "no usable TLS pair in certs/tls.crt / certs/tls.key: cannot read ..." and nothing about what writes one.
    async with FakeKubeAPI() as fake:
        proc, _ = await start_serve("--cert-mode", "files", "--tls-cert-file", str(tmp_path / "tls.crt"),
                                    "--tls-key-file", str(tmp_path / "tls.key"), "--api-server", fake.url,
                                    "--no-controller")
        await asyncio.wait_for(proc.wait(), 30)
        out = (await proc.stdout.read()).decode()
    assert proc.returncode == 1 and "Traceback" not in out, out
    assert "no usable TLS pair" in out and f"`admit certs --dir {tmp_path}` writes a development pair there" in out
    assert "`admit serve --dev`" in out


async def test_ctrl_c_stops_dev_mode_without_the_shutdown_delay(tmp_path):
    proc, _, _, _ = await start_dev(tmp_path, "--shutdown-delay", "5")  # the default outside dev mode
    proc.send_signal(signal.SIGINT)
    await asyncio.wait_for(proc.wait(), 10)
    log = (await proc.stdout.read()).decode()
    assert proc.returncode == 0, log
    assert "shutting down" in log and "more while endpoints stop routing here" not in log


def test_dev_mode_finds_the_walkthrough_files_in_the_folder_it_runs_in_before_the_source_tree(tmp_path, monkeypatch):
    """A plain ``pip install .`` leaves no examples/ beside the package: the walk-through runs from the repository
    root (its curl commands read examples/ there), so that folder is looked in first."""
    from admit.cli.dev import EXAMPLES_SEARCH, WALKTHROUGH, walkthrough_folder

    monkeypatch.chdir(tmp_path)
    installed = (tmp_path / "site-packages" / "examples",)  # where an installed admit would look: nothing there
    assert walkthrough_folder((EXAMPLES_SEARCH[0], *installed)) is None
    (tmp_path / "examples").mkdir()
    for name in WALKTHROUGH:
        (tmp_path / "examples" / name).write_text((EXAMPLES / name).read_text())
    assert walkthrough_folder((EXAMPLES_SEARCH[0], *installed)) == Path("examples")
    monkeypatch.chdir(ROOT)
    assert walkthrough_folder() == Path("examples")


async def test_the_walkthrough_deployments_are_stored_from_the_examples_folder_found(tmp_path):
    from admit.config import Config
    from admit.cli.dev import store_walkthrough_workloads

    async with FakeKubeAPI() as fake:
        assert store_walkthrough_workloads(fake, Config(), ROOT / "examples") == [
            "Deployment default/pause", "Deployment default/web", "Deployment default/batch-workers",
            "ClusterTrainingRuntime torch-distributed"]


@pytest.mark.parametrize("served_group", [None, "scheduling.sigs.k8s.io"], ids=["no-crd", "old-group-only"])
async def test_without_the_pod_group_crd_serve_says_so_at_start_and_refuses_every_gang_naming_the_crd_and_the_fix(
        tmp_path, served_group):
    # The first install: scheduler-plugins' CRD not installed (or an older scheduler-plugins serving only
    # scheduling.sigs.k8s.io). Before, every gang got 503 "... 404 NotFound: the server could not find the
    # requested resource ... Retry in a moment", which named neither the CRD nor the fix, and retrying never helps.
    paths = write_development_certificates(tmp_path, service="admit", namespace="default")
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    async with FakeKubeAPI() as fake:
        fake.unregister("scheduling.x-k8s.io/v1alpha1", "podgroups")
        if served_group:
            fake.register(served_group, "v1alpha1", "PodGroup", "podgroups")
        proc, port = await start_serve(
            "--cert-mode", "files", "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]),
            "--api-server", fake.url, "--no-controller",
        )
        url = f"https://127.0.0.1:{port}"
        try:
            await wait_ready(url, ctx, proc)
            dep = example("pause-gang-deployment.yaml")
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/mutate", json=admission_review(dep), ssl=ctx) as resp:
                    mutated = apply_answer(dep, await resp.json())
                async with session.post(url + "/validate", json=admission_review(mutated), ssl=ctx) as resp:
                    answer = (await resp.json())["response"]
        finally:
            log = await stop(proc)
    assert answer["allowed"] is False and answer["status"]["code"] == 503
    message = answer["status"]["message"]
    assert "the PodGroup CRD podgroups.scheduling.x-k8s.io (scheduling.x-k8s.io/v1alpha1) is not installed" in message
    assert "retry" not in message.lower()
    start_line = next(line for line in log.splitlines() if "coscheduling backend: the PodGroup CRD" in line)
    if served_group:
        assert "but it serves PodGroups in scheduling.sigs.k8s.io" in message
        assert "--pod-group-api scheduling.sigs.k8s.io (chart: config.podGroupAPI=scheduling.sigs.k8s.io" in message
    else:
        assert "podGroupCRD.install=true" in message and "scheduler-plugins' chart installs it" in message
    assert "every gang it handles is refused" in start_line


async def test_serve_follows_an_upgrade_of_the_workload_api_version_in_admission_and_in_its_controller(tmp_path):
    # 1.36 -> 1.37 under a running admit: v1alpha2 is gone, v1beta1 served. The first write's 404 makes admit
    # discover again; admission writes v1beta1 and the controller watches (and adopts) v1beta1 objects.
    paths = write_development_certificates(tmp_path)
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    async with FakeKubeAPI(workload_api="v1alpha2") as fake:
        proc, port = await start_serve("--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file",
                                       str(paths["tls.key"]), "--api-server", fake.url, "--namespace", "admit-system",
                                       "--gang-backend", "workload-api", "--orphan-grace-period", "60")
        url = f"https://127.0.0.1:{port}"
        try:
            await wait_ready(url, ctx, proc)
            fake.stop_serving_workload_api("v1alpha2")
            fake.serve_workload_api("v1beta1")
            dep = example("pause-gang-deployment.yaml")
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/mutate", json=admission_review(dep), ssl=ctx) as resp:
                    mutated = apply_answer(dep, await resp.json())
                async with session.post(url + "/validate", json=admission_review(mutated), ssl=ctx) as resp:
                    answer = (await resp.json())["response"]
            assert answer["allowed"] is True, answer
            stored = fake.put({**mutated, "metadata": {**mutated["metadata"], "uid": "dep-uid-1"}})
            deadline = asyncio.get_running_loop().time() + 15
            while not (fake.get("scheduling.k8s.io/v1beta1", "podgroups", "default", "pause") or {}).get(
                    "metadata", {}).get("ownerReferences"):
                assert asyncio.get_running_loop().time() < deadline, "the v1beta1 PodGroup was never adopted"
                await asyncio.sleep(0.1)
        finally:
            log = await stop(proc)
    owner = fake.get("scheduling.k8s.io/v1beta1", "podgroups", "default", "pause")["metadata"]["ownerReferences"][0]
    assert owner["uid"] == stored["metadata"]["uid"]
    assert "no longer serves scheduling.k8s.io/v1alpha2 (upgraded?); it speaks v1beta1 now" in log
    assert "workload-api gang controller started (scheduling.k8s.io/v1beta1" in log
