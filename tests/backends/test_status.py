"""``admit status``: the diagnosis of each real situation from objects shaped as kube-apiserver lists them (pods
made by the ReplicaSet controller, PodGroups admit wrote, FailedScheduling events in the wording of kube-scheduler
and scheduler-plugins' Coscheduling), the table and JSON, and the command against the fake API."""

import asyncio
import copy
import datetime as dt
import json
import sys
import uuid

import pytest

from admit.config import Config
from admit.backends.coscheduling.diagnose import diagnose
from admit.backends.diagnose import classify_message, format_table, to_json
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import ROOT

NOW = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.timezone.utc)
LABEL = "scheduling.x-k8s.io/pod-group"


def ts(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_group(name, min_member, namespace="team", min_resources=None, phase=None, owner="apps/Deployment/"):
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "812",
                     "creationTimestamp": ts(600), "labels": {"app.kubernetes.io/managed-by": "admit"},
                     "annotations": {"gang.admit.dev/owner": owner + name}},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 60},
    }
    if min_resources:
        pg["spec"]["minResources"] = min_resources
    if phase:
        pg["status"] = {"phase": phase}
    return pg


def pod(name, group=None, namespace="team", scheduler="scheduler-plugins-scheduler", node=None, age=300,
        labels=None, condition=None, owner="web-7d9f8b6c5d"):
    meta_labels = {"app": "web", "pod-template-hash": "7d9f8b6c5d", **(labels or {})}
    if group:
        meta_labels[LABEL] = group
    status = {"phase": "Running" if node else "Pending", "qosClass": "Burstable"}
    if node:
        status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(age - 1)}]
    elif condition:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": condition, "lastTransitionTime": ts(age - 2)}]
    spec = {"schedulerName": scheduler, "restartPolicy": "Always",
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "generateName": owner + "-", "namespace": namespace, "uid": str(uuid.uuid4()),
                     "creationTimestamp": ts(age), "labels": meta_labels,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                          "uid": str(uuid.uuid4()), "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec,
        "status": status,
    }


def failed_scheduling(pod_obj, message, seconds_ago=10, count=4):
    meta = pod_obj["metadata"]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"],
                     "creationTimestamp": ts(seconds_ago + 60)},
        "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                           "apiVersion": "v1"},
        "reason": "FailedScheduling", "message": message, "type": "Warning", "count": count,
        "source": {"component": "scheduler-plugins-scheduler"},
        "firstTimestamp": ts(seconds_ago + 60), "lastTimestamp": ts(seconds_ago),
        "reportingComponent": "scheduler-plugins-scheduler",
    }


def node(name, cpu="4", memory="16Gi", pods="110"):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                                   "capacity": {"cpu": cpu, "memory": memory, "pods": pods}}}


def deployment(name, annotations, template_labels=None, replicas=3, namespace="team"):
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "generation": 1,
                     "creationTimestamp": ts(700), "annotations": annotations},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, **(template_labels or {})}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}},
    }


def one(rows, group):
    found = [r for r in rows if r.group == group]
    assert len(found) == 1, rows
    return found[0]


INSUFFICIENT = ("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption "
                "victims found for incoming pod.")


def test_a_gang_short_of_capacity_shows_the_schedulers_insufficient_resources_message():
    pods = [pod(f"web-7d9f8b6c5d-{i}", "web", age=180, condition=INSUFFICIENT) for i in range(3)]
    rows = diagnose(pod_groups=[pod_group("web", 3, phase="Pending")], pods=pods,
                    events=[failed_scheduling(pods[0], INSUFFICIENT)], nodes=[node("n1"), node("n2")], now=NOW)
    row = one(rows, "web")
    assert (row.workload, row.min_member, row.pods, row.scheduled, row.pending, row.phase) == (
        "Deployment/web", 3, 3, 0, 3, "Pending")
    assert row.reason == "Insufficient" and "2 Insufficient cpu" in row.message
    assert row.waiting_seconds == 180


