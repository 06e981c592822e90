"""The operators' later writes on a real control plane, posted as each operator sends them (the operators do not run
here; their CRDs are in ``tests/real/crds``): the JobSet controller's suspend, resume and ``failurePolicy`` restart
(kubernetes-sigs/jobset v0.12.0), Kueue's stop and start of a JobSet and of a TrainJob's own ``runtimePatches`` entry
(v0.19.2), a GitOps server-side re-apply of a JobSet and of a running SparkApplication, and the removal of the gang
annotations of a submitted SparkApplication. Each write is built by the same code as the fake tier's emulations
(``tests/emulations``: ``jobset.construct_job``, ``jobset.resumed_job``, ``kueue.merge``/``kueue.restore``, the
manifest as ``gitops`` re-applies it); kube-apiserver calls admit's webhooks as the chart registers them,
kube-controller-manager's Job controller makes the pods and the scheduler-plugins scheduler binds them. What is
checked is what a user sees: every write allowed (or refused with its fix), the pods made after it in one gang that
binds, the PodGroup as it was."""

from __future__ import annotations

import copy

import pytest

from tests.emulations import kueue, trainer
from tests.emulations.jobset import construct_job, resumed_job
from tests.real.support import bound, clear_start_time, container, pods, update, wait_for
from tests.real.test_real_after_admission import finish
from tests.support.plane import PlaneError

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER = "scheduler-plugins-scheduler"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"


