"""Gang backends are found through entry points, the built-ins as any installed package's: a package that declares
``admit.gang_backends`` and ``admit.gang_backend_apis`` entry points (simulated here by a ``.dist-info`` folder on
``sys.path``, which ``importlib.metadata`` reads as an installed distribution) is selected by ``--gang-backend``,
``--extra-gang-backend`` and the ``gang.admit.dev/backend`` annotation, and gangs a Deployment with no admit module
changed."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import jsonpatch
import pytest

from admit.backends import registry, runtime
from admit.backends.ensure import ensure
from admit.cli import build_parser, config_from_args
from admit.config import BUILTIN_ENTRY_POINTS
from admit.webhook.admissionreview import Decision, dumps, parse_review
from admit.webhook.mutate import mutate
from admit.webhook.validate import validate
from tests.backends import volcano
from tests.backends.test_ensure import Store
from tests.helpers import ROOT, admission_review

ENTRY_POINTS = f"""\
[admit.gang_backends]
{volcano.NAME} = tests.backends.volcano:BACKEND

[admit.gang_backend_apis]
{volcano.NAME} = tests.backends.volcano:API
"""


@pytest.fixture
def installed(tmp_path: Path):
    """The Volcano test backend as an installed package ``admit-volcano-test`` (its metadata only: the module is
    already importable), with the registries read again; after the test, uninstalled and read again."""
    dist = tmp_path / "admit_volcano_test-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: admit-volcano-test\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    registry.reload()
    runtime.reload()
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        importlib.invalidate_caches()
        registry.reload()
        runtime.reload()


def deployment(backend: str | None = None) -> dict:
    annotations = {"gang.admit.dev/min-member": "3"}
    if backend is not None:
        annotations["gang.admit.dev/backend"] = backend
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team", "annotations": annotations},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


async def admitted(obj: dict, config) -> tuple[dict, Decision, Store]:
    """``/mutate`` then ``/validate`` and the admission engine's writes, as kube-apiserver calls admit."""
    review = admission_review(obj)
    answer = mutate(parse_review(dumps(review)), config)
    assert answer.allowed, answer.message
    mutated = jsonpatch.apply_patch(obj, answer.patch)
    verdict = validate(parse_review(dumps(admission_review(mutated))), config)
    assert verdict.decision.allowed and verdict.ensure is not None, verdict.decision.message
    store = Store()
    await ensure(store, verdict.ensure, config, verdict.decision, False, False)
    return mutated, verdict.decision, store


def test_the_built_in_backends_are_declared_as_entry_points_as_a_third_party_declares_its_own():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert project == BUILTIN_ENTRY_POINTS
    assert set(registry.BACKENDS) == set(project[registry.GROUP]) and set(runtime.APIS) == set(project[runtime.GROUP])


def test_an_installed_backend_is_found_by_its_entry_points_beside_the_built_ins(installed):
    assert list(registry.BACKENDS) == ["coscheduling", volcano.NAME, "workload-api"]
    assert registry.BACKENDS[volcano.NAME] is volcano.BACKEND and runtime.APIS[volcano.NAME] is volcano.API


async def test_gang_backend_selects_an_installed_backend_and_its_objects_are_made(installed):
    args = build_parser().parse_args(["serve", "--gang-backend", volcano.NAME])
    config = config_from_args(args)
    assert config.gang_backend == volcano.NAME
    mutated, decision, store = await admitted(deployment(), config)
    assert mutated["spec"]["template"]["metadata"]["annotations"] == {volcano.GROUP_NAME_ANNOTATION: "web"}
    assert mutated["spec"]["template"]["spec"]["schedulerName"] == volcano.SCHEDULER
    assert store.calls == [("create", "PodGroup")] and decision.pod_groups[0]["apiVersion"] == (
        f"{volcano.GROUP}/{volcano.VERSION}")


async def test_the_backend_annotation_selects_an_installed_backend_enabled_by_extra_gang_backend(installed):
    config = config_from_args(build_parser().parse_args(["serve", "--extra-gang-backend", volcano.NAME]))
    assert config.gang_backend == "coscheduling" and volcano.NAME in config.allowed_backends
    moved, _, moved_store = await admitted(deployment(volcano.NAME), config)
    stays, _, stays_store = await admitted(deployment(), config)
    assert moved["spec"]["template"]["spec"]["schedulerName"] == volcano.SCHEDULER
    assert moved_store.objects[("PodGroup", "web")]["apiVersion"] == f"{volcano.GROUP}/{volcano.VERSION}"
    assert stays["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "web"
    assert stays_store.objects[("PodGroup", "web")]["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"


def test_once_the_package_is_gone_its_name_is_refused_by_the_flag():
    assert volcano.NAME not in registry.BACKENDS
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--gang-backend", volcano.NAME])