def test_pods_whose_pod_group_does_not_exist_are_reported_missing():
    pods = [pod(f"train-{i}", "train", condition="0/2 nodes are available: PodGroup not found.") for i in range(2)]
    row = one(diagnose(pod_groups=[], pods=pods, now=NOW), "train")
    assert row.phase == "Missing" and row.reason == "PodGroupMissing"
    assert "no PodGroup team/train" in row.message and row.workload == "Deployment/web"


def test_a_typo_in_the_group_label_value_names_the_pod_group_that_was_meant():
    pods = [pod(f"train-{i}", "trian") for i in range(3)]
    rows = diagnose(pod_groups=[pod_group("train", 3)], pods=pods, now=NOW)
    assert one(rows, "trian").reason == "PodGroupMissing"
    assert "PodGroup train exists: a typo" in one(rows, "trian").message
    assert one(rows, "train").reason == "NotEnoughPods" and one(rows, "train").pods == 0


def test_a_typo_in_the_group_label_key_leaves_the_pods_out_of_the_gang():
    pods = [pod(f"web-{i}", labels={"scheduling.x-k8s.io/podgroup": "web"}) for i in range(3)]
    row = one(diagnose(pod_groups=[pod_group("web", 3)], pods=pods, now=NOW), "web")
    assert row.reason == "LabelTypo" and row.pods == 0
    assert "carry scheduling.x-k8s.io/podgroup=web, not scheduling.x-k8s.io/pod-group" in row.message
    # without any PodGroup, the pods still get their line
    row = one(diagnose(pod_groups=[], pods=pods, now=NOW), "web")
    assert row.reason == "LabelTypo" and row.pods == 3 and row.pending == 3


def test_pods_on_another_scheduler_are_named_with_the_scheduler_they_use():
    pods = [pod(f"web-{i}", "web", scheduler="default-scheduler", node=f"n{i}") for i in range(3)]
    row = one(diagnose(pod_groups=[pod_group("web", 3)], pods=pods, now=NOW), "web")
    assert row.reason == "WrongScheduler" and row.scheduled == 3
    assert "use schedulerName default-scheduler, not scheduler-plugins-scheduler" in row.message
    assert "scheduled one by one" in row.message


def test_pods_naming_a_scheduler_that_does_not_run_are_said_to_be_untouched():
    pods = [pod(f"web-{i}", "web", scheduler="scheduler-plugin-scheduler") for i in range(3)]
    row = one(diagnose(pod_groups=[pod_group("web", 3)], pods=pods, now=NOW), "web")
    assert row.reason == "WrongScheduler" and row.pending == 3
    assert "no scheduler named scheduler-plugin-scheduler is running" in row.message


def test_min_resources_larger_than_every_node_together_are_reported_with_the_gap():
    pods = [pod(f"big-{i}", "big", condition="0/2 nodes are available: resource gap: map[cpu:{56 0}].")
            for i in range(2)]
    rows = diagnose(pod_groups=[pod_group("big", 2, min_resources={"cpu": "64", "memory": "8Gi"})], pods=pods,
                    nodes=[node("n1"), node("n2")], now=NOW)
    row = one(rows, "big")
    assert row.reason == "MinResourcesTooLarge"
    assert "cpu 64 > 8" in row.message and "memory" not in row.message
    # without the nodes (RBAC forbids listing them) the scheduler's own words are shown
    row = one(diagnose(pod_groups=[pod_group("big", 2, min_resources={"cpu": "64"})], pods=pods, now=NOW), "big")
    assert row.reason == "Insufficient" and "resource gap" in row.message


def test_replicas_below_min_member_show_the_sibling_count_the_scheduler_saw():
    msg = ("0/2 nodes are available: pre-filter pod web-0 cannot find enough sibling pods, current pods number: 2, "
           "minMember of group: 3.")
    pods = [pod(f"web-{i}", "web", condition=msg) for i in range(2)]
    row = one(diagnose(pod_groups=[pod_group("web", 3)], pods=pods, now=NOW), "web")
    assert row.reason == "NotEnoughPods" and "current pods number: 2" in row.message