def jobset(ns: str, name: str = "slices", **spec) -> dict:
    """A gang JobSet of 2 Jobs of 2 pods (minMember 4), as a user writes it."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"gang.admit.dev/min-member": "auto",
                                         "gang.admit.dev/schedule-timeout-seconds": "5"}},
            "spec": {**spec, "replicatedJobs": [{"name": "slice", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": {
                    "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [container()]}}}}}]}}


def create_jobs(cp, ns: str, js: dict) -> list[dict]:
    """The JobSet controller's ``reconcileReplicatedJobs``: each Job of the stored JobSet created
    (``constructJob``)."""
    rjob = js["spec"]["replicatedJobs"][0]
    return [cp.rest("POST", JOBS.format(ns=ns), body=construct_job(js, rjob, i)) for i in range(rjob["replicas"])]


def jobs(cp, ns: str) -> list[dict]:
    """The namespace's Jobs, each whole as the JobSet controller's client holds it (a list's items carry no
    ``apiVersion`` and ``kind``)."""
    return [{"apiVersion": "batch/v1", "kind": "Job", **j} for j in cp.rest("GET", JOBS.format(ns=ns))["items"]]


def gang_bound(cp, ns: str, name: str, count: int = 4) -> list[dict]:
    """Wait until ``count`` live pods labelled for PodGroup ``name`` are bound (not terminating), and return them."""
    return wait_for(lambda: (lambda p: p if len(p) == count else None)(bound(pods(cp, ns, f"{LABEL}={name}"))),
                    what=f"{count} pods of PodGroup {name} bound together")


def pod_group_spec(cp, ns: str, name: str) -> dict | None:
    pg = cp.rest("GET", f"{PG.format(ns=ns)}/{name}", ok=(404,))
    return None if pg is None else pg["spec"]


@pytest.mark.needs("coscheduling")
def test_a_jobset_its_user_suspends_and_resumes_gets_its_pods_back_in_one_gang_that_binds(plane, ns):
    cp = plane.cp
    js = cp.rest("POST", JOBSETS.format(ns=ns), body=jobset(ns))
    before = pod_group_spec(cp, ns, "slices")
    assert before is not None and before["minMember"] == 4
    create_jobs(cp, ns, js)
    gang_bound(cp, ns, "slices")
    # the user suspends; the JobSet controller's suspendJobs: every active Job updated with spec.suspend true
    cp.rest("PATCH", f"{JOBSETS.format(ns=ns)}/slices", body={"spec": {"suspend": True}}, content_type=MERGE)
    # (each an Update of the Job as the controller's cache holds it: the Job controller writes the running Job's
    # status meanwhile, and a Conflict is retried)
    for job in jobs(cp, ns):
        update(cp, f"{JOBS.format(ns=ns)}/{job['metadata']['name']}", lambda j: j["spec"].update(suspend=True))
    wait_for(lambda: not pods(cp, ns, f"{LABEL}=slices"), what="the suspended Jobs' pods deleted")
    # the user resumes; resumeJobsIfNecessary: each Job updated by resumeJob (its startTime cleared first, then the
    # pod template merged and unsuspended)
    js = cp.rest("PATCH", f"{JOBSETS.format(ns=ns)}/slices", body={"spec": {"suspend": False}}, content_type=MERGE)
    for job in jobs(cp, ns):
        path = f"{JOBS.format(ns=ns)}/{job['metadata']['name']}"
        clear_start_time(cp, path)
        update(cp, path, lambda j: resumed_job(j, js))
    again = gang_bound(cp, ns, "slices")
    assert {p["spec"]["schedulerName"] for p in again} == {SCHEDULER}
    assert pod_group_spec(cp, ns, "slices") == before


@pytest.mark.needs("coscheduling")
def test_a_jobset_restarted_by_its_failure_policy_gets_the_new_attempts_pods_in_one_gang_that_binds(plane, ns):
    cp = plane.cp
    js = cp.rest("POST", JOBSETS.format(ns=ns), body=jobset(
        ns, failurePolicy={"maxRestarts": 1, "restartStrategy": "BlockingRecreate"}))
    before = pod_group_spec(cp, ns, "slices")
    create_jobs(cp, ns, js)
    first = gang_bound(cp, ns, "slices")
    # the kubelet reports one pod failed; the Job controller fails its Job (backoffLimit 0)
    finish(cp, ns, first[0], "Failed")
    wait_for(lambda: any(c.get("type") == "Failed" and c.get("status") == "True"
                         for j in cp.rest("GET", JOBS.format(ns=ns))["items"]
                         for c in (j.get("status") or {}).get("conditions") or []), what="a Job failed")
    # executeFailurePolicy (RestartJobSet): status.restarts + 1; the old attempt's Jobs deleted (foreground), and
    # under BlockingRecreate re-created once all are gone, with restart-attempt 1
    js = cp.rest("GET", f"{JOBSETS.format(ns=ns)}/slices")
    js["status"] = {"restarts": 1, "restartsCountTowardsMax": 1}
    js = cp.rest("PUT", f"{JOBSETS.format(ns=ns)}/slices/status", body=js)
    for job in cp.rest("GET", JOBS.format(ns=ns))["items"]:
        cp.rest("DELETE", f"{JOBS.format(ns=ns)}/{job['metadata']['name']}",
                body={"propagationPolicy": "Foreground"})
    wait_for(lambda: not cp.rest("GET", JOBS.format(ns=ns))["items"] and not pods(cp, ns, f"{LABEL}=slices"),
             what="the old attempt's Jobs and pods gone")
    made = create_jobs(cp, ns, js)
    assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for j in made} == {"1"}
    gang_bound(cp, ns, "slices")
    assert pod_group_spec(cp, ns, "slices") == before


@pytest.mark.needs("apiserver")
def test_kueue_starting_stopping_and_starting_a_jobset_again_is_allowed_and_keeps_admits_marks(plane, ns):
    cp = plane.cp
    path = f"{JOBSETS.format(ns=ns)}/slices"
    written = jobset(ns, suspend=True)  # Kueue's webhook creates a queued job suspended
    written["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
    created = cp.rest("POST", JOBSETS.format(ns=ns), body=written)
    before = pod_group_spec(cp, ns, "slices")
    template = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"]["labels"][LABEL] == "slices" and template["spec"]["schedulerName"] == SCHEDULER

    def start() -> dict:
        """startJob: RunWithPodSetsInfo, a merge patch (the replicatedJobs list whole, as JSON merge patch sends a
        list) of spec.suspend false and each pod set's info merged in (podset.Merge)."""
        obj = cp.rest("GET", path)
        for pod_set, tmpl in kueue.jobset_pod_sets(obj):
            kueue.merge(tmpl, kueue._info(pod_set))  # noqa: SLF001 - the admission's PodSetInfo
        return cp.rest("PATCH", path, content_type=MERGE,
                       body={"spec": {"suspend": False, "replicatedJobs": obj["spec"]["replicatedJobs"]}})

    started = start()
    tmpl = started["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert tmpl["metadata"]["labels"] == {LABEL: "slices", kueue.POD_SET_LABEL: "slice"}
    assert tmpl["spec"]["schedulerName"] == SCHEDULER and tmpl["spec"]["nodeSelector"] == kueue.FLAVOR["nodeLabels"]
    # stopJob: suspended, the pod templates restored from the Workload (the JobSet as stored after its CREATE)
    obj = cp.rest("GET", path)
    originals = dict(kueue.jobset_pod_sets(copy.deepcopy(created)))
    for pod_set, tmpl in kueue.jobset_pod_sets(obj):
        kueue.restore(tmpl, originals[pod_set])
    stopped = cp.rest("PATCH", path, content_type=MERGE,
                      body={"spec": {"suspend": True, "replicatedJobs": obj["spec"]["replicatedJobs"]}})
    assert stopped["spec"]["replicatedJobs"] == created["spec"]["replicatedJobs"]
    assert start()["spec"]["suspend"] is False
    assert pod_group_spec(cp, ns, "slices") == before


@pytest.mark.needs("apiserver")
def test_a_gitops_server_side_re_apply_of_a_gang_jobset_changes_nothing(plane, ns):
    cp = plane.cp
    path = f"{JOBSETS.format(ns=ns)}/slices"
    manifest = jobset(ns)
    query = {"fieldManager": "argocd-controller", "force": "true"}  # Argo CD ServerSideApply=true
    created = cp.rest("PATCH", path, body=manifest, query=query, content_type=APPLY)
    assert created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"][LABEL] == \
        "slices"
    before = pod_group_spec(cp, ns, "slices")
    again = cp.rest("PATCH", path, body=manifest, query=query, content_type=APPLY)
    for part in ("spec", "metadata.labels", "metadata.annotations", "metadata.generation"):
        first, *rest = part.split(".")
        now, then = again[first], created[first]
        for key in rest:
            now, then = now.get(key), then.get(key)
        assert now == then, part
    assert pod_group_spec(cp, ns, "slices") == before


def spark_app(ns: str) -> dict:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "nightly", "namespace": ns, "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.0", "sparkVersion": "3.5.0",
                     "mainClass": "org.apache.spark.examples.SparkPi",
                     "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                     "driver": {"cores": 1, "memory": "512m"},
                     "executor": {"cores": 1, "memory": "512m", "instances": 1}}}


