"""Gang backends, pure: the same annotations become a scheduler-plugins PodGroup (coscheduling) or Kubernetes' native
Workload + PodGroup with pod spec.schedulingGroup (workload-api); which backend, deferring, validation alike."""

import copy

import jsonpatch
import pytest

from admit.backends import workload_api
from admit.backends.workload_api.discovery import choose_version
from admit.config import Config
from admit.webhook.mutate import mutate
from admit.gang.plan import GangPlan
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.validate import ScaleCheck, scale_verdict, validate
from tests.helpers import EXAMPLES, admission_review, example

COS = Config()
NATIVE = Config(gang_backend="workload-api", workload_api_version="v1alpha2")
BETA = Config(gang_backend="workload-api", workload_api_version="v1beta1")
BOTH = Config(extra_gang_backends=frozenset({"workload-api"}), workload_api_version="v1alpha2")
LABEL = "scheduling.x-k8s.io/pod-group"

# (config, where the pods name their group) for behaviour both backends share
BACKENDS = pytest.mark.parametrize("config", [COS, NATIVE, BETA], ids=["coscheduling", "v1alpha2", "v1beta1"])


def req(obj, operation="CREATE", **kw):
    return parse_review(dumps(admission_review(obj, operation, **kw)))


def mutated(obj, config, operation="CREATE", **kw):
    decision = mutate(req(obj, operation, **kw), config)
    return jsonpatch.apply_patch(obj, decision.patch), decision


def group_of_template(obj, config):
    tpl = obj["spec"]["template"]
    if config.gang_backend == "workload-api":
        return (tpl["spec"].get("schedulingGroup") or {}).get("podGroupName")
    return (tpl.get("metadata", {}).get("labels") or {}).get(LABEL)