def test_the_newest_word_of_the_scheduler_wins_between_condition_and_events():
    old = pod("web-0", "web", condition=INSUFFICIENT, age=400)
    late = failed_scheduling(old, "rejected due to timeout after waiting 60s at plugin Coscheduling", seconds_ago=1)
    stale = failed_scheduling(old, INSUFFICIENT, seconds_ago=300)
    row = one(diagnose(pod_groups=[pod_group("web", 1)], pods=[old], events=[stale, late], now=NOW), "web")
    assert row.reason == "Timeout" and "60s at plugin Coscheduling" in row.message


def scheduler_event(pod_obj, message, seconds_ago):
    """A FailedScheduling event as the scheduler-plugins scheduler writes it (events.k8s.io/v1, read through core/v1:
    eventTime set, no lastTimestamp nor count)."""
    ev = failed_scheduling(pod_obj, message, seconds_ago)
    ev["firstTimestamp"] = ev["lastTimestamp"] = None
    ev.pop("count")
    ev["eventTime"] = (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ev["reportingInstance"] = "scheduler-plugins-scheduler-node"
    return ev


def test_the_cause_is_kept_over_the_echoes_coscheduling_writes_after_it():
    # The sequence seen on the real plane for 3 pods of 2.5 CPU on two 4-CPU nodes (messages verbatim).
    pods = [pod(f"big-84cdd65f9b-{s}", "big") for s in ("xz2fh", "mshqp", "twsvs")]
    rejected = "PodGroup team/big gets rejected due to Pod big-84cdd65f9b-xz2fh is unschedulable even after PostFilter"
    events = [
        scheduler_event(pods[0], "0/2 nodes are available: pre-filter pod big-84cdd65f9b-xz2fh cannot find enough "
                        "sibling pods, current pods number: 1, minMember of group: 3. no new claims to deallocate, "
                        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling., " + rejected,
                        3.0),
        scheduler_event(pods[0], "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
                        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod., "
                        + rejected, 2.7),
        scheduler_event(pods[1], "0/1 nodes are available: 1 optimistic rejection in PostFilter.", 2.5),
        scheduler_event(pods[0], "0/2 nodes are available: podGroup team/big failed recently. no new claims to "
                        "deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
                        "scheduling., " + rejected, 2.3),
        scheduler_event(pods[2], "0/1 nodes are available: 1 optimistic rejection in PostFilter.", 2.2),
    ]
    row = one(diagnose(pod_groups=[pod_group("big", 3)], pods=pods, events=events, now=NOW), "big")
    assert row.reason == "Insufficient" and "2 Insufficient cpu" in row.message
    # with only the echoes left (older events expired), no pod states a cause: the group waits for a retry
    row = one(diagnose(pod_groups=[pod_group("big", 3)], pods=pods, events=events[2:], now=NOW), "big")
    assert row.reason == "GroupBackedOff" and '("optimistic rejection in PostFilter", 2s ago)' in row.message


def test_a_gang_whose_pods_have_only_echoes_of_a_backoff_is_reported_with_the_command_that_retries_it():
    # Verbatim from the real plane (podGroupBackoffSeconds 5): one pod of three asked for 5 CPU, the group was
    # rejected and backed off, the pod was replaced by one that fits within the backoff, and nothing retried them.
    pods = [pod(f"train-{i}", "train", owner="train") for i in (0, 1, 3)]
    gone = pod("train-2", "train", owner="train")
    events = [
        scheduler_event(pods[1], "0/1 nodes are available: 1 optimistic rejection in PostFilter.", 40),
        scheduler_event(gone, "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
                        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.", 40),
        scheduler_event(pods[0], "0/1 nodes are available: 1 optimistic rejection in PostFilter.", 40),
        scheduler_event(pods[2], "0/2 nodes are available: podGroup team/train failed recently. no new claims to "
                        "deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
                        "scheduling.", 39),
    ]
    rows = diagnose(pod_groups=[pod_group("train", 3)], pods=pods, events=events, now=NOW)
    row = one(rows, "train")
    assert (row.reason, row.pods, row.pending) == ("GroupBackedOff", 3, 3)
    assert row.message == (
        'every pending pod was last refused only because its group was ("podGroup team/train failed recently", 39s '
        "ago), for no cause of its own; Coscheduling tries them again when the PodGroup changes, kube-scheduler "
        "after 5 minutes at the latest")
    # the PodGroup named with its API group: unambiguous where an older scheduler-plugins CRD is installed too
    assert row.retry == ('kubectl annotate podgroups.scheduling.x-k8s.io train -n team retried-at="$(date +%s)" '
                         "--overwrite")
    # the table ends with the command on a line of its own; JSON has it as "retry"
    assert format_table(rows).splitlines()[-2:] == ["", f"retry team/train now: {row.retry}"]
    assert json.loads(to_json(rows))[0]["retry"] == row.retry


def test_echoes_with_fewer_pods_than_min_member_say_the_gang_waits_for_pods():
    pods = [pod(f"train-{i}", "train", owner="train") for i in (0, 1)]
    events = [scheduler_event(p, "0/1 nodes are available: 1 optimistic rejection in PostFilter.", 5) for p in pods]
    row = one(diagnose(pod_groups=[pod_group("train", 3)], pods=pods, events=events, now=NOW), "train")
    assert row.reason == "NotEnoughPods"


def test_a_misspelt_annotation_says_which_one_was_meant():
    rows = diagnose(pod_groups=[], pods=[], workloads=[deployment("web", {"gang.admit.dev/min-members": "3"})],
                    now=NOW)
    row = one(rows, "web")
    assert row.reason == "AnnotationTypo" and row.message.startswith(
        "rename annotation gang.admit.dev/min-members to gang.admit.dev/min-member")


def test_a_gang_annotation_under_a_misspelt_prefix_says_which_key_admit_reads():
    # Before: gang.admit.io/min-member gave no row at all, and the chart's matchConditions never send such an object
    # to admit, so nothing anywhere said the Deployment is not a gang.
    rows = diagnose(pod_groups=[], pods=[], workloads=[deployment("web", {"gang.admit.io/min-member": "3"})],
                    now=NOW)
    row = one(rows, "web")
    assert row.reason == "AnnotationTypo"
    assert row.message.startswith("rename annotation gang.admit.io/min-member to gang.admit.dev/min-member")
    assert row.message.endswith("Deployment/web is not a gang")


def test_gang_annotations_put_on_the_pod_template_say_where_they_go():
    web = deployment("web", {})
    web["spec"]["template"]["metadata"]["annotations"] = {"gang.admit.dev/min-member": "3"}
    row = one(diagnose(pod_groups=[], pods=[], workloads=[web], now=NOW), "web")
    assert row.reason == "AnnotationTypo"
    assert row.message.startswith("move the gang.admit.dev/ annotations to the Deployment's own metadata.annotations")


def test_a_gang_workload_admit_never_mutated_is_reported():
    rows = diagnose(pod_groups=[], pods=[], workloads=[deployment("web", {"gang.admit.dev/min-member": "3"})],
                    now=NOW)
    row = one(rows, "web")
    assert row.reason == "NotMutated" and row.min_member == 3 and "webhook did not mutate it" in row.message


def test_a_gang_workload_asking_for_another_backend_is_no_coscheduling_gang_mutated_or_not():
    # the other backend's status part shows it (tests/backends/test_third_backend.py); here it would be a false
    # NotMutated: its template never gets the Coscheduling label
    asks = {"gang.admit.dev/min-member": "3", "gang.admit.dev/backend": "volcano"}
    assert diagnose(pod_groups=[], pods=[], workloads=[deployment("web", asks)], now=NOW) == []
    assert diagnose(pod_groups=[], pods=[], workloads=[deployment("web", {"gang.admit.dev/min-member": "3"})],
                    config=Config(gang_backend="volcano"), now=NOW) == []


def test_a_mutated_gang_workload_without_pod_group_yet_is_missing_and_its_replica_set_is_not_a_gang():
    dep = deployment("web", {"gang.admit.dev/min-member": "3"}, {LABEL: "web"})
    rs = copy.deepcopy(dep)
    rs["kind"] = "ReplicaSet"
    rs["metadata"]["name"] = "web-7d9f8b6c5d"
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                          "uid": dep["metadata"]["uid"], "controller": True}]
    rows = diagnose(pod_groups=[], pods=[], workloads=[dep, rs], now=NOW)
    assert [(r.group, r.workload, r.reason) for r in rows] == [("web", "Deployment/web", "PodGroupMissing")]


