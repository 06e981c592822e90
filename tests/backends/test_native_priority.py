"""Native gangs (workload-api backend) as Kubernetes 1.36, 1.37 and 1.38 serve them: the pods' priority class and
preemption policy carried into the Workload template and the PodGroup, gangs kube-scheduler would never schedule
refused at admission, the per-version shapes, discovery, and the fake API's validation as the types give it.

The objects are shaped as kube-apiserver stores them (defaulted pod template fields included)."""

import copy
import json
import logging

import pytest
from prometheus_client import REGISTRY

from admit.webhook.admission import Admission
from admit.backends import workload_api
from admit.controller.claims import claim_of
from admit.backends.gangobjects import owner_reference
from admit.backends.workload_api.discovery import BackendUnavailable, choose_version, configure_backends, unknown_versions
from admit.config import WORKLOAD_API_VERSIONS, Config
from admit.kube.client import KubeAPI, KubeError
from admit.webhook.mutate import mutate
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI, _workload_api_errors, workload_api_resources
from admit.webhook.validate import validate
from tests.helpers import admission_review, apply_answer, example
from tests.backends.test_backends import mutated, req
from tests.controller.test_native_controller import DEPLOYMENTS, decide_native, gang

ALPHA2 = Config(gang_backend="workload-api", workload_api_version="v1alpha2")  # 1.36
ALPHA3 = Config(gang_backend="workload-api", workload_api_version="v1alpha3")  # 1.37, alpha
BETA = Config(gang_backend="workload-api", workload_api_version="v1beta1")  # 1.37, beta
GA = Config(gang_backend="workload-api", workload_api_version="v1")  # 1.38 (planned)
CARRYING = pytest.mark.parametrize("config", [ALPHA3, BETA, GA], ids=["v1alpha3", "v1beta1", "v1"])


def stored_deployment(priority_class="team-high", **pod_spec):
    """A gang Deployment as kube-apiserver 1.37 stores it (defaults filled in), its pods naming a priority class."""
    spec = {
        "priorityClassName": priority_class,
        "containers": [{"name": "trainer", "image": "ghcr.io/example/trainer:2.1", "imagePullPolicy": "IfNotPresent",
                        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "securityContext": {}, "schedulerName": "default-scheduler",
    }
    spec.update(pod_spec)
    if priority_class is None:
        del spec["priorityClassName"]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "team-a", "uid": "4f9c1d2e-7a8b-4c3d-9e0f-1a2b3c4d5e6f",
                     "generation": 1, "labels": {"app": "trainer"},
                     "annotations": {"gang.admit.dev/min-member": "4"}},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "trainer"}},
                 "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                 "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": spec}},
    }