def test_the_workload_api_backend_names_the_pod_group_in_the_template_and_keeps_the_default_scheduler():
    dep = example("web-gang-deployment.yaml")
    out, decision = mutated(dep, NATIVE)
    spec = out["spec"]["template"]["spec"]
    assert spec["schedulingGroup"] == {"podGroupName": "web"}
    assert spec["schedulerName"] == "default-scheduler"
    assert LABEL not in out["spec"]["template"]["metadata"]["labels"]
    assert out["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    assert decision.warnings == []


@BACKENDS
def test_a_second_pass_over_the_mutated_object_gives_an_empty_patch_with_either_backend(config):
    dep = example("pause-gang-deployment.yaml")
    once, _ = mutated(dep, config)
    assert group_of_template(once, config) == "pause"
    assert mutate(req(once), config).patch == []


def test_the_backend_annotation_moves_one_workload_to_the_native_gang_while_the_rest_stay_on_coscheduling():
    moved = example("pause-gang-deployment.yaml")
    moved["metadata"]["annotations"]["gang.admit.dev/backend"] = "workload-api"
    stays = example("pause-gang-deployment.yaml")
    out_moved, _ = mutated(moved, BOTH)
    out_stays, _ = mutated(stays, BOTH)
    assert out_moved["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "pause"}
    assert out_stays["spec"]["template"]["metadata"]["labels"][LABEL] == "pause"
    assert validate(req(out_moved), BOTH).ensure.backend == "workload-api"
    assert validate(req(out_stays), BOTH).ensure.backend == "coscheduling"


def test_a_backend_admit_was_not_started_with_is_refused_naming_the_flag_that_enables_it():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/backend"] = "workload-api"
    verdict = validate(req(dep), COS)
    assert not verdict.decision.allowed and verdict.decision.code == 400
    assert "--extra-gang-backend workload-api" in verdict.decision.message
    assert "config.extraGangBackends" in verdict.decision.message
    assert mutate(req(dep), COS).patch == []


def test_a_misspelt_backend_value_is_refused_with_the_accepted_values():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/backend"] = "native"
    verdict = validate(req(dep), BOTH)
    assert verdict.decision.code == 400
    assert '"coscheduling"' in verdict.decision.message and '"workload-api"' in verdict.decision.message


def test_without_a_served_workload_api_a_workload_asking_for_it_is_refused_naming_the_gates_and_runtime_config():
    dep = example("pause-gang-deployment.yaml")
    verdict = validate(req(dep), Config(gang_backend="workload-api"))
    assert verdict.decision.code == 400
    msg = verdict.decision.message
    assert "--feature-gates=GenericWorkload=true,GangScheduling=true" in msg
    assert "--runtime-config=scheduling.k8s.io/v1alpha2=true" in msg


@BACKENDS
def test_a_template_that_already_names_a_scheduling_group_is_left_to_whoever_made_it(config):
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "lws-leader-0"}
    decision = mutate(req(dep), config)
    assert decision.patch == []
    assert any("lws-leader-0" in n and "owns it" in n for n in decision.notes)
    verdict = validate(req(dep), config)
    assert verdict.decision.allowed and verdict.ensure is None


@BACKENDS
def test_a_job_with_spec_scheduling_is_left_to_the_job_controller_but_still_checked(config):
    job = example("training-job.yaml")
    job["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {}}}
    assert mutate(req(job), config).patch == []
    verdict = validate(req(job), config)
    assert verdict.decision.allowed and verdict.ensure is None
    assert any("WorkloadWithJob" in n for n in verdict.decision.notes)
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "4"
    job["spec"]["parallelism"] = 2
    assert not validate(req(job), config).decision.allowed


@BACKENDS
def test_replicas_below_min_member_are_refused_naming_the_scheduler_that_would_wait(config):
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["replicas"] = 2
    verdict = validate(req(dep), config)
    assert not verdict.decision.allowed and verdict.decision.code == 403
    who = "GangScheduling" if config.gang_backend == "workload-api" else "Coscheduling"
    assert who in verdict.decision.message and "spec.replicas=2" in verdict.decision.message


@BACKENDS
def test_a_scale_below_min_member_is_refused_with_either_backend(config):
    dep = example("web-gang-deployment.yaml")
    check = ScaleCheck("apps", "v1", "Deployment", "deployments", "default", "web", 3)
    decision = scale_verdict(dep, check, config).decision
    assert not decision.allowed and "minMember 6" in decision.message


@BACKENDS
def test_an_ordered_ready_statefulset_gang_is_refused_with_either_backend(config):
    sts = example("etcd-statefulset.yaml")
    sts["spec"].pop("podManagementPolicy", None)
    verdict = validate(req(sts), config)
    assert not verdict.decision.allowed and "OrderedReady" in verdict.decision.message


@BACKENDS
def test_a_pod_update_is_never_patched(config):
    pod = example("pause-gang-deployment.yaml")["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                                                          "annotations": {"gang.admit.dev/min-member": "1"}},
           "spec": pod["spec"]}
    assert mutate(req(pod, "UPDATE", old=pod), config).patch == []


def test_a_job_template_is_never_given_a_scheduling_group_on_update():
    job = example("training-job.yaml")
    old = copy.deepcopy(job)
    old["metadata"]["annotations"].pop("gang.admit.dev/min-member")
    decision = mutate(req(job, "UPDATE", old=old), NATIVE)
    assert not any("schedulingGroup" in op["path"] for op in decision.patch)
    assert any("immutable" in w and "spec.schedulingGroup" in w for w in decision.warnings)
    verdict = validate(req(job, "UPDATE", old=old), NATIVE)
    assert verdict.ensure is None  # its pods cannot name the group: no Workload to wait on


def test_a_bare_pod_with_the_annotations_names_its_pod_group_at_create():
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "solo", "namespace": "default", "annotations": {"gang.admit.dev/min-member": "1"}},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    out, _ = mutated(pod, NATIVE)
    assert out["spec"]["schedulingGroup"] == {"podGroupName": "solo"}
    assert "schedulerName" not in out["spec"]
    plan = validate(req(out), NATIVE).ensure
    assert "controllerRef" not in workload_api.desired_workload(plan, NATIVE)["spec"]  # shared by bare pods


def test_a_dotted_group_name_cannot_name_a_v1alpha2_workload_but_can_in_v1beta1():
    sts = example("etcd-statefulset.yaml")
    sts["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "etcd.quorum"
    verdict = validate(req(sts), NATIVE)
    assert verdict.decision.code == 400 and "DNS label" in verdict.decision.message
    assert validate(req(sts), BETA).decision.allowed


def test_min_resources_and_the_timeout_have_no_native_field_and_a_warning_says_so():
    dep = example("pause-gang-deployment.yaml")  # sets schedule-timeout-seconds
    dep["metadata"]["annotations"]["gang.admit.dev/min-resources"] = "auto"
    warnings = validate(req(dep), NATIVE).decision.warnings
    assert any("no scheduleTimeoutSeconds" in w for w in warnings)
    assert any("no minResources" in w for w in warnings)
    plain = example("web-gang-deployment.yaml")  # min-resources left at its default: silent
    assert validate(req(plain), NATIVE).decision.warnings == []


def test_removing_the_annotation_removes_the_scheduling_group_admit_set():
    dep = example("web-gang-deployment.yaml")
    ganged, _ = mutated(dep, NATIVE)
    new = copy.deepcopy(ganged)
    del new["metadata"]["annotations"]["gang.admit.dev/min-member"]
    out, _ = mutated(new, NATIVE, "UPDATE", old=ganged)
    assert "schedulingGroup" not in out["spec"]["template"]["spec"]
    assert "gang.admit.dev/managed" not in out["metadata"]["labels"]


def test_a_managed_deployment_moves_between_backends_with_one_annotation_both_ways():
    dep = example("web-gang-deployment.yaml")
    cos, _ = mutated(dep, BOTH)
    assert cos["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    native_ask = copy.deepcopy(cos)
    native_ask["metadata"]["annotations"]["gang.admit.dev/backend"] = "workload-api"
    native, _ = mutated(native_ask, BOTH, "UPDATE", old=cos)
    tpl = native["spec"]["template"]
    assert tpl["spec"]["schedulingGroup"] == {"podGroupName": "web"}
    assert tpl["spec"]["schedulerName"] == "default-scheduler"
    assert LABEL not in tpl["metadata"]["labels"]
    back_ask = copy.deepcopy(native)
    back_ask["metadata"]["annotations"]["gang.admit.dev/backend"] = "coscheduling"
    back, _ = mutated(back_ask, BOTH, "UPDATE", old=native)
    assert "schedulingGroup" not in back["spec"]["template"]["spec"]
    assert back["spec"]["template"]["metadata"]["labels"][LABEL] == "web"
    assert back["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_a_spark_application_stays_on_coscheduling_with_a_note_where_that_backend_is_enabled():
    app = example("spark-pi-scala.yaml")
    with_cos = NATIVE.replace(extra_gang_backends=frozenset({"coscheduling"}))
    verdict = validate(req(app), with_cos)
    assert verdict.ensure.backend == "coscheduling"
    assert any("Spark pods stay on the coscheduling backend" in n for n in verdict.decision.notes)
    # a note, not a warning (docs/behaviour.md, "Two gang backends"): admit review --strict does not fail on it
    assert not any("stay on the coscheduling backend" in w for w in verdict.decision.warnings)
    refused = validate(req(app), NATIVE).decision
    assert refused.code == 400 and "--extra-gang-backend coscheduling" in refused.message


def _plan(**kw):
    base = dict(kind="Deployment", api_group="apps", name="web", namespace="team-a", group_name="web", min_member=3,
                total_pods=3, total_field="spec.replicas", backend="workload-api")
    base.update(kw)
    return GangPlan(**base)


def test_v1alpha2_objects_have_the_fields_of_the_kubernetes_types():
    workload, pod_group = workload_api.desired_objects(_plan(), NATIVE)
    assert workload["apiVersion"] == "scheduling.k8s.io/v1alpha2" and workload["kind"] == "Workload"
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"},
        "podGroupTemplates": [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 3}}}],
    }
    assert pod_group["spec"] == {
        "podGroupTemplateRef": {"workload": {"workloadName": "web", "podGroupTemplateName": "gang"}},
        "schedulingPolicy": {"gang": {"minCount": 3}},
    }
    assert "ownerReferences" not in workload["metadata"] and "ownerReferences" not in pod_group["metadata"]


