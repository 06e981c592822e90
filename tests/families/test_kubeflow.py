"""Kubeflow training jobs (TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob, MPIJob v1 and v2beta1): the gang admit
derives from each, as the training-operator and mpi-operator would count it, and the jobs it refuses."""

import copy

import jsonpatch
import pytest

from admit.webhook.admission import Admission
from admit.config import Config
from admit.webhook.mutate import mutate
from admit.cli.review import OfflineKube
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.validate import validate
from tests.helpers import admission_review, example

CONFIG = Config()
LABEL = "scheduling.x-k8s.io/pod-group"
SCHED = "scheduler-plugins-scheduler"


def request(obj, operation="CREATE", **kw):
    return parse_review(dumps(admission_review(obj, operation, **kw)))


def mutated(obj, config=CONFIG, operation="CREATE", **kw):
    d = mutate(request(obj, operation, **kw), config)
    return d, jsonpatch.apply_patch(obj, d.patch)


def verdict(obj, config=CONFIG, operation="CREATE", **kw):
    return validate(request(obj, operation, **kw), config)


def container(name, requests=None, limits=None):
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": name, "image": f"registry.example/{name}:1.0", "resources": res}


def replica(replicas, *containers, priority_class=None, restart="OnFailure"):
    spec = {"containers": list(containers)}
    if priority_class:
        spec["priorityClassName"] = priority_class
    out = {"restartPolicy": restart, "template": {"spec": spec}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def job(kind, replica_specs, name="train", annotations=None, api_version="kubeflow.org/v1", **spec):
    field = {
        "TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
        "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs", "MPIJob": "mpiReplicaSpecs",
    }[kind]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})},
        },
        "spec": {**spec, field: replica_specs},
    }


def tfjob(ps=2, workers=4, **kw):
    return job("TFJob", {
        "PS": replica(ps, container("tensorflow", {"cpu": "500m", "memory": "1536Mi"}), restart="Never"),
        "Worker": replica(workers, container("tensorflow", {"cpu": "2", "memory": "4Gi"}, {"nvidia.com/gpu": 1})),
    }, **kw)


# ---------------------------------------------------------------------------------------------- mutation


