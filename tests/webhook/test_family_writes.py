"""A family's own writes on the workload (``GangPlan.extra_ops``: a TrainJob's ``spec.runtimePatches`` entry, an Argo
step pod's ``gang.admit.dev/managed: member`` label) are made by the mutating engine for every gang backend, once:
Coscheduling, the Workload API and the test Volcano backend (``tests/backends/volcano.py``). Before, only
Coscheduling's ``join_ops`` appended them, so under another backend a TrainJob's JobSet was never ganged and the
controller never watched an Argo step's members."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import jsonpatch
import pytest
import yaml

from admit.config import Config
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.mutate import mutate
from tests.backends import volcano
from tests.emulations.argo import step_pod
from tests.helpers import EXAMPLES, admission_review, example

BACKENDS = {"coscheduling": Config(),
            "workload-api-v1alpha2": Config(gang_backend="workload-api", workload_api_version="v1alpha2"),
            "workload-api-v1beta1": Config(gang_backend="workload-api", workload_api_version="v1beta1"),
            volcano.NAME: Config(gang_backend=volcano.NAME)}


@pytest.fixture
def config(request: pytest.FixtureRequest) -> Iterator[Config]:
    """Each backend's settings (the Volcano test backend registered while the test runs)."""
    if request.param == volcano.NAME:
        volcano.install()
    yield BACKENDS[request.param]
    if request.param == volcano.NAME:
        volcano.uninstall()


def mutated(obj: dict[str, Any], config: Config) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(object as stored after /mutate, the patch)`` for a CREATE of ``obj``."""
    decision = mutate(parse_review(dumps(admission_review(obj))), config)
    return jsonpatch.apply_patch(obj, decision.patch), decision.patch


def argo_step_pod() -> dict[str, Any]:
    """The first step pod of ``examples/argo-workflow-gang-step.yaml``'s fan-out, as Argo's workflow controller
    creates it (``tests/emulations/argo.py`` ``step_pod``, argo-workflows v4.1.2 ``createWorkflowPod``)."""
    wf = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    wf["metadata"] = {"name": "train-x7k2p", "namespace": "default", "uid": "0b6f1c7e-wf"}
    return step_pod(wf, wf["spec"]["templates"][1], "train-x7k2p[0].train(0:0)(0)", {"rank": "0"})


@pytest.mark.parametrize("config", list(BACKENDS), indirect=True)
def test_a_trainjob_gets_its_runtime_patch_under_every_backend_once(config):
    trainjob = example("trainjob-torch.yaml")
    stored, patch = mutated(trainjob, config)
    assert stored["spec"]["runtimePatches"] == [{
        "manager": "gang.admit.dev/admit",
        "trainingRuntimeSpec": {"template": {"metadata": {"annotations": {"gang.admit.dev/min-member": "auto"}}}}}]
    assert [op["path"] for op in patch].count("/spec/runtimePatches") == 1
    assert stored["metadata"]["labels"] == {"gang.admit.dev/managed": "true"}
    assert mutated(stored, config)[1] == []  # the second pass (reinvocationPolicy IfNeeded) writes nothing


# Every backend that can lower a step's group: under the others (the Workload API's v1alpha2, a backend without the
# merge_shared hook such as the test Volcano one) a step pod is refused (tests/backends/test_members_follow.py)
@pytest.mark.parametrize("config", ["coscheduling", "workload-api-v1beta1"], indirect=True)
def test_an_argo_step_pod_is_labelled_a_member_under_every_backend(config):
    stored, patch = mutated(argo_step_pod(), config)
    assert stored["metadata"]["labels"]["gang.admit.dev/managed"] == "member"
    assert [op["path"] for op in patch].count("/metadata/labels/gang.admit.dev~1managed") == 1
    assert stored["metadata"]["labels"]["workflows.argoproj.io/workflow"] == "train-x7k2p"
