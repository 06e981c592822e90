"""The webhook over real HTTP on loopback: AdmissionReview answers, PodGroup creation against a fake Kubernetes API
that speaks the REST protocol, failure modes, and bad input."""

import asyncio
import copy

import pytest

from admit.webhook.admission import Admission
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.webhook.app import create_app
from tests.helpers import admission_review, apply_answer, controller_pod, decode_patch, example

PG = ("scheduling.x-k8s.io/v1alpha1", "podgroups")


async def make_client(aiohttp_client, fake, **config):
    cfg = Config(**config)
    api_client = fake.api_client()
    client = await aiohttp_client(create_app(Admission(cfg, KubeAPI(api_client))))
    client.api_client = api_client
    return client


@pytest.fixture
async def webhook(aiohttp_client, fake):
    client = await make_client(aiohttp_client, fake)
    yield client
    await client.api_client.close()


async def post(client, path, review):
    resp = await client.post(path, json=review)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]
    return body


async def test_mutate_answers_a_deployment_with_a_patch_that_applies_cleanly(webhook):
    dep = example("pause-gang-deployment.yaml")
    body = await post(webhook, "/mutate", admission_review(dep))
    assert body["response"]["allowed"] is True
    out = apply_answer(dep, body)
    assert out["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pause"
    assert out["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


async def test_an_empty_mutation_is_sent_without_patch_or_patch_type(webhook):
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {}
    body = await post(webhook, "/mutate", admission_review(dep))
    assert body["response"] == {"uid": body["response"]["uid"], "allowed": True}


async def test_validate_creates_the_pod_group_with_one_post_and_no_owner_reference(webhook, fake):
    dep = example("pause-gang-deployment.yaml")
    mutated = apply_answer(dep, await post(webhook, "/mutate", admission_review(dep)))
    body = await post(webhook, "/validate", admission_review(mutated))
    assert body["response"]["allowed"] is True
    posts = fake.requests_for("podgroups")
    assert [(r.method, r.path) for r in posts] == [
        ("POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups")
    ]
    assert posts[0].content_type == "application/json"
    sent = posts[0].body
    assert sent["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and sent["kind"] == "PodGroup"
    assert sent["metadata"]["name"] == "pause" and sent["metadata"]["namespace"] == "default"
    assert sent["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "admit"}
    assert "ownerReferences" not in sent["metadata"]
    assert sent["spec"] == {"minMember": 3, "minResources": {"cpu": "300m", "memory": "192Mi"},
                            "scheduleTimeoutSeconds": 10}
    stored = fake.get(*PG, "default", "pause")
    assert stored["spec"]["minMember"] == 3


async def test_a_repeated_create_is_success_and_patches_nothing_when_the_spec_matches(webhook, fake):
    dep = example("pause-gang-deployment.yaml")
    await post(webhook, "/validate", admission_review(dep))
    fake.clear_requests()
    body = await post(webhook, "/validate", admission_review(dep))
    assert body["response"]["allowed"] is True
    assert [(r.method, r.status) for r in fake.requests_for("podgroups")] == [("POST", 409), ("GET", 200)]


async def test_an_update_that_changes_min_member_patches_the_pod_group_spec(webhook, fake):
    # As stored: the CREATE went through /mutate first, so the running pods already carry the group label.
    dep = example("pause-gang-deployment.yaml")
    dep = apply_answer(dep, await post(webhook, "/mutate", admission_review(dep)))
    await post(webhook, "/validate", admission_review(dep))
    new = copy.deepcopy(dep)
    new["spec"]["replicas"] = 5
    new["metadata"]["annotations"]["gang.admit.dev/min-member"] = "5"
    del new["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"]
    fake.clear_requests()
    body = await post(webhook, "/validate", admission_review(new, "UPDATE", old=dep))
    assert body["response"]["allowed"] is True
    patch = fake.requests_for("podgroups", "PATCH")
    assert len(patch) == 1 and patch[0].content_type == "application/json-patch+json"
    assert patch[0].body == [
        {"op": "replace", "path": "/spec/minMember", "value": 5},
        {"op": "replace", "path": "/spec/minResources", "value": {"cpu": "500m", "memory": "320Mi"}},
        {"op": "remove", "path": "/spec/scheduleTimeoutSeconds"},
    ]
    assert fake.get(*PG, "default", "pause")["spec"] == {"minMember": 5,
                                                         "minResources": {"cpu": "500m", "memory": "320Mi"}}


async def test_dry_run_requests_get_the_same_answer_and_store_nothing(webhook, fake):
    body = await post(webhook, "/validate", admission_review(example("pause-gang-deployment.yaml"), dry_run=True))
    assert body["response"]["allowed"] is True
    (req,) = fake.requests_for("podgroups")
    assert req.query.get("dryRun") == "All"
    assert fake.get(*PG, "default", "pause") is None


async def test_a_pod_group_of_the_same_name_owned_by_another_workload_is_a_clear_denial(webhook, fake):
    await post(webhook, "/validate", admission_review(example("pause-gang-deployment.yaml")))
    job = example("training-job.yaml")
    job["metadata"]["name"] = "pause"
    job["metadata"]["namespace"] = "default"
    body = await post(webhook, "/validate", admission_review(job))
    assert body["response"]["allowed"] is False
    msg = body["response"]["status"]["message"]
    assert "PodGroup default/pause already belongs to apps/Deployment/pause" in msg
    assert "gang.admit.dev/pod-group" in msg


async def test_a_hand_written_pod_group_named_explicitly_is_used_as_it_is(webhook, fake):
    fake.put({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
              "metadata": {"name": "pg1", "namespace": "default"}, "spec": {"minMember": 3, "scheduleTimeoutSeconds": 10}})
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "pg1"
    body = await post(webhook, "/validate", admission_review(dep))
    assert body["response"]["allowed"] is True
    assert fake.requests_for("podgroups", "PATCH") == []
    assert fake.get(*PG, "default", "pg1")["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 10}


async def test_a_hand_written_pod_group_that_merely_shares_the_default_name_is_refused_with_a_hint(webhook, fake):
    fake.put({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
              "metadata": {"name": "pause", "namespace": "default"}, "spec": {"minMember": 1}})
    body = await post(webhook, "/validate", admission_review(example("pause-gang-deployment.yaml")))
    assert body["response"]["allowed"] is False
    assert "was not created by admit" in body["response"]["status"]["message"]


async def test_an_unreachable_api_denies_with_the_reason_in_deny_mode(aiohttp_client, fake):
    client = await make_client(aiohttp_client, fake, api_timeout_seconds=0.3)
    fake.delay("POST", "podgroups", 2.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    body = await post(client, "/validate", admission_review(example("pause-gang-deployment.yaml")))
    elapsed = loop.time() - start
    await client.api_client.close()
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 503
    assert "failure mode 'deny'" in body["response"]["status"]["message"]
    assert elapsed < 1.5  # never waits on the API past its budget


async def test_an_api_error_allows_with_a_warning_in_allow_mode(aiohttp_client, fake):
    client = await make_client(aiohttp_client, fake, failure_mode="allow")
    fake.fail("POST", "podgroups", status=500, times=1)
    body = await post(client, "/validate", admission_review(example("pause-gang-deployment.yaml")))
    await client.api_client.close()
    assert body["response"]["allowed"] is True
    assert any("failure mode 'allow'" in w for w in body["response"]["warnings"])


async def test_a_forbidden_pod_group_create_is_an_api_failure_not_a_crash(webhook, fake):
    fake.forbid("podgroups")
    body = await post(webhook, "/validate", admission_review(example("pause-gang-deployment.yaml")))
    assert body["response"]["allowed"] is False and "403" in body["response"]["status"]["message"]


async def test_a_scale_below_min_member_reads_the_parent_and_is_denied(webhook, fake):
    dep = example("web-gang-deployment.yaml")
    fake.put(dep)
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "default"},
             "spec": {"replicas": 3}}
    old = copy.deepcopy(scale)
    old["spec"]["replicas"] = 8
    review = admission_review(scale, "UPDATE", old=old, sub_resource="scale",
                              resource=("apps", "v1", "deployments"), kind=("autoscaling", "v1", "Scale"))
    body = await post(webhook, "/validate", review)
    assert body["response"]["allowed"] is False
    assert "minMember 6" in body["response"]["status"]["message"]
    assert [r.path for r in fake.requests_for("deployments")] == ["/apis/apps/v1/namespaces/default/deployments/web"]


async def test_a_pod_of_a_known_group_costs_no_api_call(webhook, fake):
    dep = example("pause-gang-deployment.yaml")
    mutated = apply_answer(dep, await post(webhook, "/mutate", admission_review(dep)))
    fake.clear_requests()
    pod = controller_pod(mutated)
    for path in ("/mutate", "/validate"):
        body = await post(webhook, path, admission_review(pod, strip_namespace=True))
        assert body["response"]["allowed"] is True and decode_patch(body) == []
    assert fake.requests == []


async def test_health_and_readiness_answer(webhook):
    assert (await webhook.get("/healthz")).status == 200
    assert (await webhook.get("/readyz")).status == 200


async def test_readiness_reports_the_failing_check(aiohttp_client):
    app = create_app(Admission(Config()), [lambda: (False, "no certificate loaded")])
    client = await aiohttp_client(app)
    resp = await client.get("/readyz")
    assert resp.status == 503 and "no certificate loaded" in await resp.text()


@pytest.mark.parametrize(
    "body,content_type,reason",
    [
        (b"{not json", "application/json", "not valid JSON"),
        (b"[1, 2]", "application/json", "not a JSON object"),
        (b'{"apiVersion": "v1", "kind": "Pod"}', "application/json", "expected 'AdmissionReview'"),
        (b'{"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {"uid": "u"}}',
         "application/json", "not supported"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "application/json", "no request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}}',
         "application/json", "request.uid is missing"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "object": 3}}',
         "application/json", "request.object is not a JSON object"),
        (b"<xml/>", "application/xml", "not application/json"),
        (b"", "application/json", "empty body"),
    ],
)
async def test_a_malformed_admission_review_gets_http_400_with_a_reason(webhook, body, content_type, reason):
    for path in ("/mutate", "/validate"):
        resp = await webhook.post(path, data=body, headers={"Content-Type": content_type})
        assert resp.status == 400
        assert reason in await resp.text()


async def test_an_oversized_body_gets_http_400_and_the_server_keeps_serving(aiohttp_client, fake):
    client = await make_client(aiohttp_client, fake, max_body_bytes=10_000)
    resp = await client.post("/mutate", data=b"{" + b" " * 20_000 + b"}", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and "larger than the limit" in await resp.text()
    dep = example("pause-gang-deployment.yaml")
    assert (await post(client, "/mutate", admission_review(dep)))["response"]["allowed"] is True
    await client.api_client.close()


async def test_unknown_kinds_and_versions_get_an_allowed_untouched_answer(webhook):
    obj = {"apiVersion": "example.com/v7", "kind": "Widget", "metadata": {"name": "w", "namespace": "default",
           "annotations": {"gang.admit.dev/min-member": "2"}}, "spec": {"replicas": 1}}
    for path in ("/mutate", "/validate"):
        body = await post(webhook, path, admission_review(obj))
        assert body["response"]["allowed"] is True and "patch" not in body["response"]


async def test_odd_object_shapes_get_a_clear_answer_never_a_500_or_an_internal_error(webhook):
    dep = example("pause-gang-deployment.yaml")
    odd = []
    for spec in ([], "x", {"template": []}, {"template": {"spec": {"containers": "none"}}}, {"replicas": None}):
        obj = copy.deepcopy(dep)
        obj["spec"] = spec
        odd.append(obj)
    obj = copy.deepcopy(dep)
    obj["metadata"]["annotations"] = ["not", "a", "map"]
    odd.append(obj)
    for obj in odd:
        for path in ("/mutate", "/validate"):
            body = await post(webhook, path, admission_review(obj))
            assert "internal error" not in str(body["response"])


async def test_a_v1beta1_review_is_answered_in_v1beta1(webhook):
    review = admission_review(example("pause-gang-deployment.yaml"))
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    resp = await webhook.post("/mutate", json=review)
    body = await resp.json()
    assert body["apiVersion"] == "admission.k8s.io/v1beta1" and body["response"]["uid"] == review["request"]["uid"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_whose_content_encoding_does_not_decode_gets_http_400_not_500(webhook, encoding):
    for path in ("/mutate", "/validate"):
        resp = await webhook.post(path, data=b"xx", headers={"Content-Type": "application/json",
                                                             "Content-Encoding": encoding})
        assert resp.status == 400
        assert "body cannot be read" in await resp.text()
        # the connection is closed after that answer; the next request is served normally
        body = await post(webhook, path, admission_review(example("pause-gang-deployment.yaml")))
        assert body["response"]["allowed"] is True


async def test_a_schedule_timeout_without_min_member_is_answered_with_a_warning_kubectl_prints(webhook, fake):
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {"gang.admit.dev/schedule-timeout-seconds": "60"}
    mutated = await post(webhook, "/mutate", admission_review(dep))
    assert mutated["response"] == {"uid": mutated["response"]["uid"], "allowed": True}
    body = await post(webhook, "/validate", admission_review(dep))
    assert body["response"]["allowed"] is True
    assert body["response"]["warnings"] == [
        "add gang.admit.dev/min-member, or remove gang.admit.dev/schedule-timeout-seconds: without "
        "gang.admit.dev/min-member admit makes no gang of this object, so it is ignored"]
    assert fake.requests_for("podgroups") == []