def test_every_replica_template_of_a_tfjob_gets_the_group_label_and_the_scheduler_even_without_metadata():
    obj = example("tfjob-ps-worker.yaml")
    d, out = mutated(obj)
    specs = out["spec"]["tfReplicaSpecs"]
    for rtype in ("PS", "Worker"):
        assert specs[rtype]["template"]["metadata"]["labels"][LABEL] == "dist-mnist"
        assert specs[rtype]["template"]["spec"]["schedulerName"] == SCHED
    assert out["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    assert mutate(request(out), CONFIG).patch == []  # a second pass changes nothing


def test_a_template_that_names_another_scheduler_keeps_it_with_a_warning():
    obj = tfjob()
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "volcano"
    d, out = mutated(obj)
    assert out["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] == "volcano"
    assert out["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["schedulerName"] == SCHED
    assert any(w.startswith("remove schedulerName 'volcano' from the TFJob replica type Worker, unless that scheduler "
                            "runs the Coscheduling plugin") for w in d.warnings)


@pytest.mark.parametrize("kind,field,types", [
    ("PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker")),
    ("XGBoostJob", "xgbReplicaSpecs", ("Master", "Worker")),
    ("PaddleJob", "paddleReplicaSpecs", ("Master", "Worker")),
    ("JAXJob", "jaxReplicaSpecs", ("Worker",)),
    ("MPIJob", "mpiReplicaSpecs", ("Launcher", "Worker")),
])
def test_each_kubeflow_kind_is_labelled_where_its_operator_keeps_the_pod_templates(kind, field, types):
    obj = job(kind, {t: replica(1 if t in ("Master", "Launcher") else 3, container("main", {"cpu": "1"}))
                     for t in types})
    d, out = mutated(obj)
    for t in types:
        assert out["spec"][field][t]["template"]["metadata"]["labels"][LABEL] == "train"
        assert out["spec"][field][t]["template"]["spec"]["schedulerName"] == SCHED
    v = verdict(out)
    assert v.decision.allowed and v.ensure.owner == f"kubeflow.org/{kind}/train"
    assert v.ensure.min_member == (1 if len(types) == 2 else 0) + 3


def test_a_job_without_the_annotation_is_not_touched():
    obj = tfjob()
    del obj["metadata"]["annotations"]
    assert mutate(request(obj), CONFIG).patch == []
    assert verdict(obj).ensure is None


# ---------------------------------------------------------------------------------------------- minMember


def test_auto_gangs_all_replicas_and_min_resources_add_up_their_requests_with_mixed_units():
    obj = job("TFJob", {
        "PS": replica(2, container("tensorflow", {"cpu": "0.5", "memory": "1G"})),
        "Worker": replica(3, container("tensorflow", {"cpu": "1500m", "memory": "512Mi"})),
    })
    plan = verdict(obj).ensure
    assert plan.min_member == 5 and plan.total_pods == 5
    # cpu: 2 x 0.5 + 3 x 1.5 = 5.5 cores; memory: 2 x 10^9 + 3 x 2^29 = 3610612736 bytes = 3525989Ki exactly
    assert plan.min_resources == {"cpu": "5500m", "memory": "3525989Ki"}


def test_replicas_default_to_one_per_replica_type_as_the_training_operator_defaults_them():
    obj = job("PyTorchJob", {
        "Master": replica(None, container("pytorch", {"cpu": "1"})),
        "Worker": replica(None, container("pytorch", {"cpu": "2"})),
    })
    plan = verdict(obj).ensure
    # the Worker's memory is the init-pytorch container the operator adds (10Mi): its template requests none
    assert plan.min_member == 2 and plan.min_resources == {"cpu": "3", "memory": "10Mi"}


def test_scheduling_policy_min_available_sets_min_member_and_min_resources_count_only_those_pods():
    obj = tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 3}})
    plan = verdict(obj).ensure
    assert plan.min_member == 3
    # equal priorities: the leader-like PS first (2 x 500m, 2 x 1536Mi), then one Worker (2, 4Gi, 1 GPU)
    assert plan.min_resources == {"cpu": "3", "memory": "7Gi", "nvidia.com/gpu": "1"}


def test_min_resources_take_replica_types_in_descending_priority_class_order():
    obj = tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 3}})
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "system-cluster-critical"
    plan = verdict(obj).ensure
    assert plan.min_resources == {"cpu": "6", "memory": "12Gi", "nvidia.com/gpu": "3"}  # three Workers first


def test_priority_classes_admit_cannot_read_are_reported_when_they_decide_min_resources():
    obj = tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 3}})
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "training-high"
    v = verdict(obj)
    assert v.decision.allowed
    (w,) = [w for w in v.decision.warnings if "PriorityClass" in w]
    assert w.startswith("set spec.runPolicy.schedulingPolicy.minResources to be exact: admit cannot read "
                        "PriorityClass training-high")
    assert any("order PS, Worker" in n for n in v.decision.notes)


