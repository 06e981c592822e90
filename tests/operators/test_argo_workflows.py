"""Argo Workflows step pods end to end on the fake API: a Workflow whose fan-out step's template carries the gang
annotations, its step pods made as Argo's workflow controller makes them (``tests/emulations/argo.py``) through
admission, then a member failing and Argo retrying it while the others have succeeded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from admit.config import Config
from tests.emulations import argo
from tests.helpers import EXAMPLES
from tests.operator_stack import PG, gang_problems, operator_cluster, pod_groups_of

CONFIG = Config()
NS = "default"


def workflow() -> dict[str, Any]:
    """``examples/argo-workflow-gang-step.yaml`` with its generated name fixed."""
    obj = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    obj["metadata"] = {"name": "train-x7k2p", "namespace": NS}
    return obj


async def test_the_step_pods_of_an_argo_fan_out_are_one_gang_named_by_their_template_annotations(aiohttp_server):
    # Before: each step pod got "annotate the controller (Deployment, Job, ...)", which no one can for a Workflow.
    async with operator_cluster(aiohttp_server, CONFIG, argo.install) as (fake, op, _):
        await op.submit(workflow())
        pods = await op.run_step(NS, "train-x7k2p", "train")
        assert len(pods) == 3 and op.errors == []
        assert gang_problems(fake, NS, pods, CONFIG) == []
        assert pod_groups_of(fake, NS) == ["train-x7k2p-train"]
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"] == {
            "minMember": 3, "minResources": {"cpu": "3", "memory": "6Gi"}, "scheduleTimeoutSeconds": 120}
        assert not any("annotate the controller" in w for _, _, w in fake.admission.warnings)


async def test_a_retried_step_pod_joins_a_gang_sized_to_the_members_still_to_run(aiohttp_server):
    # Before: the shared group kept minMember 3 after two members succeeded, and the retried third waited forever
    # (kube-scheduler no longer counts finished pods; argo-workflows#734, volcano#2720).
    async with operator_cluster(aiohttp_server, CONFIG, argo.install) as (fake, op, _):
        await op.submit(workflow())
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        op.finish(first, "Succeeded")
        op.finish(second, "Succeeded")
        op.finish(third, "Failed")
        retried = await op.retry(third)
        assert retried is not None and op.errors == []
        assert retried["metadata"]["annotations"][argo.NODE_NAME].endswith("(1)")
        assert retried["metadata"]["labels"][CONFIG.pod_group_label] == "train-x7k2p-train"
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"] == {
            "minMember": 1, "minResources": {"cpu": "1", "memory": "2Gi"}, "scheduleTimeoutSeconds": 120}
        # a second failure of the retried member leaves the size at the one member still to run
        op.finish(retried, "Failed")
        again = await op.retry(retried)
        assert again is not None and fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minMember"] == 1