def test_v1beta1_pod_groups_reference_their_workload_with_workload_ref():
    _, pod_group = workload_api.desired_objects(_plan(), BETA)
    assert pod_group["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert pod_group["spec"]["workloadRef"] == {"workloadName": "web", "templateName": "gang"}


def test_a_changed_min_count_cannot_follow_in_v1alpha2_and_is_a_patch_in_v1beta1():
    for config in (NATIVE, BETA):
        stored = workload_api.desired_objects(_plan(), config)
        wanted = workload_api.desired_objects(_plan(min_member=5), config)
        for have, want in zip(stored, wanted):
            have["spec"]["disruptionMode"] = "Pod" if have["kind"] == "PodGroup" else None  # server-filled fields
            if have["kind"] == "Workload":
                del have["spec"]["disruptionMode"]
            assert workload_api.update_ops(have, copy.deepcopy(have), config.workload_api_version) == []
            ops = workload_api.update_ops(have, want, config.workload_api_version)
            if config is NATIVE:
                assert ops is None
            else:
                assert ops[-1]["op"] == "replace" and ops[-1]["value"] == 5
                assert jsonpatch.apply_patch(have, ops) != have


def test_a_workload_made_by_the_workloads_own_controller_is_left_alone():
    job_workload = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
                    "metadata": {"name": "train", "namespace": "ml",
                                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                                      "uid": "u1", "controller": True}]},
                    "spec": {"podGroupTemplates": [{"name": "t", "schedulingPolicy": {"gang": {"minCount": 4}}}]}}
    plan = _plan(kind="Job", api_group="batch", name="train", namespace="ml", group_name="train")
    assert workload_api.ownership(job_workload, plan, NATIVE, False).action == "operator"
    other = _plan(name="other", group_name="train", namespace="ml")
    assert workload_api.ownership(job_workload, other, NATIVE, False).action == "conflict"
    assert workload_api.ownership(job_workload, other, NATIVE, True).action == "use"


