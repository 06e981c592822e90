"""``admit status`` on native gangs (scheduling.k8s.io Workload API): pods with ``spec.schedulingGroup`` against the
PodGroup's ``minCount``, its condition under both names (``PodGroupScheduled`` in v1alpha2, 1.36;
``PodGroupInitiallyScheduled`` in v1beta1, 1.37), priority and scheduler mismatches, a PodGroup missing and a
Workload API not served. Objects are shaped as kube-apiserver 1.36 / 1.37 store them (priority admission has
resolved ``priority`` on pods and PodGroups)."""

import asyncio
import json
import sys
import uuid

import pytest
from kubernetes_asyncio import client as k8s

from admit.config import Config
from admit.backends.coscheduling.diagnose import diagnose
from admit.backends.diagnose import format_table
from admit.backends.workload_api.diagnose import diagnose_native
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import ROOT, eventually, example
from tests.backends.test_status import NOW, deployment, ts
from tests.webhook_stack import fake_cluster

NATIVE = Config(gang_backend="workload-api", workload_api_version="v1beta1")
GROUP = "podgroup.scheduling.k8s.io/trainer"


def native_pod_group(version="v1beta1", min_count=4, priority_class=None, priority=None, condition=None,
                     name="trainer", namespace="team"):
    """A PodGroup as admit writes it and kube-apiserver stores it (defaulted disruptionMode, finalizer)."""
    if version == "v1alpha2":
        ref = {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": "gang"}}}
        disruption = "Pod"
    else:
        ref = {"workloadRef": {"workloadName": name, "templateName": "gang"}}
        disruption = {"single": {}}
    spec = {**ref, "schedulingPolicy": {"gang": {"minCount": min_count}}, "disruptionMode": disruption}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if priority is not None:
        spec["priority"] = priority
        spec["preemptionPolicy"] = "PreemptLowerPriority"
    pg = {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
          "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "4711",
                       "creationTimestamp": ts(600), "finalizers": ["scheduling.k8s.io/podgroup-protection"],
                       "labels": {"app.kubernetes.io/managed-by": "admit"},
                       "annotations": {"gang.admit.dev/owner": f"apps/Deployment/{name}"}},
          "spec": spec}
    if condition:
        pg["status"] = {"conditions": [{"type": condition[0], "status": condition[1], "reason": condition[2],
                                        "message": condition[3], "lastTransitionTime": ts(30),
                                        "observedGeneration": 1}]}
    return pg


