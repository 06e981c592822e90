"""Later writes on a real control plane: a running workload annotated, as each operator's own rule asks (the
operators do not run here; their CRDs are in ``tests/real/crds``, and the status an operator would write is written
through the status subresource). kube-apiserver calls admit's webhooks as the chart registers them; what is checked
is what a user sees: the write refused with the fix, or allowed leaving alone what the operator keeps immutable."""

from __future__ import annotations

import pytest

from tests.real.support import container
from tests.support.plane import PlaneError

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
MERGE = "application/merge-patch+json"
ANNOTATE = {"metadata": {"annotations": {"gang.admit.dev/min-member": "auto"}}}


def spark_app(ns):
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "nightly", "namespace": ns},
            "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.0", "sparkVersion": "3.5.0",
                     "mainClass": "org.apache.spark.examples.SparkPi",
                     "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                     "driver": {"cores": 1, "memory": "512m"}, "executor": {"cores": 1, "memory": "512m",
                                                                             "instances": 1}}}


@pytest.mark.needs("apiserver")
def test_annotating_a_submitted_spark_application_is_refused_with_the_fix_and_a_spec_change_takes_it(plane, ns):
    cp = plane.cp
    apps = f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications"
    stored = cp.rest("POST", apps, body=spark_app(ns))
    stored["status"] = {"applicationState": {"state": "RUNNING"}}  # what the spark-operator writes once submitted
    cp.rest("PUT", f"{apps}/nightly/status", body=stored)
    with pytest.raises(PlaneError) as refused:
        cp.rest("PATCH", f"{apps}/nightly", body=ANNOTATE, content_type=MERGE)
    assert refused.value.status == 403 and "runs the application again" in str(refused.value)
    assert "gang.admit.dev/min-member" not in (cp.rest("GET", f"{apps}/nightly")["metadata"].get("annotations") or {})
    # the fix: with a spec change the operator re-runs it anyway, and that run is ganged
    patched = cp.rest("PATCH", f"{apps}/nightly", content_type=MERGE,
                      body={**ANNOTATE, "spec": {"image": "spark:3.5.1"}})
    assert patched["spec"]["driver"]["labels"]["scheduling.x-k8s.io/pod-group"] == "nightly"


@pytest.mark.needs("apiserver")
def test_annotating_a_running_trainjob_is_refused_by_admit_with_the_fix(plane, ns):
    cp = plane.cp
    trainjobs = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"
    cp.rest("POST", trainjobs, body={"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                     "metadata": {"name": "llm", "namespace": ns},
                                     "spec": {"runtimeRef": {"name": "torch-distributed"},
                                              "trainer": {"numNodes": 2}}})
    with pytest.raises(PlaneError) as refused:
        cp.rest("PATCH", f"{trainjobs}/llm", body=ANNOTATE, content_type=MERGE)
    assert refused.value.status == 403 and "Delete the TrainJob and create it again" in str(refused.value)
    assert "runtimePatches" not in cp.rest("GET", f"{trainjobs}/llm")["spec"]


@pytest.mark.needs("apiserver")
def test_annotating_a_running_jobset_leaves_its_immutable_templates_alone(plane, ns):
    cp = plane.cp
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
    stored = cp.rest("POST", jobsets, body={
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "slices", "namespace": ns},
        "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2, "template": {"spec": {
            "parallelism": 2, "completions": 2, "template": {"spec": {"restartPolicy": "Never",
                                                                      "containers": [container()]}}}}}]}})
    patched = cp.rest("PATCH", f"{jobsets}/slices", body=ANNOTATE, content_type=MERGE)
    assert patched["spec"]["replicatedJobs"] == stored["spec"]["replicatedJobs"]
    assert cp.rest("GET", f"{PG.format(ns=ns)}/slices", ok=(404,)) is None


@pytest.mark.needs("apiserver")
def test_an_lws_whose_surge_groups_names_pass_63_characters_is_refused_at_creation(plane, ns):
    cp = plane.cp
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "v" * 50, "namespace": ns, "annotations": {"gang.admit.dev/min-member": "auto"}},
           "spec": {"replicas": 10, "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {
               "maxSurge": 1, "maxUnavailable": 1}},
               "leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": {"containers": [container()]}}}}}
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets", body=lws)
    assert refused.value.status == 400 and "spec.replicas 10 + maxSurge 1" in str(refused.value)