def test_discovery_prefers_v1beta1_and_needs_both_resources():
    assert choose_version({"v1": set(), "v1alpha2": {"workloads", "podgroups", "podgroups/status"}}) == "v1alpha2"
    assert choose_version({"v1alpha2": {"workloads", "podgroups"}, "v1beta1": {"workloads", "podgroups"}}) == "v1beta1"
    assert choose_version({"v1alpha1": {"workloads"}}) == ""
    assert choose_version({}) == ""


def test_review_with_the_workload_api_backend_prints_the_workload_and_pod_group_each_workload_would_get(capsys):
    from admit.cli import main

    path = str(EXAMPLES / "pause-gang-deployment.yaml")
    assert main(["review", "--gang-backend", "workload-api", path]) == 0
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line[:5] == ["ALLOWED", "Deployment", "default/pause", "pause", "3"]  # the gang's minCount
    assert main(["review", "--gang-backend", "workload-api", "-v", "--no-objects", path]) == 0
    out = capsys.readouterr().out
    assert "  workload:" in out and "  podGroup:" in out
    assert "apiVersion: scheduling.k8s.io/v1alpha2" in out and "podGroupName: pause" in out
    assert "scheduling.x-k8s.io" not in out
    assert main(["review", "--gang-backend", "workload-api", "--workload-api-version", "v1beta1", "-o", "json",
                 path]) == 0
    import json

    (result,) = json.loads(capsys.readouterr().out)
    assert [o["kind"] for o in result["podGroups"]] == ["Workload", "PodGroup"]
    assert result["podGroups"][1]["spec"]["workloadRef"] == {"workloadName": "pause", "templateName": "gang"}