def running(cp, path: str, stored: dict) -> None:
    """The spark-operator's status write once it submitted the application (``updateSparkApplicationStatus``)."""
    stored["status"] = {"applicationState": {"state": "RUNNING"}}
    cp.rest("PUT", f"{path}/status", body=stored)


@pytest.mark.needs("apiserver")
def test_a_gitops_server_side_re_apply_of_a_running_spark_application_changes_nothing_so_it_is_not_re_run(
        plane, ns):
    # the spark-operator re-runs an application on any change of its spec (event_filter.go EventFilter.Update)
    cp = plane.cp
    path = f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications/nightly"
    query = {"fieldManager": "argocd-controller", "force": "true"}
    created = cp.rest("PATCH", path, body=spark_app(ns), query=query, content_type=APPLY)
    assert created["spec"]["driver"]["labels"][LABEL] == "nightly"
    running(cp, path, created)
    again = cp.rest("PATCH", path, body=spark_app(ns), query=query, content_type=APPLY)
    assert again["spec"] == created["spec"]
    assert again["metadata"]["generation"] == created["metadata"]["generation"]


@pytest.mark.needs("apiserver")
def test_removing_the_gang_annotations_of_a_submitted_spark_application_is_refused_with_the_fix(plane, ns):
    cp = plane.cp
    apps = f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications"
    stored = cp.rest("POST", apps, body=spark_app(ns))
    assert stored["spec"]["driver"]["labels"][LABEL] == "nightly"
    running(cp, f"{apps}/nightly", stored)
    with pytest.raises(PlaneError) as refused:
        cp.rest("PATCH", f"{apps}/nightly", content_type=MERGE,
                body={"metadata": {"annotations": {"gang.admit.dev/min-member": None}}})
    assert refused.value.status == 403
    message = str(refused.value)
    assert "Remove the gang annotations in an update that changes the spec anyway" in message
    kept = cp.rest("GET", f"{apps}/nightly")
    assert kept["metadata"]["annotations"]["gang.admit.dev/min-member"] == "auto"
    assert kept["spec"]["driver"]["labels"][LABEL] == "nightly"