def test_the_master_counts_before_workers_when_priorities_tie():
    obj = job("PyTorchJob", {
        "Worker": replica(4, container("pytorch", {"cpu": "4"})),
        "Master": replica(1, container("pytorch", {"cpu": "1"})),
    }, runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    # Master 1 + one Worker 4 (its memory, 10Mi, is the operator's init-pytorch container)
    assert verdict(obj).ensure.min_resources == {"cpu": "5", "memory": "10Mi"}


def test_scheduling_policy_min_resources_are_used_as_given():
    obj = tfjob(runPolicy={"schedulingPolicy": {"minResources": {"cpu": "10000m", "memory": "20Gi"}}})
    assert verdict(obj).ensure.min_resources == {"cpu": "10", "memory": "20Gi"}


def test_the_min_resources_none_annotation_leaves_min_resources_out():
    obj = tfjob(annotations={"gang.admit.dev/min-resources": "none"})
    assert "minResources" not in verdict(obj).ensure.pod_group_spec()


def test_an_explicit_min_member_overrides_min_available_with_a_warning():
    obj = tfjob(annotations={"gang.admit.dev/min-member": "4"}, runPolicy={"schedulingPolicy": {"minAvailable": 6}})
    v = verdict(obj)
    assert v.ensure.min_member == 4
    assert any(w.startswith("remove spec.runPolicy.schedulingPolicy.minAvailable=6 or make it equal: annotation "
                            "gang.admit.dev/min-member=4 overrides it") for w in v.decision.warnings)


def test_min_available_above_the_replicas_is_denied_naming_the_field():
    v = verdict(tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 8}}))
    assert not v.decision.allowed and v.decision.code == 403
    msg = v.decision.message
    assert "TFJob ml/train runs 6 pods" in msg and "minMember 8" in msg
    assert "spec.runPolicy.schedulingPolicy.minAvailable=8" in msg


def test_min_available_above_the_replicas_under_auto_is_refused_with_min_available_to_lower_not_the_annotation():
    # min-member is "auto": lowering the annotation cannot help, minAvailable sets the gang
    v = verdict(tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 8}}))
    assert v.decision.message.startswith(
        "Raise the replicas, or lower spec.runPolicy.schedulingPolicy.minAvailable: TFJob ml/train runs 6 pods")


def test_elastic_min_replicas_above_the_workers_under_auto_is_refused_with_min_replicas_to_lower_not_the_annotation():
    obj = job("PyTorchJob", {"Worker": replica(2, container("pytorch", {"cpu": "1"}))},
              elasticPolicy={"minReplicas": 4, "maxReplicas": 8, "rdzvBackend": "c10d"})
    v = verdict(obj)
    assert v.decision.message.startswith(
        "Raise the replicas, or lower spec.elasticPolicy.minReplicas: PyTorchJob ml/train runs 2 pods")


def test_an_annotated_min_member_above_the_replicas_is_denied():
    v = verdict(tfjob(annotations={"gang.admit.dev/min-member": "7"}))
    assert not v.decision.allowed and "annotation gang.admit.dev/min-member=7" in v.decision.message


def test_min_available_zero_is_denied_as_malformed():
    v = verdict(tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 0}}))
    assert not v.decision.allowed and v.decision.code == 400
    assert v.decision.message.startswith("Remove spec.runPolicy.schedulingPolicy.minAvailable to gang all replicas: ")
    assert "has minAvailable=0" in v.decision.message


def test_schedule_timeout_comes_from_the_annotation_else_from_the_scheduling_policy():
    policy = {"schedulingPolicy": {"scheduleTimeoutSeconds": 600}}
    assert verdict(tfjob(runPolicy=policy)).ensure.schedule_timeout_seconds == 600
    obj = tfjob(runPolicy=policy, annotations={"gang.admit.dev/schedule-timeout-seconds": "120"})
    assert verdict(obj).ensure.schedule_timeout_seconds == 120
    assert verdict(tfjob()).ensure.schedule_timeout_seconds is None


# ---------------------------------------------------------------------------------------------- elastic


def elastic_pytorchjob(policy, workers=4, master=False):
    specs = {"Worker": replica(workers, container("pytorch", {"cpu": "4", "memory": "16Gi"},
                                                  {"nvidia.com/gpu": 1}))}
    if master:
        specs["Master"] = replica(1, container("pytorch", {"cpu": "1", "memory": "2Gi"}))
    return job("PyTorchJob", specs, name="elastic", elasticPolicy={"rdzvBackend": "c10d", **policy})


