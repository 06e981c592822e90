"""Rolling updates that move running pods into a gang (admit/webhook/rollout.py): refused when the rollout could never form
the gang, with the fixes; allowed when it can (found on the real control plane: annotating a running Deployment)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from admit.config import Config
from admit.webhook.mutate import mutate
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.rollout import resolve_int_or_percent
from admit.webhook.validate import validate
from tests.helpers import admission_review, example

CONFIG = Config()


def running_deployment(replicas: int = 3) -> dict:
    """A Deployment as kube-apiserver stores it (strategy defaulted), running pods without a gang."""
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {}
    dep["spec"]["replicas"] = replicas
    dep["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    return dep


def annotate(old: dict, min_member: str = "3", **spec) -> tuple[dict, dict]:
    """(the UPDATE after admit's mutation, the old object), as the two webhooks see them."""
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["gang.admit.dev/min-member"] = min_member
    new["spec"].update(spec)
    patch = mutate(parse_review(dumps(admission_review(new, "UPDATE", old=old))), CONFIG).patch
    return jsonpatch.apply_patch(new, patch), old


def verdict(new, old):
    return validate(parse_review(dumps(admission_review(new, "UPDATE", old=old))), CONFIG)


def test_annotating_a_running_deployment_whose_rollout_cannot_form_the_gang_is_refused_with_the_fixes():
    v = verdict(*annotate(running_deployment()))
    assert not v.decision.allowed and v.decision.code == 403 and v.ensure is None
    msg = v.decision.message
    assert "Deployment default/pause runs 3 pods outside gang pause" in msg
    assert "at most 1 new pod at a time (maxSurge 1 + maxUnavailable 0)" in msg
    assert msg.startswith("Set spec.strategy.type: Recreate (the old pods go first, then all new ones start together), "
                          "or spec.strategy.rollingUpdate.maxSurge to at least 3 (e.g. 100%), or scale it to 0 ")


@pytest.mark.parametrize("strategy", [
    {"type": "Recreate"},
    {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}},
    {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}},
])
def test_annotating_a_running_deployment_is_allowed_when_its_rollout_starts_the_whole_gang_at_once(strategy):
    v = verdict(*annotate(running_deployment(), strategy=strategy))
    assert v.decision.allowed and v.ensure is not None


def test_a_paused_deployment_or_a_gang_of_one_or_a_rollout_within_the_same_gang_is_allowed():
    assert verdict(*annotate(running_deployment(), replicas=3, min_member="1")).decision.allowed
    stopped = running_deployment()
    stopped["spec"]["replicas"] = 0
    assert verdict(*annotate(stopped, replicas=3)).decision.allowed
    ganged, _ = annotate(running_deployment(), strategy={"type": "Recreate"})
    changed = copy.deepcopy(ganged)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.k8s.io/pause:3.10"
    changed["spec"]["strategy"] = {"type": "RollingUpdate",
                                   "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    assert verdict(changed, ganged).decision.allowed  # the old pods are in the gang: they count as siblings


def test_renaming_the_group_of_a_running_gang_is_a_move_into_another_gang():
    ganged, _ = annotate(running_deployment(), strategy={"type": "Recreate"})
    ganged["spec"]["strategy"] = running_deployment()["spec"]["strategy"]
    renamed = copy.deepcopy(ganged)
    renamed["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "other"
    del renamed["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
    patch = mutate(parse_review(dumps(admission_review(renamed, "UPDATE", old=ganged))), CONFIG).patch
    v = verdict(jsonpatch.apply_patch(renamed, patch), ganged)
    assert not v.decision.allowed and "outside gang other" in v.decision.message


def test_a_statefulset_rolling_update_into_a_gang_is_refused_and_on_delete_is_allowed():
    sts = example("etcd-statefulset.yaml")
    sts["metadata"]["annotations"] = {}
    sts["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    new, old = annotate(sts, min_member="3")
    v = verdict(new, old)
    assert not v.decision.allowed and "at most 1 new pod at a time (maxUnavailable 1)" in v.decision.message
    assert "spec.updateStrategy.type: OnDelete" in v.decision.message
    sts["spec"]["updateStrategy"] = {"type": "OnDelete"}
    assert verdict(*annotate(sts, min_member="3")).decision.allowed


@pytest.mark.parametrize("value,total,up,want", [
    ("25%", 3, True, 1), ("25%", 3, False, 0), ("100%", 3, True, 3), (2, 3, True, 2), ("50%", 5, False, 2),
    ("x%", 3, True, 7), (None, 3, True, 7), (True, 3, True, 7), ("3", 10, True, 3),
])
def test_int_or_percent_values_resolve_as_kubernetes_rounds_them(value, total, up, want):
    assert resolve_int_or_percent(value, total, up, 7) == want


def parallel_statefulset(strategy: dict) -> dict:
    """A running StatefulSet as kube-apiserver 1.37 stores it with the StatefulSetRecreateStrategy gate on (KEP-3541:
    ``Recreate`` carries no ``rollingUpdate``), not yet in a gang."""
    sts = example("etcd-statefulset.yaml")
    sts["metadata"]["annotations"] = {}
    sts["spec"]["updateStrategy"] = strategy
    return sts


def test_annotating_a_running_statefulset_with_the_recreate_update_strategy_is_allowed_like_a_deployment_recreate():
    # Kubernetes 1.37 (alpha, kubernetes#137187): Recreate deletes every old pod, then creates all new ones, so the
    # gang forms at once; before, admit read it as a rolling update of one pod at a time and refused it.
    v = verdict(*annotate(parallel_statefulset({"type": "Recreate"}), min_member="3"))
    assert v.decision.allowed and v.ensure is not None and v.ensure.min_member == 3


def test_a_statefulset_rolling_update_into_a_gang_offers_the_recreate_update_strategy_in_its_fix():
    v = verdict(*annotate(parallel_statefulset({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                          min_member="3"))
    assert not v.decision.allowed
    msg = v.decision.message
    assert msg.startswith("Set spec.updateStrategy.type: Recreate (Kubernetes 1.37 and later, feature gate "
                          "StatefulSetRecreateStrategy")
    assert "spec.updateStrategy.type: OnDelete" in msg and "scale it to 0" in msg