def test_a_gang_with_every_pod_on_a_node_is_scheduled_and_finished_pods_do_not_count():
    pods = [pod(f"web-{i}", "web", node="n1") for i in range(3)]
    done = pod("web-old", "web")
    done["status"]["phase"] = "Succeeded"
    row = one(diagnose(pod_groups=[pod_group("web", 3, phase="Running")], pods=pods + [done], now=NOW), "web")
    assert (row.reason, row.pods, row.scheduled, row.pending, row.waiting_seconds) == ("Scheduled", 3, 3, 0, None)


def test_events_in_the_events_k8s_io_shape_are_read_too():
    p = pod("web-0", "web")
    ev = failed_scheduling(p, INSUFFICIENT)
    ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": ev["metadata"], "reason": "FailedScheduling",
          "regarding": ev["involvedObject"], "note": INSUFFICIENT, "type": "Warning",
          "eventTime": ts(5) + "", "reportingController": "scheduler-plugins-scheduler"}
    row = one(diagnose(pod_groups=[pod_group("web", 1)], pods=[p], events=[ev], now=NOW), "web")
    assert row.reason == "Insufficient"


def test_messages_are_classified_by_the_phrases_of_kube_scheduler_and_coscheduling():
    assert classify_message(INSUFFICIENT) == "Insufficient"
    assert classify_message("0/3 nodes are available: 3 Too many pods.") == "Insufficient"
    assert classify_message("podGroup team/web failed recently") == "Unschedulable"
    assert classify_message("0/1 nodes are available: 1 node(s) had untolerated taint {x: y}.") == "Unschedulable"


