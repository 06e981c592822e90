"""Conformance per operator, end to end on the fake: the user's annotated object goes in; the operator's emulation
(tests/emulations) makes its objects through the admission chain (admit's webhooks as the chart registers
them, the operator's own in process); the Kubernetes controllers make the pods through admission. Checked, as a
user would: the operator's webhooks accepted everything admit wrote, every pod joins the gang admit made, the gang
can form (minMember no more than the pods that exist), one gang object per gang, and nothing the user wrote lost."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admit.config import Config
from tests.emulations import jobset as jobset_operator
from tests.emulations import lws as lws_operator
from tests.emulations import trainer as trainer_operator
from tests.manifest_seeds import lost_fields
from tests.operators.conftest import operator_cluster
from tests.operators.test_jobset import MULTISLICE, jobset
from tests.operators.test_lws import leaderworkerset
from tests.operators.test_trainer import DEEPSPEED, INITIALIZERS, TORCH, trainjob
from tests.emulations.trainer import runtime_manifest

CONFIG = Config()
PG_LABEL = CONFIG.pod_group_label
ADMIT_HOOKS = ("workloads.mutate.admit.dev", "pods.mutate.admit.dev", "workloads.validate.admit.dev",
               "pods.validate.admit.dev", "scale.validate.admit.dev")
# JobSet's pod webhook refuses followers until their leader is bound, by design ("expected, transient error")
TRANSIENT = ("follower pod node selector not set", "leader pod not yet scheduled")


def install_trainer(fake):
    jobset_operator.install(fake)
    return trainer_operator.install(fake)


async def bind_leaders(cluster) -> None:
    """kube-scheduler binding every unbound pod whose followers wait for it (a JobSet's index-0 pods, LWS leaders)."""
    for pod in cluster.pods():
        annotations = pod["metadata"].get("annotations") or {}
        labels = pod["metadata"].get("labels") or {}
        leader = annotations.get("batch.kubernetes.io/job-completion-index") == "0" or \
            labels.get(lws_operator.WORKER_INDEX) == "0"
        if leader and not pod["spec"].get("nodeName"):
            pod["spec"]["nodeName"] = f"node-{pod['metadata']['name']}"
            cluster.fake.put(pod)
    await cluster.fake.settle()


def assert_conforms(cluster, user_object: dict[str, Any], expected_pods: int) -> None:
    fake = cluster.fake
    # the operator's webhooks accepted everything admit wrote (and nothing else refused an operator's write)
    refused = [(name, r.get("name"), (resp.get("status") or {}).get("message")) for name, r, resp in
               fake.admission.calls if not resp.get("allowed") and name not in ADMIT_HOOKS
               and not any(t in str((resp.get("status") or {}).get("message")) for t in TRANSIENT)]
    assert refused == []
    assert [e for e in cluster.operator.errors] == []
    failures = [e for c in fake.controllers for e in c.errors if not any(t in e[2] for t in TRANSIENT)]
    assert failures == []
    # every pod joins a gang admit made, and each gang can form with the pods that exist
    pods = cluster.pods()
    assert len(pods) == expected_pods
    groups = cluster.pod_groups()
    members: dict[str, int] = {}
    for pod in pods:
        group = pod["metadata"]["labels"].get(PG_LABEL)
        assert group in groups, pod["metadata"]["name"]
        assert pod["spec"].get("schedulerName") == CONFIG.scheduler_name
        members[group] = members.get(group, 0) + 1
    for name, pg in groups.items():
        assert pg["metadata"]["annotations"]["gang.admit.dev/owner"]  # admit's, not an operator's
        assert pg["spec"]["minMember"] <= members.get(name, 0), name
    # one gang object per gang: no second PodGroup (an operator's, Volcano's) for the same pods
    volcano = fake.objects("podgroups", "default", "scheduling.volcano.sh/v1beta1") \
        if any(rt.group == "scheduling.volcano.sh" for rt in fake._registry.values()) else []  # noqa: SLF001
    assert volcano == [] and len(groups) == len(members)
    # nothing the user wrote was lost
    api_version, kind = user_object["apiVersion"], user_object["kind"]
    stored = fake.get(api_version, kind, "default", user_object["metadata"]["name"])
    assert lost_fields(user_object, stored, CONFIG) == []


@pytest.mark.parametrize("version", ["0.10", "0.9"])
@pytest.mark.parametrize("annotations", [{}, {lws_operator.EXCLUSIVE: "cloud.google.com/gke-nodepool"}],
                         ids=["plain", "exclusive"])
async def test_leaderworkerset_conforms(aiohttp_server, version, annotations):
    lws = leaderworkerset("auto", annotations=annotations)
    async with operator_cluster(aiohttp_server, lws_operator.install, version=version) as cluster:
        await cluster.create(copy.deepcopy(lws))
        await bind_leaders(cluster)
        assert_conforms(cluster, lws, expected_pods=8)


@pytest.mark.parametrize("annotations", [{}, MULTISLICE], ids=["plain", "exclusive"])
async def test_jobset_conforms(aiohttp_server, annotations):
    js = jobset("auto", annotations=annotations)
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        await cluster.create(copy.deepcopy(js))
        await bind_leaders(cluster)
        assert_conforms(cluster, js, expected_pods=8)


@pytest.mark.parametrize("runtime, job, pods", [
    (TORCH, trainjob("torch-distributed", num_nodes=4), 4),
    (DEEPSPEED, trainjob("deepspeed-distributed", num_nodes=3, min_member="2"), 2),
    (runtime_manifest("torchtune-llama", INITIALIZERS), trainjob("torchtune-llama", num_nodes=2), None),
], ids=["torch", "deepspeed", "initializers"])
async def test_trainer_conforms(aiohttp_server, runtime, job, pods):
    async with operator_cluster(aiohttp_server, install_trainer) as cluster:
        cluster.fake.put(runtime)
        await cluster.create(copy.deepcopy(job))
        if pods is None:  # the initializers run alone first, outside the gang; the trainer Job waits for them
            assert all(PG_LABEL not in p["metadata"]["labels"] for p in cluster.pods())
            assert cluster.pod_groups()["llm"]["spec"]["minMember"] == 2
            return
        assert_conforms(cluster, job, expected_pods=pods)