def native_pod(i, group="trainer", priority_class=None, priority=0, node=None, scheduler="default-scheduler",
               namespace="team"):
    """A pod the ReplicaSet controller made from an admit-mutated template; pending pods held at PreEnqueue have no
    PodScheduled condition (kubernetes#141900)."""
    spec = {"schedulingGroup": {"podGroupName": group}, "schedulerName": scheduler, "priority": priority,
            "preemptionPolicy": "PreemptLowerPriority", "restartPolicy": "Always",
            "containers": [{"name": "trainer", "image": "ghcr.io/example/trainer:2.1",
                            "resources": {"requests": {"cpu": "1"}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"trainer-6c9d5b7f48-{i}", "namespace": namespace, "uid": str(uuid.uuid4()),
                         "creationTimestamp": ts(120), "labels": {"app": "trainer", "pod-template-hash": "6c9d5b7f48"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "trainer-6c9d5b7f48", "uid": str(uuid.uuid4()),
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": spec,
            "status": {"phase": "Running" if node else "Pending", "qosClass": "Burstable"}}


def native_deployment(backend_annotation=True):
    annotations = {"gang.admit.dev/min-member": "4"}
    if backend_annotation:
        annotations["gang.admit.dev/backend"] = "workload-api"
    dep = deployment("trainer", annotations, replicas=4)
    dep["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "trainer"}
    return dep


def one(rows):
    found = [r for r in rows if r.group == GROUP]
    assert len(found) == 1, rows
    return found[0]


def test_a_gang_with_fewer_pods_than_min_count_says_they_wait_silently_at_pre_enqueue():
    rows = diagnose_native(pod_groups=[native_pod_group()], pods=[native_pod(i) for i in range(2)],
                           workloads=[native_deployment()], served="v1beta1", config=NATIVE, now=NOW)
    row = one(rows)
    assert (row.reason, row.min_member, row.pods, row.pending) == ("NotEnoughPods", 4, 2, 2)
    assert "PreEnqueue" in row.message and "2 more" in row.message
    assert row.workload == "Deployment/trainer"


@pytest.mark.parametrize("version,condition", [("v1alpha2", "PodGroupScheduled"),
                                               ("v1beta1", "PodGroupInitiallyScheduled")])
def test_the_pod_group_condition_is_read_under_the_name_of_either_version(version, condition):
    message = "0/3 nodes are available: 3 Insufficient cpu."
    pg = native_pod_group(version, condition=(condition, "False", "Unschedulable", message))
    row = one(diagnose_native(pod_groups=[pg], pods=[native_pod(i) for i in range(4)], served=version,
                              config=NATIVE, now=NOW))
    assert row.reason == "Unschedulable" and message in row.message and condition in row.message
    assert row.phase == f"{condition.removeprefix('PodGroup')}=False"


def test_a_scheduled_gang_under_the_v1beta1_condition_is_scheduled():
    pg = native_pod_group(condition=("PodGroupInitiallyScheduled", "True", "Scheduled", ""))
    row = one(diagnose_native(pod_groups=[pg], pods=[native_pod(i, node=f"n{i}") for i in range(4)],
                              served="v1beta1", config=NATIVE, now=NOW))
    assert (row.reason, row.scheduled, row.pending) == ("Scheduled", 4, 0)


def test_pods_whose_priority_differs_from_the_pod_group_are_reported_with_both_values():
    pg = native_pod_group(priority=0)  # made by an admit that did not carry the class: priority 0
    pods = [native_pod(i, priority_class="team-high", priority=100000) for i in range(4)]
    row = one(diagnose_native(pod_groups=[pg], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert row.reason == "PriorityMismatch"
    assert "'team-high'" in row.message and "100000 vs 0" in row.message
    assert "same priority as the pod group's priority" in row.message


def test_a_pod_group_that_carries_its_pods_class_is_not_a_priority_mismatch():
    pg = native_pod_group(priority_class="team-high", priority=100000)
    pods = [native_pod(i, priority_class="team-high", priority=100000) for i in range(2)]
    row = one(diagnose_native(pod_groups=[pg], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert row.reason == "NotEnoughPods"


def test_pods_naming_two_schedulers_are_a_scheduler_mismatch():
    pods = [native_pod(0, scheduler="my-scheduler")] + [native_pod(i) for i in range(1, 4)]
    row = one(diagnose_native(pod_groups=[native_pod_group()], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert row.reason == "SchedulerMismatch" and "my-scheduler" in row.message


def test_pods_naming_a_pod_group_that_does_not_exist_are_reported_missing():
    row = one(diagnose_native(pod_groups=[], pods=[native_pod(i) for i in range(4)], served="v1beta1",
                              config=NATIVE, now=NOW))
    assert row.reason == "PodGroupMissing" and row.phase == "Missing" and "for ever" in row.message


def test_a_workload_asking_for_the_workload_api_on_a_cluster_without_it_is_reported():
    dep = deployment("trainer", {"gang.admit.dev/min-member": "4", "gang.admit.dev/backend": "workload-api"})
    rows = diagnose_native(pod_groups=[], pods=[], workloads=[dep], served="",
                           config=Config(extra_gang_backends=frozenset({"workload-api"})), now=NOW)
    assert [r.reason for r in rows] == ["WorkloadAPINotServed"]
    assert "GenericWorkload" in rows[0].message
    # and the Coscheduling diagnosis does not call it an unmutated Coscheduling gang
    assert diagnose(pod_groups=[], pods=[], workloads=[dep], config=Config(), now=NOW) == []


def test_native_rows_sit_in_the_same_table_as_coscheduling_gangs():
    rows = diagnose_native(pod_groups=[native_pod_group()], pods=[native_pod(i) for i in range(2)],
                           served="v1beta1", config=NATIVE, now=NOW)
    text = format_table(rows)
    assert GROUP in text and "NotEnoughPods: 2 pod(s) name the PodGroup, minCount is 4" in text


async def test_the_status_command_shows_a_waiting_native_gang_with_its_reason_against_the_fake():
    async with FakeKubeAPI(workload_api="v1beta1") as fake:
        fake.put(native_deployment())
        fake.put(native_pod_group())
        for i in range(2):
            fake.put(native_pod(i))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "status", "--api-server", fake.url, "-A", "-o", "json", cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    rows = {r["group"]: r for r in json.loads(out)}
    assert set(rows) == {GROUP}, rows
    row = rows[GROUP]
    assert row["reason"] == "NotEnoughPods" and row["minMember"] == 4
    assert row["pods"] == {"total": 2, "scheduled": 0, "pending": 2}
    assert "PreEnqueue" in row["message"]


# ------------------------------------------------------------------------------ the Job controller's own PodGroups


def plain_job(name="report"):
    """A Job nobody gangs: one pod (the kind every cluster runs by the hundred)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "report", "image": "busybox:1.36", "command": ["true"]}]}}}}


async def status_json(fake, *flags):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "admit.cli", "status", "--api-server", fake.url, "-A", "-o", "json", *flags, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out), err.decode()


@pytest.mark.parametrize("version,left_out", [
    ("v1beta1", "left out: 2 Basic PodGroup(s)"),  # 1.37: a Basic Workload and PodGroup for every Job
    ("v1alpha2", "left out: 1 PodGroup(s) whose pods all go to the Coscheduling gang"),  # 1.36: Indexed gang Jobs
])
async def test_the_job_controllers_own_pod_groups_of_every_job_are_no_native_gang_rows_in_status(
        aiohttp_server, version, left_out):
    # WorkloadWithJob (KEP-5547; pkg/controller/job/job_scheduling_manager.go): the Job controller makes a Workload
    # and PodGroup for every Job (1.37: Basic unless spec.scheduling says gang; 1.36: a gang for an Indexed Job with
    # completions == parallelism), Jobs ganged by admit's Coscheduling backend included. admit status listed each as a
    # native gang with no filter: a duplicate row for the Coscheduling gang and a "gang" for every plain Job. The
    # native part runs where admit may use the workload-api backend (here beside Coscheduling, as the chart's
    # extraGangBackends sets it).
    async with fake_cluster(aiohttp_server, Config(), job_controller=True, workload_with_job=True,
                            workload_api=version) as (fake, user):
        batch = k8s.BatchV1Api(user)
        await batch.create_namespaced_job("ml", example("training-job.yaml"))
        await batch.create_namespaced_job("ml", plain_job())
        await eventually(lambda: len(fake.objects("pods", "ml")) == 5)
        made = fake.objects("podgroups", "ml", api_version=f"scheduling.k8s.io/{version}")
        assert len(made) == (2 if version == "v1beta1" else 1)  # the emulation did make them
        rows, err = await status_json(fake, "--extra-gang-backend", "workload-api")
        only_coscheduling, quiet = await status_json(fake)
    assert [r["group"] for r in rows] == ["allreduce"], rows  # the Coscheduling gang, once
    assert left_out in err
    # an admit running Coscheduling alone, where no workload asks for workload-api, does not look at native objects
    assert [r["group"] for r in only_coscheduling] == ["allreduce"] and "left out: " not in quiet, quiet
    assert "scheduling.k8s.io" not in quiet, quiet


# ------------------------------------------------------------------------------ a gang that broke after it was scheduled


def scheduled_group():
    return native_pod_group(condition=("PodGroupInitiallyScheduled", "True", "Scheduled", ""))


def test_a_scheduled_gang_whose_replacement_pod_waits_below_min_count_is_below_min_count_not_healthy():
    # kubernetes#136334: PodGroupInitiallyScheduled is terminal. A node lost one of four running pods; the ReplicaSet
    # made a replacement that cannot be placed. Before, the row read as a gang still waiting to start.
    pods = [native_pod(i, node=f"n{i}") for i in range(3)] + [native_pod(3)]
    row = one(diagnose_native(pod_groups=[scheduled_group()], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert (row.reason, row.scheduled, row.pending, row.phase) == ("BelowMinCount", 3, 1, "InitiallyScheduled=True")
    assert "scheduled once, now 3 pod(s) on nodes, minCount 4, 1 replacement(s) pending" in row.message
    assert "PodGroupInitiallyScheduled stays True (kubernetes#136334)" in row.message
    assert "restart the whole gang" in row.message


def test_a_scheduled_gang_that_lost_a_pod_with_no_replacement_yet_is_below_min_count_not_scheduled():
    pods = [native_pod(i, node=f"n{i}") for i in range(3)]
    row = one(diagnose_native(pod_groups=[scheduled_group()], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert row.reason == "BelowMinCount"  # before: "Scheduled", a healthy gang


def test_a_job_gang_whose_indexes_finished_and_one_replacement_waits_is_below_min_count():
    # kubernetes#142330: three indexes succeeded, one failed; the scheduler does not count finished pods.
    pods = [native_pod(i, node=f"n{i}") for i in range(4)]
    for pod in pods[:3]:
        pod["status"]["phase"] = "Succeeded"
    pods[3]["status"]["phase"] = "Failed"
    pods.append(native_pod(4))
    row = one(diagnose_native(pod_groups=[scheduled_group()], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert (row.reason, row.scheduled, row.pending) == ("BelowMinCount", 0, 1)


def test_a_gang_whose_pods_finish_one_by_one_is_not_below_min_count():
    pods = [native_pod(i, node=f"n{i}") for i in range(4)]
    for pod in pods[:3]:
        pod["status"]["phase"] = "Succeeded"
    row = one(diagnose_native(pod_groups=[scheduled_group()], pods=pods, served="v1beta1", config=NATIVE, now=NOW))
    assert row.reason == "Scheduled"