def test_an_elastic_pytorchjob_gangs_min_replicas_workers():
    plan = verdict(example("pytorchjob-elastic.yaml")).ensure
    assert plan.min_member == 2 and plan.total_pods == 4
    assert plan.min_resources == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}


def test_an_elastic_pytorchjob_with_a_master_counts_the_master_too():
    plan = verdict(elastic_pytorchjob({"minReplicas": 2, "maxReplicas": 4}, master=True)).ensure
    assert plan.min_member == 3
    assert plan.min_resources == {"cpu": "9", "memory": "34Gi", "nvidia.com/gpu": "2"}


def test_elastic_defaults_follow_the_training_operator():
    assert verdict(elastic_pytorchjob({"maxReplicas": 3})).ensure.min_member == 3  # min takes max
    assert verdict(elastic_pytorchjob({})).ensure.min_member == 4  # both absent: the Worker replicas


def test_an_elastic_job_whose_min_replicas_exceed_max_replicas_is_denied():
    v = verdict(elastic_pytorchjob({"minReplicas": 5, "maxReplicas": 3}))
    assert not v.decision.allowed and v.decision.code == 400
    assert v.decision.message.startswith("Make spec.elasticPolicy.minReplicas <= maxReplicas: ")
    assert "minReplicas=5 above maxReplicas=3" in v.decision.message


def test_an_elastic_job_with_fewer_workers_than_min_replicas_is_denied():
    v = verdict(elastic_pytorchjob({"minReplicas": 6, "maxReplicas": 8}))
    assert not v.decision.allowed and "spec.elasticPolicy.minReplicas=6" in v.decision.message


# ---------------------------------------------------------------------------------------------- MPIJob


def test_an_mpijob_v2beta1_gangs_launcher_and_workers_with_requests_from_limits():
    plan = verdict(example("mpijob-v2beta1.yaml")).ensure
    assert plan.min_member == 3 and plan.min_resources == {"cpu": "3", "memory": "3Gi"}
    assert plan.owner == "kubeflow.org/MPIJob/pi"


def test_an_mpijob_v1_of_the_training_operator_is_handled_alike():
    obj = example("mpijob-v2beta1.yaml")
    obj["apiVersion"] = "kubeflow.org/v1"
    d, out = mutated(obj)
    assert out["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"][LABEL] == "pi"
    assert verdict(out).ensure.min_member == 3