def tfjob_with_classes(ps_class, worker_class):
    job = example("tfjob-ps-worker.yaml")
    for rtype, cls in (("PS", ps_class), ("Worker", worker_class)):
        job["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["priorityClassName"] = cls
    return job


# ----------------------------------------------------------------------------------------------- carrying priority

def test_review_on_v1beta1_gives_the_workload_template_and_the_pod_group_the_pods_priority_class(tmp_path, capsys):
    from admit.cli import main

    path = tmp_path / "trainer.json"
    path.write_text(json.dumps(stored_deployment("team-high")))
    assert main(["review", "--gang-backend", "workload-api", "--workload-api-version", "v1beta1", "-o", "json",
                 str(path)]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    workload, pod_group = result["podGroups"]
    assert workload["spec"]["podGroupTemplates"] == [
        {"name": "gang", "schedulingPolicy": {"gang": {"minCount": 4}}, "priorityClassName": "team-high"}]
    assert pod_group["spec"]["priorityClassName"] == "team-high"
    assert "preemptionPolicy" not in pod_group["spec"]  # priority admission fills it from the class, as for pods


@CARRYING
def test_a_gang_whose_pods_name_no_priority_class_gets_none_either(config):
    plan = validate(req(stored_deployment(None)), config).ensure
    workload, pod_group = workload_api.desired_objects(plan, config)
    assert "priorityClassName" not in workload["spec"]["podGroupTemplates"][0]
    assert "priorityClassName" not in pod_group["spec"]


def test_v1alpha2_writes_no_priority_fields_they_need_an_alpha_gate_there():
    plan = validate(req(stored_deployment("team-high")), ALPHA2).ensure
    assert plan.native_priority == {}
    workload, pod_group = workload_api.desired_objects(plan, ALPHA2)
    assert "priorityClassName" not in workload["spec"]["podGroupTemplates"][0]
    assert "priorityClassName" not in pod_group["spec"]


@CARRYING
def test_an_explicit_preemption_policy_is_carried_with_the_class(config):
    plan = validate(req(stored_deployment("team-batch", preemptionPolicy="Never")), config).ensure
    _, pod_group = workload_api.desired_objects(plan, config)
    assert pod_group["spec"]["priorityClassName"] == "team-batch"
    assert pod_group["spec"]["preemptionPolicy"] == "Never"


@CARRYING
def test_a_gang_mixing_two_priority_classes_is_refused_naming_both(config):
    job = tfjob_with_classes("team-high", "team-low")
    verdict = validate(req(job), config)
    assert not verdict.decision.allowed and verdict.decision.code == 403
    message = verdict.decision.message
    assert "'team-high'" in message and "'team-low'" in message
    assert "replica type PS" in message and "replica type Worker" in message
    assert "same priorityClassName" in message
    untouched = mutate(req(job), config)  # the mutating phase writes nothing and leaves the refusal to /validate
    assert untouched.allowed and untouched.patch == []


def test_a_gang_mixing_classes_is_still_allowed_on_1_36_whose_scheduler_does_not_compare_them():
    assert validate(req(tfjob_with_classes("team-high", "team-low")), ALPHA2).decision.allowed


@CARRYING
def test_a_system_priority_class_is_refused_because_a_pod_group_priority_is_capped_at_one_billion(config):
    verdict = validate(req(stored_deployment("system-node-critical")), config)
    assert not verdict.decision.allowed and verdict.decision.code == 403
    assert "'system-node-critical'" in verdict.decision.message and "1000000000" in verdict.decision.message


@CARRYING
@pytest.mark.parametrize("rtype,field,value,named", [
    ("PS", "schedulerName", "my-scheduler", ("'my-scheduler'", "'default-scheduler'")),
    ("Worker", "preemptionPolicy", "Never", ("'Never'", "(none)")),
])
def test_pod_templates_naming_two_schedulers_or_preemption_policies_are_refused_naming_both(config, rtype, field,
                                                                                            value, named):
    job = tfjob_with_classes("team-high", "team-high")
    job["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"][field] = value
    verdict = validate(req(job), config)
    assert not verdict.decision.allowed and f"two {field} values" in verdict.decision.message
    assert all(n in verdict.decision.message for n in named)


def test_a_deferred_job_is_not_checked_for_priority_its_controller_owns_the_gang():
    job = example("training-job.yaml")
    job["spec"]["scheduling"] = {"podGroupPolicy": {"gang": {"minCount": 4}}}
    job["spec"]["template"]["spec"]["priorityClassName"] = "system-cluster-critical"
    assert validate(req(job), BETA).decision.allowed


def test_priority_mismatch_compares_only_the_fields_admit_sets():
    plan = validate(req(stored_deployment("team-high")), BETA).ensure
    workload, pod_group = workload_api.desired_objects(plan, BETA)
    stored = copy.deepcopy(pod_group)  # as the server keeps it: priority admission filled priority and policy
    stored["spec"].update(priority=100000, preemptionPolicy="PreemptLowerPriority", disruptionMode={"single": {}})
    assert workload_api.priority_mismatch(stored, pod_group) == {}
    assert workload_api.update_ops(stored, pod_group, "v1beta1") == []
    stored["spec"]["priorityClassName"] = "team-low"
    assert workload_api.priority_mismatch(stored, pod_group) == {"priorityClassName": ("team-low", "team-high")}
    assert workload_api.update_ops(stored, pod_group, "v1beta1") is None  # immutable: no patch can fix it


def test_the_fixes_for_an_immutable_pod_group_name_the_pod_group_annotation_under_the_configured_prefix():
    config = Config(gang_backend="workload-api", workload_api_version="v1alpha2", annotation_prefix="gang.example.com")
    deployment = stored_deployment("team-high")
    deployment["metadata"]["annotations"] = {"gang.example.com/min-member": "4"}
    plan = validate(req(deployment), config).ensure
    _, pod_group = workload_api.desired_objects(plan, config)
    stored = copy.deepcopy(pod_group)
    stored["spec"]["schedulingPolicy"]["gang"]["minCount"] = 6  # made for a bigger gang; 4 pods now
    status, message = workload_api.BACKEND.cannot_admit("PodGroup", stored, pod_group, None, plan, config)
    assert status == 403 and "annotation gang.example.com/pod-group" in message
    assert "gang.admit.dev" not in message
    config = Config(gang_backend="workload-api", workload_api_version="v1beta1", annotation_prefix="gang.example.com")
    plan = validate(req(deployment), config).ensure
    _, pod_group = workload_api.desired_objects(plan, config)  # v1beta1 carries the pods' priority class
    stored = copy.deepcopy(pod_group)
    stored["spec"]["priorityClassName"] = "team-low"
    reason, message = workload_api.BACKEND.cannot_follow("PodGroup", stored, pod_group, plan, config)
    assert reason == "priority" and "annotation gang.example.com/pod-group:" in message
    assert "gang.admit.dev" not in message


# ----------------------------------------------------------------------- objects admit keeps in step (fake API)

async def admit_once(client, obj, operation="CREATE", **kw):
    async def post(path, review):
        resp = await client.post(path, json=review)
        assert resp.status == 200, await resp.text()
        return (await resp.json())["response"]

    mutated_obj = apply_answer(obj, {"response": await post("/mutate", admission_review(obj, operation, **kw))})
    return await post("/validate", admission_review(mutated_obj, operation, **kw)), mutated_obj


async def test_a_changed_priority_class_on_a_kept_gang_is_refused_with_the_fix_and_nothing_is_written(aiohttp_client):
    async with FakeKubeAPI(workload_api="v1beta1") as fake:
        api_client = fake.api_client()
        try:
            client = await aiohttp_client(create_app(Admission(BETA, KubeAPI(api_client))))
            answer, stored = await admit_once(client, stored_deployment("team-high"))
            assert answer["allowed"] is True
            pod_group = fake.get("scheduling.k8s.io/v1beta1", "podgroups", "team-a", "trainer")
            workload = fake.get("scheduling.k8s.io/v1beta1", "workloads", "team-a", "trainer")
            assert pod_group["spec"]["priorityClassName"] == "team-high"
            assert workload["spec"]["podGroupTemplates"][0]["priorityClassName"] == "team-high"

            changed = copy.deepcopy(stored)
            changed["spec"]["template"]["spec"]["priorityClassName"] = "team-low"
            fake.clear_requests()
            answer, _ = await admit_once(client, changed, "UPDATE", old=stored)
            assert answer["allowed"] is False and answer["status"]["code"] == 403
            message = answer["status"]["message"]
            assert "keeps priorityClassName 'team-high' (the pods now name 'team-low')" in message
            assert "Delete the Deployment and create it again" in message
            assert [r for r in fake.requests if r.method in ("PATCH", "PUT", "DELETE")] == []
        finally:
            await api_client.close()


@pytest.mark.parametrize("version", ["v1alpha3", "v1beta1", "v1"])
async def test_the_fake_refuses_a_changed_priority_class_as_an_immutable_field(version):
    config = Config(gang_backend="workload-api", workload_api_version=version)
    plan = validate(req(stored_deployment("team-high")), config).ensure
    async with FakeKubeAPI(workload_api=version) as fake:
        async with fake.api_client() as api_client:
            kube = KubeAPI(api_client)
            for body in workload_api.desired_objects(plan, config):
                await kube.create_object("scheduling.k8s.io", version, workload_api.KIND_PLURALS[body["kind"]],
                                         body, False, 5)
            for plural, path in (("podgroups", "/spec/priorityClassName"),
                                 ("workloads", "/spec/podGroupTemplates/0/priorityClassName")):
                with pytest.raises(KubeError) as e:
                    await kube.patch_object("scheduling.k8s.io", version, plural, "team-a", "trainer",
                                            [{"op": "replace", "path": path, "value": "team-low"}], False, 5)
                assert e.value.status == 422 and "immutable" in e.value.message
            # minCount stays mutable in these versions ("to support workload scaling")
            await kube.patch_object("scheduling.k8s.io", version, "podgroups", "team-a", "trainer",
                                    [{"op": "replace", "path": "/spec/schedulingPolicy/gang/minCount", "value": 5}],
                                    False, 5)


# ------------------------------------------------------------------------------------------- versions and discovery

def test_one_table_names_every_version_admit_speaks_with_its_source_and_condition():
    assert tuple(workload_api.SHAPES) == WORKLOAD_API_VERSIONS == ("v1", "v1beta1", "v1alpha3", "v1alpha2")
    for version, row in workload_api.SHAPES.items():
        assert "types.go" in row.source or "UNVERIFIED" in row.source
    assert workload_api.SHAPES["v1alpha2"].scheduled_condition == "PodGroupScheduled"
    assert workload_api.SHAPES["v1beta1"].scheduled_condition == "PodGroupInitiallyScheduled"
    assert "UNVERIFIED" in workload_api.SHAPES["v1"].source


def test_discovery_prefers_v1_then_v1beta1_then_the_known_alphas():
    both = {"workloads", "podgroups", "podgroups/status"}
    assert choose_version({"v1": {"priorityclasses"}, "v1alpha2": both}) == "v1alpha2"
    assert choose_version({"v1": {"priorityclasses"}, "v1alpha3": both, "v1beta1": both}) == "v1beta1"
    assert choose_version({"v1": {"priorityclasses", *both}, "v1beta1": both}) == "v1"
    assert choose_version({"v1": {"priorityclasses"}, "v1alpha3": both}) == "v1alpha3"
    assert choose_version({"v1alpha1": {"workloads"}, "v1alpha9": both}) == ""
    # v1alpha1 (1.35's first alpha) is known and not spoken: not "unknown" (that would say "upgrade admit")
    assert unknown_versions({"v1": {"priorityclasses"}, "v1alpha9": both, "v1alpha1": {"workloads"}}) == ["v1alpha9"]


async def test_a_served_version_admit_does_not_know_is_reported_once_and_the_backend_stays_off(caplog):
    async with FakeKubeAPI() as fake:
        fake.register("scheduling.k8s.io", "v1alpha9", "Workload", "workloads", status=False)
        fake.register("scheduling.k8s.io", "v1alpha9", "PodGroup", "podgroups")
        async with fake.api_client() as api_client:
            with caplog.at_level(logging.WARNING, logger="admit.backends"):
                config = await configure_backends(api_client, Config(extra_gang_backends=frozenset({"workload-api"})))
            assert config.workload_api_version == ""
            reports = [r.getMessage() for r in caplog.records if "v1alpha9" in r.getMessage()]
            assert len(reports) == 1 and "stays off" in reports[0]
            with pytest.raises(BackendUnavailable) as e:
                await configure_backends(api_client, Config(gang_backend="workload-api"))
            assert "v1alpha9" in str(e.value) and "upgrade admit" in str(e.value)


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha3", "v1alpha2"])
async def test_discovery_at_start_finds_each_version_the_fake_serves(version):
    async with FakeKubeAPI(workload_api=version) as fake:
        async with fake.api_client() as api_client:
            config = await configure_backends(api_client, Config(gang_backend="workload-api"))
    assert config.workload_api_version == version


# ------------------------------------------------------------------------------------- the fake's validation rules

@pytest.mark.parametrize("version,accepted", [("v1beta1", True), ("v1alpha3", True), ("v1", True),
                                              ("v1alpha2", False)])
def test_the_fake_takes_a_dotted_workload_name_where_the_types_make_it_a_dns_subdomain(version, accepted):
    config = Config(gang_backend="workload-api", workload_api_version=version)
    dep = stored_deployment(None)
    dep["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "trainer.v2"
    plan = validate(req(dep), BETA).ensure
    _, pod_group = workload_api.desired_objects(plan, config)
    errors = _workload_api_errors(workload_api_resources(version)[1], pod_group)
    assert (errors == []) is accepted, errors
    if not accepted:
        assert "workloadName: Invalid value: must be a DNS label" in errors[0]


def test_the_fake_refuses_a_pod_group_priority_above_the_user_definable_maximum():
    rt = workload_api_resources("v1beta1")[1]
    pod_group = {"spec": {"workloadRef": {"workloadName": "trainer", "templateName": "gang"},
                          "schedulingPolicy": {"gang": {"minCount": 4}},
                          "priorityClassName": "system-node-critical", "priority": 2000001000}}
    assert _workload_api_errors(rt, pod_group) == [
        "spec.priority: Invalid value: 2000001000: must be less than or equal to 1000000000"]


def test_a_mutated_v1beta1_deployment_keeps_its_priority_class_on_the_template():
    out, decision = mutated(stored_deployment("team-high"), BETA)
    spec = out["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "team-high" and spec["schedulingGroup"] == {"podGroupName": "trainer"}
    assert {op["path"] for op in decision.patch} == {"/spec/template/spec/schedulingGroup",
                                                      "/metadata/labels/gang.admit.dev~1managed"}


# --------------------------------------------------------------------------------- the controller and the metrics

def test_the_controller_reports_a_stored_pod_group_whose_class_its_pods_no_longer_have_and_writes_nothing():
    dep = stored_deployment("team-low")
    dep["metadata"].update(labels={"app": "trainer", "gang.admit.dev/managed": "true"}, resourceVersion="9",
                           creationTimestamp="2026-11-30T11:00:00Z")
    dep["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "trainer"}
    owned = {"ownerReferences": [owner_reference(dep)]}
    objs = {kind: gang(BETA, kind, name="trainer", min_count=4, owner="apps/Deployment/trainer", **owned)
            for kind in ("Workload", "PodGroup")}
    objs["Workload"]["spec"]["podGroupTemplates"][0]["priorityClassName"] = "team-high"
    objs["PodGroup"]["spec"]["priorityClassName"] = "team-high"
    objs["PodGroup"]["metadata"]["namespace"] = objs["Workload"]["metadata"]["namespace"] = "team-a"
    claim = claim_of(dep, DEPLOYMENTS, BETA, backend="workload-api")
    actions = decide_native(("team-a", "trainer"), objs, [claim], BETA, now=0, unclaimed_since=None, grace=1)
    assert [(a.kind, a.object_kind) for a in actions] == [("priority", "Workload"), ("priority", "PodGroup")]
    assert all(not a.ops and "keeps priorityClassName 'team-high' (the pods now name 'team-low')" in a.message
               for a in actions)


async def test_native_gang_writes_and_refusals_are_counted_by_kind(aiohttp_client):
    def count(kind, operation):
        return REGISTRY.get_sample_value("admit_native_gang_operations_total",
                                         {"kind": kind, "operation": operation}) or 0.0

    before = {(k, o): count(k, o) for k in ("Workload", "PodGroup") for o in ("created", "refused")}
    async with FakeKubeAPI(workload_api="v1beta1") as fake:
        async with fake.api_client() as api_client:
            client = await aiohttp_client(create_app(Admission(BETA, KubeAPI(api_client))))
            answer, stored = await admit_once(client, stored_deployment("team-high"))
            assert answer["allowed"] is True
            changed = copy.deepcopy(stored)
            changed["spec"]["template"]["spec"]["priorityClassName"] = "team-low"
            answer, _ = await admit_once(client, changed, "UPDATE", old=stored)
            assert answer["allowed"] is False
    assert count("Workload", "created") - before[("Workload", "created")] == 1
    assert count("PodGroup", "created") - before[("PodGroup", "created")] == 1
    assert count("Workload", "refused") - before[("Workload", "refused")] == 1  # the first object that cannot follow