def test_a_generate_name_job_names_its_workload_once_in_the_mutating_phase_and_keeps_it():
    job = example("training-job.yaml")
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "train-"
    out, decision = mutated(job, NATIVE)
    named = out["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"]
    assert named.startswith("train-") and len(named) == len("train-") + 5
    stored = copy.deepcopy(out)
    stored["metadata"]["name"] = "train-x7k2p"  # kube-apiserver generates the name before the validating webhooks
    verdict = validate(req(stored), NATIVE)
    assert verdict.decision.allowed and verdict.ensure.group_name == named
    assert mutate(req(stored), NATIVE).patch == []


def test_a_spark_executor_is_not_labelled_for_coscheduling_when_admit_runs_without_it():
    from admit.families.kinds import POD_JOINERS

    executor = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "spark-pi-exec-1", "namespace": "spark-jobs",
                             "labels": {"spark-role": "executor", "spark-app-selector": "spark-pi"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "spark-pi-driver",
                                                  "uid": "u-driver", "controller": True}]},
                "spec": {"containers": [{"name": "c", "image": "spark"}]}}
    driver_group = {"metadata": {"name": "spark-pi", "namespace": "spark-jobs",
                                 "annotations": {"gang.admit.dev/owner": "/Pod/spark-pi-driver"}}}

    class Known:  # the managed PodGroup cache: the driver's group, named after spark-app-selector
        def get(self, namespace, name):
            return driver_group if (namespace, name) == ("spark-jobs", "spark-pi") else None

    (joined,) = [p for p in (j(executor, COS, "spark-jobs", Known()) for j in POD_JOINERS) if p is not None]
    (blocked,) = [p for p in (j(executor, NATIVE, "spark-jobs", Known()) for j in POD_JOINERS) if p is not None]
    assert joined.mutate and joined.group_name == "spark-pi"
    assert not blocked.mutate and not blocked.create_pod_group
    assert any("--extra-gang-backend coscheduling" in w for w in blocked.warnings)


OPERATOR_GANGS = pytest.mark.parametrize("name,controller", [
    ("jobset-pytorch.yaml", "the JobSet controller makes its Workload and PodGroups"),
    ("leaderworkerset-vllm.yaml", "the LeaderWorkerSet controller makes its Workload and one PodGroup per group"),
], ids=["JobSet", "LeaderWorkerSet"])


@BACKENDS
@OPERATOR_GANGS
def test_a_jobset_or_leaderworkerset_with_its_own_native_gang_is_left_to_its_operator_but_still_checked(
        config, name, controller):
    # JobSet keps/969-WAS-integration and LWS keps/666-gang-scheduling-in-lws (alpha with Kubernetes 1.37): when
    # spec.scheduling is set (even to {}), the operator compiles a Workload and PodGroups itself. admit labelled the
    # templates, rewrote schedulerName and made a second gang beside it; now one mechanism remains.
    obj = example(name)
    obj["spec"]["scheduling"] = {}
    decision = mutate(req(obj), config)
    assert decision.patch == []
    assert any(f"sets spec.scheduling: {controller}; admit only checks its size" in n for n in decision.notes)
    verdict = validate(req(obj), config)
    assert verdict.decision.allowed and verdict.ensure is None
    assert verdict.decision.pod_groups == []


@OPERATOR_GANGS
def test_a_leaderworkerset_or_jobset_given_spec_scheduling_after_admit_mutated_it_loses_admit_s_marks(name, controller):
    # Another mutating webhook sets spec.scheduling after admit's ran: kube-apiserver calls admit again
    # (reinvocationPolicy: IfNeeded), and admit takes its own marks off, the LWS group-spec annotation included.
    once, _ = mutated(example(name), COS)
    once["spec"]["scheduling"] = {}
    again, decision = mutated(once, COS)
    assert "its controller's native gang, so admit dropped its own gang" in " ".join(decision.warnings)
    text = str(again["spec"])
    assert "gang.admit.dev/group-spec" not in text and LABEL not in text
    assert "scheduler-plugins-scheduler" not in text
    assert "gang.admit.dev/managed" not in (again["metadata"].get("labels") or {})
    assert mutate(req(again), COS).patch == []