def test_the_table_has_one_aligned_line_per_gang_and_json_has_every_field():
    pods = [pod(f"web-{i}", "web", age=4000, condition=INSUFFICIENT) for i in range(3)]
    rows = diagnose(pod_groups=[pod_group("web", 3), pod_group("db", 2, namespace="data")],
                    pods=pods + [pod("db-0", "db", namespace="data", node="n1"),
                                 pod("db-1", "db", namespace="data", node="n1")], now=NOW)
    lines = format_table(rows).splitlines()
    assert lines[0].split()[:9] == ["NAMESPACE", "GROUP", "WORKLOAD", "MIN", "PODS", "SCHEDULED", "PENDING", "PHASE",
                                    "WAITING"]
    assert len(lines) == 3
    assert lines[1].split()[:9] == ["data", "db", "Deployment/db", "2", "2", "2", "0", "-", "-"]
    assert lines[2].split()[:9] == ["team", "web", "Deployment/web", "3", "3", "0", "3", "-", "66m"]
    assert lines[0].index("GROUP") == lines[1].index("db") == lines[2].index("web")
    assert "Insufficient: 0/2 nodes are available" in lines[2]
    assert format_table(rows[:1], all_namespaces=False).splitlines()[0].startswith("GROUP")
    data = json.loads(to_json(rows))
    assert data[1] == {"namespace": "team", "group": "web", "workload": "Deployment/web", "minMember": 3,
                       "pods": {"total": 3, "scheduled": 0, "pending": 3}, "phase": "-", "waitingSeconds": 4000.0,
                       "reason": "Insufficient", "message": INSUFFICIENT, "retry": None}
    assert format_table([]) == "No gangs found."