def test_an_mpijob_waiting_for_workers_gangs_only_the_workers():
    obj = example("mpijob-v2beta1.yaml")
    obj["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    v = verdict(obj)
    assert v.decision.allowed and v.ensure.min_member == 2
    assert v.ensure.min_resources == {"cpu": "2", "memory": "2Gi"}
    assert any("launcher joins the PodGroup later" in n for n in v.decision.notes)


def test_an_mpijob_waiting_for_workers_with_the_launcher_in_its_gang_is_denied():
    obj = example("mpijob-v2beta1.yaml")
    obj["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    obj["metadata"]["annotations"]["gang.admit.dev/min-member"] = "3"
    v = verdict(obj)
    assert not v.decision.allowed and v.decision.code == 403
    assert "WaitForWorkersReady" in v.decision.message and "mpi-operator#608" in v.decision.message
    assert "AtStartup" in v.decision.message


def test_lower_case_replica_types_are_ordered_like_their_camel_case_names():
    obj = job("TFJob", {
        "worker": replica(2, container("tensorflow", {"cpu": "2"})),
        "ps": replica(1, container("tensorflow", {"cpu": "1"})),
    }, runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    assert verdict(obj).ensure.min_resources == {"cpu": "3"}  # ps first, as PS


# ---------------------------------------------------------------------------------------------- bad input


def test_a_job_without_replica_specs_is_denied_naming_the_field():
    obj = tfjob()
    del obj["spec"]["tfReplicaSpecs"]
    for o in (obj, {**obj, "spec": {"tfReplicaSpecs": {}}}):
        v = verdict(o)
        assert not v.decision.allowed and v.decision.code == 400
        assert v.decision.message.startswith("Add spec.tfReplicaSpecs, at least one replica type")
    assert mutate(request(obj), CONFIG).patch == []


def test_a_replica_type_without_a_pod_template_is_denied_naming_it():
    obj = tfjob()
    del obj["spec"]["tfReplicaSpecs"]["PS"]["template"]
    v = verdict(obj)
    assert not v.decision.allowed and v.decision.message.startswith(
        "Add a pod template with containers at spec.tfReplicaSpecs.PS.template.spec: ")


@pytest.mark.parametrize("value", ["two", -1, 1.5, True])
def test_replicas_that_are_not_a_non_negative_integer_are_denied_naming_the_field(value):
    obj = tfjob()
    obj["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = value
    v = verdict(obj)
    assert not v.decision.allowed and v.decision.code == 400
    assert v.decision.message.startswith("Set spec.tfReplicaSpecs.Worker.replicas to a non-negative integer")


def test_zero_replicas_of_a_replica_type_are_allowed_with_a_warning_naming_it():
    v = verdict(tfjob(ps=0))
    assert v.decision.allowed and v.ensure.min_member == 4
    assert any("spec.tfReplicaSpecs.PS.replicas=0" in n for n in v.decision.notes)


def test_a_job_with_no_replicas_at_all_is_allowed_with_warnings():
    v = verdict(tfjob(ps=0, workers=0))
    assert v.decision.allowed and v.ensure.min_member == 1


@pytest.mark.parametrize("value", ["-3", "three", "0", "2.5"])
def test_malformed_min_member_annotations_are_denied(value):
    v = verdict(tfjob(annotations={"gang.admit.dev/min-member": value}))
    assert not v.decision.allowed and v.decision.code == 400 and "gang.admit.dev/min-member" in v.decision.message


def test_a_request_quantity_that_does_not_parse_is_denied_naming_the_container():
    obj = tfjob()
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "4GB"
    v = verdict(obj)
    assert not v.decision.allowed and v.decision.code == 400
    assert "container tensorflow" in v.decision.message and '"4GB"' in v.decision.message


# ---------------------------------------------------------------------------------------------- the operator


def test_when_the_training_operator_gangs_jobs_admit_injects_nothing_and_creates_no_pod_group():
    cfg = Config(kubeflow_gang_by_operator=True)
    obj = tfjob()
    d = mutate(request(obj), cfg)
    assert d.patch == []
    assert any("--kubeflow-gang-by-operator" in n for n in d.notes)
    v = verdict(obj, cfg)
    assert v.decision.allowed and v.ensure is None


def test_with_the_operator_setting_an_mpijob_v2beta1_is_left_to_the_mpi_operator():
    d = mutate(request(example("mpijob-v2beta1.yaml")), Config(kubeflow_gang_by_operator=True))
    assert d.patch == [] and any("the mpi-operator gangs" in n for n in d.notes)


def test_with_the_operator_setting_a_waiting_launcher_the_operator_counts_is_still_refused():
    obj = example("mpijob-v2beta1.yaml")
    obj["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    v = verdict(obj, Config(kubeflow_gang_by_operator=True))  # the mpi-operator's own gang: workers + 1
    assert not v.decision.allowed and "mpi-operator#608" in v.decision.message


def test_when_the_training_operator_gangs_jobs_admit_still_refuses_a_gang_that_cannot_start():
    cfg = Config(kubeflow_gang_by_operator=True)
    v = verdict(tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 9}}), cfg)
    assert not v.decision.allowed and "minMember 9" in v.decision.message


def test_when_the_training_operator_gangs_jobs_admit_points_from_its_annotation_to_min_available():
    cfg = Config(kubeflow_gang_by_operator=True)
    v = verdict(tfjob(annotations={"gang.admit.dev/min-member": "3"}), cfg)
    assert v.decision.allowed
    assert any("set spec.runPolicy.schedulingPolicy.minAvailable instead" in w for w in v.decision.warnings)


def test_removing_the_annotation_from_an_operator_ganged_job_removes_nothing():
    cfg = Config(kubeflow_gang_by_operator=True)
    old = tfjob()
    old["spec"]["tfReplicaSpecs"]["PS"]["template"]["metadata"] = {"labels": {LABEL: "train"}}
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]
    assert mutate(request(new, "UPDATE", old=old), cfg).patch == []


def test_removing_the_annotation_removes_the_labels_admit_put_on_every_template():
    _, old = mutated(tfjob())
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]
    out = jsonpatch.apply_patch(new, mutate(request(new, "UPDATE", old=old), CONFIG).patch)
    for rtype in ("PS", "Worker"):
        assert LABEL not in out["spec"]["tfReplicaSpecs"][rtype]["template"]["metadata"]["labels"]
    assert "gang.admit.dev/managed" not in out["metadata"]["labels"]


