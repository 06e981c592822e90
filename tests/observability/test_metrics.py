"""Prometheus metrics: requests driven through the webhook and the Kubernetes client, counters read back from the
registry and from ``GET /metrics`` of a real ``admit serve`` process; JSON logs."""

import asyncio
import copy
import io
import json
import logging
import ssl

import aiohttp
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from admit.observability import metrics
from admit.webhook.admission import Admission
from admit.tls.certs import write_development_certificates
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.observability.logs import configure_logging
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import admission_review, apply_answer, controller_pod, example
from tests.cli.test_serve_e2e import free_port, start_serve, stop, wait_ready


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Differences of samples between now and later (the registry is process-wide, other tests also count)."""

    def __init__(self, *samples: tuple[str, dict[str, str]]) -> None:
        self.samples = samples
        self.before = [value(n, **labels) for n, labels in samples]

    def __call__(self) -> list[float]:
        return [value(n, **labels) - b for (n, labels), b in zip(self.samples, self.before)]


@pytest.fixture
async def webhook(aiohttp_client, fake):
    api_client = fake.api_client()
    assert metrics.instrument_api_client(api_client)
    client = await aiohttp_client(create_app(Admission(Config(), KubeAPI(api_client))))
    yield client
    await api_client.close()


async def post(client, path, review, status=200):
    resp = await client.post(path, json=review)
    assert resp.status == status, await resp.text()
    return await resp.json() if status == 200 else await resp.text()


async def test_webhook_requests_are_counted_by_path_code_and_outcome_with_controller_runtime_names(webhook):
    dep = example("pause-gang-deployment.yaml")
    delta = Delta(
        ("controller_runtime_webhook_requests_total", {"webhook": "/mutate", "code": "200"}),
        ("controller_runtime_webhook_latency_seconds_count", {"webhook": "/mutate", "code": "200"}),
        ("admit_admission_requests_total", {"webhook": "/mutate", "kind": "Deployment", "operation": "CREATE",
                                            "outcome": "patched"}),
        ("admit_admission_requests_total", {"webhook": "/validate", "kind": "Deployment", "operation": "CREATE",
                                            "outcome": "allowed"}),
        ("admit_admission_requests_total", {"webhook": "/validate", "kind": "Deployment", "operation": "CREATE",
                                            "outcome": "denied"}),
        ("controller_runtime_webhook_requests_total", {"webhook": "/validate", "code": "400"}),
        ("admit_admission_requests_total", {"webhook": "/validate", "kind": "other", "operation": "other",
                                            "outcome": "bad_request"}),
        ("admit_podgroup_operations_total", {"operation": "created"}),
    )
    answer = await post(webhook, "/mutate", admission_review(dep))
    mutated = apply_answer(dep, answer)
    await post(webhook, "/validate", admission_review(mutated))
    too_small = copy.deepcopy(mutated)
    too_small["metadata"]["name"] = "pause-small"
    too_small["spec"]["replicas"] = 1
    answer = await post(webhook, "/validate", admission_review(too_small))
    assert answer["response"]["allowed"] is False
    await post(webhook, "/validate", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, status=400)
    assert delta() == [1, 1, 1, 1, 1, 1, 1, 1]
    assert value("controller_runtime_webhook_requests_in_flight", webhook="/mutate") == 0
    assert value("controller_runtime_webhook_requests_in_flight", webhook="/validate") == 0


async def test_the_latency_histogram_has_client_golangs_default_buckets():
    families = {f.name: f for f in REGISTRY.collect()}
    buckets = sorted({float(s.labels["le"]) for s in families["controller_runtime_webhook_latency_seconds"].samples
                      if s.name.endswith("_bucket")})
    assert buckets == [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf")]


async def test_kinds_admit_does_not_handle_count_as_other_so_labels_stay_bounded(webhook):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings-8d1f0a", "namespace": "team-a"},
          "data": {"k": "v"}}
    delta = Delta(("admit_admission_requests_total", {"webhook": "/mutate", "kind": "other", "operation": "CREATE",
                                                      "outcome": "allowed"}))
    await post(webhook, "/mutate", admission_review(cm))
    assert delta() == [1]
    for family in REGISTRY.collect():
        for sample in family.samples:
            assert not {"settings-8d1f0a", "team-a"} & set(sample.labels.values()), sample


async def test_kubernetes_api_calls_are_counted_by_verb_resource_and_code(webhook, fake):
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["name"] = "api-counted"
    mutated = apply_answer(dep, await post(webhook, "/mutate", admission_review(dep)))
    delta = Delta(
        ("admit_kube_api_requests_total", {"verb": "create", "resource": "podgroups", "code": "201"}),
        ("admit_kube_api_requests_total", {"verb": "create", "resource": "podgroups", "code": "409"}),
        ("admit_kube_api_requests_total", {"verb": "get", "resource": "podgroups", "code": "200"}),
        ("admit_kube_api_request_duration_seconds_count", {"verb": "create", "resource": "podgroups"}),
    )
    await post(webhook, "/validate", admission_review(mutated))
    await post(webhook, "/validate", admission_review(mutated, "UPDATE", old=mutated))  # 409, then read it
    assert delta() == [1, 1, 1, 2]


async def test_the_failure_mode_applied_is_counted_with_the_api_error_code(webhook, fake):
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["name"] = "api-down"
    mutated = apply_answer(dep, await post(webhook, "/mutate", admission_review(dep)))
    fake.fail("POST", "podgroups", status=503, times=1)
    delta = Delta(
        ("admit_failure_mode_applied_total", {"mode": "deny"}),
        ("admit_kube_api_requests_total", {"verb": "create", "resource": "podgroups", "code": "503"}),
        ("admit_admission_requests_total", {"webhook": "/validate", "kind": "Deployment", "operation": "CREATE",
                                            "outcome": "denied"}),
    )
    answer = await post(webhook, "/validate", admission_review(mutated))
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 503
    assert delta() == [1, 1, 1]


async def test_an_api_call_cut_by_the_admission_budget_counts_as_a_timeout(aiohttp_client, fake):
    cfg = Config(api_timeout_seconds=0.2, failure_mode="allow")
    api_client = fake.api_client()
    metrics.instrument_api_client(api_client)
    client = await aiohttp_client(create_app(Admission(cfg, KubeAPI(api_client))))
    try:
        dep = example("pause-gang-deployment.yaml")
        dep["metadata"]["name"] = "api-slow"
        mutated = apply_answer(dep, await post(client, "/mutate", admission_review(dep)))
        fake.delay("POST", "podgroups", 1.0, times=1)
        delta = Delta(("admit_kube_api_requests_total", {"verb": "create", "resource": "podgroups", "code": "timeout"}),
                      ("admit_failure_mode_applied_total", {"mode": "allow"}))
        answer = await post(client, "/validate", admission_review(mutated))
        assert answer["response"]["allowed"] is True and answer["response"]["warnings"]
        assert delta() == [1, 1]
    finally:
        await api_client.close()


@pytest.mark.parametrize("method, path, query, expected", [
    ("GET", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team/podgroups/train", "", ("get", "podgroups")),
    ("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", "labelSelector=a", ("list", "podgroups")),
    ("GET", "/api/v1/pods", "watch=true&timeoutSeconds=300", ("watch", "pods")),
    ("POST", "/api/v1/namespaces/team/pods", "", ("create", "pods")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/admit/leases/admit-controller", "", ("update", "leases")),
    ("PATCH", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/admit", "",
     ("patch", "mutatingwebhookconfigurations")),
    ("GET", "/apis/apps/v1/namespaces/team/deployments/web/scale", "", ("get", "deployments/scale")),
    ("DELETE", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team/podgroups/old", "", ("delete", "podgroups")),
    ("GET", "/version", "", ("get", "other")),
])
def test_api_requests_are_named_by_the_verb_and_resource_kube_apiserver_uses(method, path, query, expected):
    assert metrics.api_verb(method, path, query) == expected


def test_pod_group_operations_and_watch_caches_are_counted():
    delta = Delta(("admit_podgroup_operations_total", {"operation": "adopted"}),
                  ("admit_watch_cache_relists_total", {"resource": "podgroups.scheduling.x-k8s.io/v1alpha1"}))
    metrics.pod_group("adopted")
    metrics.pod_group("not-an-operation")  # ignored: the label stays bounded
    metrics.watch_cache("podgroups.scheduling.x-k8s.io/v1alpha1", 7, relisted=True)
    assert delta() == [1, 1]
    assert value("admit_watch_cache_objects", resource="podgroups.scheduling.x-k8s.io/v1alpha1") == 7
    assert value("admit_podgroup_operations_total", operation="not-an-operation") == 0


def test_a_changed_certificate_expiry_counts_as_a_rotation():
    metrics.certificate("ca", 2_000_000_000.0)  # a rotation if an earlier test served another CA: counted before
    delta = Delta(("admit_certificate_rotations_total", {"certificate": "ca"}))
    metrics.certificate("ca", 2_000_000_000.0)  # the same certificate checked again
    metrics.certificate("ca", 2_100_000_000.0)
    assert delta() == [1]
    assert value("admit_certificate_expiry_timestamp_seconds", certificate="ca") == 2_100_000_000.0


def test_json_logs_are_one_object_per_line_with_the_request_fields():
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("info", "json", stream)
        logging.getLogger("admit.requests").info(
            "denied CREATE Deployment team/web uid=1f0e: replicas 2 < minMember 3",
            extra={"uid": "1f0e", "kind": "Deployment", "operation": "CREATE", "namespace": "team",
                   "object": "team/web", "decision": "denied", "duration_ms": 0.412})
        logging.getLogger("admit.serve").info("shutting down")
    finally:
        root.handlers[:], root.level = saved
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["logger"] == "admit.requests" and first["level"] == "INFO"
    assert {k: first[k] for k in ("uid", "kind", "namespace", "object", "decision", "duration_ms")} == {
        "uid": "1f0e", "kind": "Deployment", "namespace": "team", "object": "team/web", "decision": "denied",
        "duration_ms": 0.412}
    assert first["time"].endswith("Z") and second["message"] == "shutting down"


async def test_serve_exposes_metrics_on_a_plain_http_port_and_logs_json(tmp_path):
    paths = write_development_certificates(tmp_path)
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    metrics_port = free_port()
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve(
            "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]), "--api-server",
            fake.url, "--namespace", "admit-system", "--metrics-port", str(metrics_port), "--metrics-host",
            "127.0.0.1", "--log-format", "json", "--lease-name", "admit-metrics-test",
        )
        url = f"https://127.0.0.1:{port}"
        try:
            await wait_ready(url, ctx, proc)
            dep = example("pause-gang-deployment.yaml")
            dep["spec"]["replicas"] = 1
            async with aiohttp.ClientSession() as session:
                gang = example("pause-gang-deployment.yaml")
                async with session.post(url + "/mutate", json=admission_review(gang), ssl=ctx) as resp:
                    pod = controller_pod(apply_answer(gang, await resp.json()))
                pod["spec"]["schedulerName"] = "default-scheduler"  # labelled by hand: admit sets the scheduler
                await session.post(url + "/mutate", json=admission_review(pod, namespace="default"), ssl=ctx)
                denied = admission_review(dep)
                async with session.post(url + "/validate", json=denied, ssl=ctx) as resp:
                    assert (await resp.json())["response"]["allowed"] is False
                async with session.get(url + "/metrics", ssl=ctx) as resp:
                    assert resp.status == 404  # never on the webhook's TLS port
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                        assert resp.status == 200
                        assert resp.headers["Content-Type"].startswith("text/plain; version=")
                        text = await resp.text()
                    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                               for f in text_string_to_metric_families(text) for s in f.samples}
                    if samples.get(("admit_leader", ())) == 1.0:
                        break
                    assert asyncio.get_running_loop().time() < deadline, "the replica never reported leading"
                    await asyncio.sleep(0.1)
        finally:
            out = await stop(proc)
        assert proc.returncode == 0, out
    assert samples[("controller_runtime_webhook_requests_total", (("code", "200"), ("webhook", "/mutate")))] == 2
    assert samples[("admit_admission_requests_total", (("kind", "Pod"), ("operation", "CREATE"), ("outcome", "patched"),
                                                       ("webhook", "/mutate")))] == 1
    assert samples[("controller_runtime_webhook_latency_seconds_bucket",
                    (("code", "200"), ("le", "10.0"), ("webhook", "/validate")))] == 1
    from cryptography import x509
    cert = x509.load_pem_x509_certificate(paths["tls.crt"].read_bytes())
    assert samples[("admit_certificate_expiry_timestamp_seconds", (("certificate", "serving"),))] == \
        cert.not_valid_after_utc.timestamp()
    assert samples[("admit_kube_api_requests_total", (("code", "201"), ("resource", "leases"), ("verb", "create")))] \
        >= 1
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert records and len(records) == len([line for line in out.splitlines() if line.strip()]), out
    denial = next(r for r in records if r.get("decision") == "denied")
    assert denial["uid"] == denied["request"]["uid"] and denial["kind"] == "Deployment"
    assert denial["object"] == "default/pause" and denial["duration_ms"] > 0