def test_a_custom_scheduler_and_legacy_label_are_followed():
    config = Config(scheduler_name="default-scheduler", pod_group_label="pod-group.scheduling.sigs.k8s.io")
    p = pod("web-0", scheduler="default-scheduler", labels={"pod-group.scheduling.sigs.k8s.io": "web"}, node="n1")
    row = one(diagnose(pod_groups=[pod_group("web", 1)], pods=[p], config=config, now=NOW), "web")
    assert row.reason == "Scheduled" and row.pods == 1


async def test_the_status_command_reads_the_api_and_prints_json_and_a_table():
    async with FakeKubeAPI() as fake:
        fake.register("", "v1", "Node", "nodes", namespaced=False)
        fake.put(node("n1"))
        fake.put(pod_group("web", 3))
        stuck = [pod(f"web-7d9f8b6c5d-{i}", "web", condition=INSUFFICIENT) for i in range(3)]
        for p in stuck:
            fake.put(p)
        fake.put(failed_scheduling(stuck[0], INSUFFICIENT))
        fake.put(pod("other-0", "other", namespace="else"))
        cmd = [sys.executable, "-m", "admit.cli", "status", "--api-server", fake.url]
        proc = await asyncio.create_subprocess_exec(*cmd, "-A", "-o", "json", cwd=ROOT,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        rows = {(r["namespace"], r["group"]): r for r in json.loads(out)}
        assert rows[("team", "web")]["reason"] == "Insufficient"
        assert rows[("team", "web")]["pods"] == {"total": 3, "scheduled": 0, "pending": 3}
        assert rows[("else", "other")]["reason"] == "PodGroupMissing"
        proc = await asyncio.create_subprocess_exec(*cmd, "-n", "team", cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        lines = out.decode().splitlines()
        assert lines[0].startswith("GROUP") and len(lines) == 2 and lines[1].startswith("web ")


async def test_the_status_command_says_when_the_api_cannot_be_reached():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "admit.cli", "status", "--api-server", "http://127.0.0.1:9", "--request-timeout", "2",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 1 and b"admit status:" in err and b"Traceback" not in err


async def test_watch_prints_again_only_when_a_gang_changes():
    async with FakeKubeAPI() as fake:
        fake.put(pod_group("web", 2))
        fake.put(pod("web-0", "web", condition=INSUFFICIENT))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "status", "--api-server", fake.url, "-n", "team", "--watch",
            "--interval", "0.2", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async def table() -> list[str]:
                lines = []
                while True:
                    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().rstrip("\n")
                    if not line:
                        return lines
                    lines.append(line)

            first = await table()
            assert first[0].startswith("GROUP") and "NotEnoughPods" not in first[1] and " 1 " in first[1]
            fake.put(pod("web-1", "web", node="n1"))
            second = await table()
            assert second[1].split()[3:6] == ["2", "1", "1"]  # pods, scheduled, pending
            with pytest.raises(TimeoutError):  # nothing changed: nothing printed
                await asyncio.wait_for(proc.stdout.readline(), 1.0)
        finally:
            proc.terminate()
            await proc.wait()


async def test_status_without_the_pod_group_crd_says_which_crd_is_missing_and_the_fix():
    async with FakeKubeAPI() as fake:
        fake.unregister("scheduling.x-k8s.io/v1alpha1", "podgroups")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "status", "--api-server", fake.url, "-A", cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
    assert proc.returncode == 0
    text = err.decode()
    assert "note: PodGroup CRD: the PodGroup CRD podgroups.scheduling.x-k8s.io (scheduling.x-k8s.io/v1alpha1) is not " \
           "installed" in text and "podGroupCRD.install=true" in text