@pytest.mark.needs("apiserver")
def test_kueue_filling_its_own_runtime_patch_starting_stopping_and_restarting_a_queued_trainjob_is_allowed(plane, ns):
    # Kueue v0.19.2 trainjob_controller.go: RunWithPodSetsInfo fills the entry its webhook appended
    # (trainjob_webhook.go Default) while the TrainJob is suspended, then startJob unsuspends; Stop suspends and
    # RestorePodSetsInfo clears it. admit judges only its own entry, which every write leaves as it was.
    cp = plane.cp
    runtime = copy.deepcopy(trainer.TORCH_RUNTIME)
    runtime["metadata"]["name"] = f"torch-{ns}"  # cluster-scoped: one per test namespace
    runtimes = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
    cp.rest("POST", runtimes, body=runtime)
    try:
        path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/llm"
        written = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": "llm", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                                "annotations": {"gang.admit.dev/min-member": "auto"}},
                   "spec": {"runtimeRef": {"name": runtime["metadata"]["name"]}, "trainer": {"numNodes": 3},
                            "suspend": True, "runtimePatches": [copy.deepcopy(trainer.KUEUE_ENTRY)]}}
        created = cp.rest("POST", path.rsplit("/", 1)[0], body=written)
        managers = [p["manager"] for p in created["spec"]["runtimePatches"]]
        assert managers == [trainer.KUEUE_MANAGER, "gang.admit.dev/admit"]
        admits = created["spec"]["runtimePatches"][1]

        def kueue_writes(fill: bool, suspend: bool) -> dict:
            """Kueue's merge patch of spec (runtimePatches is a list: sent whole): its entry filled with each pod
            set's info (the podset label, the flavor's nodeSelector and tolerations) or cleared, and suspend."""
            patches = cp.rest("GET", path)["spec"]["runtimePatches"]
            spec = patches[0]["trainingRuntimeSpec"]["template"]["spec"]
            if fill:
                spec["replicatedJobs"] = [{"name": "node", "template": {"spec": {"template": {
                    "metadata": {"labels": {kueue.POD_SET_LABEL: "node"}},
                    "spec": {"nodeSelector": dict(kueue.FLAVOR["nodeLabels"]),
                             "tolerations": copy.deepcopy(kueue.FLAVOR["tolerations"])}}}}}]
            else:
                spec.pop("replicatedJobs", None)
            return cp.rest("PATCH", path, content_type=MERGE,
                           body={"spec": {"suspend": suspend, "runtimePatches": patches}})

        for fill, suspend in ((True, True), (True, False), (True, True), (False, True), (True, True),
                              (True, False)):  # admit, start; stop, restore; admit, start again
            stored = kueue_writes(fill, suspend)
            assert stored["spec"]["suspend"] is suspend
            assert stored["spec"]["runtimePatches"][1] == admits
    finally:
        cp.rest("DELETE", f"{runtimes}/{runtime['metadata']['name']}")