async def test_a_pod_group_the_training_operator_made_for_the_same_job_is_left_alone_with_a_warning():
    store = OfflineKube(CONFIG)
    operator_pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "train",
                                 "uid": "0c5a7e2f-1b3d-4e6a-9f8c-2d4b6a8e0c1f", "controller": True}],
        },
        "spec": {"minMember": 6},
    }
    store.add_object(copy.deepcopy(operator_pg))
    d = await Admission(CONFIG, store).validate(request(tfjob()))
    assert d.allowed
    assert any("managed by the TFJob's own operator" in w for w in d.warnings)
    assert store.objects[("scheduling.x-k8s.io", "podgroups", "ml", "train")] == operator_pg


async def test_a_pod_group_of_the_same_name_controlled_by_another_object_is_a_denial_that_names_the_fix():
    store = OfflineKube(CONFIG)
    store.add_object({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml", "ownerReferences": [
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train", "uid": "u", "controller": True}]},
        "spec": {"minMember": 2},
    })
    d = await Admission(CONFIG, store).validate(request(tfjob()))
    assert not d.allowed and d.code == 409 and "gang.admit.dev/pod-group" in d.message


# ---------------------------------------------------------------------------------------------- as the operator builds the pods


def test_a_pytorchjob_with_a_master_counts_the_init_container_the_training_operator_adds_to_each_worker():
    # kubeflow/trainer v1.9.4 pkg/controller.v1/pytorch/initcontainer.go: init-pytorch (requests 50m / 10Mi) on each
    # Worker pod when the job has a Master; a pod requests max(its containers' sum, its largest init container)
    tiny = job("PyTorchJob", {
        "Master": replica(1, container("pytorch", {"cpu": "20m", "memory": "8Mi"})),
        "Worker": replica(2, container("pytorch", {"cpu": "20m", "memory": "8Mi"})),
    })
    assert verdict(tiny).ensure.min_resources == {"cpu": "120m", "memory": "28Mi"}
    no_master = job("PyTorchJob", {"Worker": replica(3, container("pytorch", {"cpu": "20m", "memory": "8Mi"}))})
    assert verdict(no_master).ensure.min_resources == {"cpu": "60m", "memory": "24Mi"}


def test_an_mpijob_v1_counts_the_kubectl_delivery_init_container_of_its_launcher_and_a_v2beta1_one_does_not():
    # v1.9.4 pkg/controller.v1/mpi/mpijob_controller.go newLauncher: kubectl-delivery, 100m / 512Mi / 5Gi ephemeral
    v1 = example("mpijob-v2beta1.yaml")
    v1["apiVersion"] = "kubeflow.org/v1"
    assert verdict(v1).ensure.min_resources == {"cpu": "3", "memory": "3Gi", "ephemeral-storage": "5Gi"}
    assert verdict(example("mpijob-v2beta1.yaml")).ensure.min_resources == {"cpu": "3", "memory": "3Gi"}
