"""The backend interface seen from the framework: a family says "below minMember" as data, and admit renders it
once with the scheduler of the gang's backend; every backend is found by name in the registries."""

from __future__ import annotations

import pytest

from admit.backends import registry, runtime
from admit.config import BUILTIN_BACKENDS, Config
from admit.families import ray
from admit.families.kinds import RESOLVERS
from admit.gang.plan import BelowMinMember, GangError, parse_gang_annotations
from tests.helpers import example

NATIVE = Config(gang_backend="workload-api", workload_api_version="v1beta1")


def small_ray_cluster() -> dict:
    """KubeRay's autoscaler sample (examples/raycluster-autoscaler.yaml: 1 head + 3 workers) with the autoscaler off,
    asking for a gang of 5."""
    obj = example("raycluster-autoscaler.yaml")
    obj["metadata"]["annotations"]["gang.admit.dev/min-member"] = "5"
    obj["spec"]["enableInTreeAutoscaling"] = False
    return obj


def test_a_family_resolver_says_below_min_member_as_data_without_naming_a_scheduler():
    obj = small_ray_cluster()
    ann = parse_gang_annotations(obj["metadata"]["annotations"], Config())
    with pytest.raises(BelowMinMember) as raised:
        ray.KINDS[0].resolve(obj, ann, Config(), "ray", "CREATE")
    e = raised.value
    assert (e.ref, e.total, e.counted, e.min_member, e.backend) == (
        "RayCluster ray/raycluster-autoscaler", 4, "1 head + 3 workers", 5, None)


@pytest.mark.parametrize("config, scheduler", [(Config(), "the Coscheduling plugin"),
                                               (NATIVE, "kube-scheduler's GangScheduling plugin")],
                         ids=["coscheduling", "workload-api"])
def test_the_kind_registry_renders_below_min_member_once_with_the_backends_scheduler(config, scheduler):
    obj = small_ray_cluster()
    ann = parse_gang_annotations(obj["metadata"]["annotations"], config)
    with pytest.raises(GangError) as raised:
        RESOLVERS[("ray.io", "RayCluster")](obj, ann, config, "ray", "CREATE")
    assert not isinstance(raised.value, BelowMinMember)
    assert raised.value.code == 403
    assert raised.value.message == (
        "Raise the replicas (and minReplicas) of spec.workerGroupSpecs[*] so that head and workers reach 5, or lower "
        "gang.admit.dev/min-member: RayCluster ray/raycluster-autoscaler runs 4 pods (1 head + 3 workers) but its gang "
        f"needs minMember 5 (gang.admit.dev/min-member=5), so {scheduler} would keep every pod Pending forever")


def test_every_built_in_backend_has_both_halves_under_its_name():
    # admit/config.py BUILTIN_BACKENDS: what a Config built without the registry knows; every folder's BACKEND joins it
    assert set(registry.BACKENDS) == set(runtime.APIS) == set(BUILTIN_BACKENDS)
    assert all(backend.name == name for name, backend in registry.BACKENDS.items())
    assert [t.kind for t in registry.backend_of("workload-api").object_types(NATIVE)] == ["Workload", "PodGroup"]
    assert [(t.group, t.version, t.plural) for t in registry.backend_of("coscheduling").object_types(Config())] == [
        ("scheduling.x-k8s.io", "v1alpha1", "podgroups")]


def test_the_cross_backend_suites_run_every_registered_backend():
    # they set each backend up with its own Config (the workload-api backend once per served version), so they list
    # their configurations by hand: a backend added to admit/backends/registry.py fails here until it joins each
    from tests.backends import test_backends, test_backends_http
    from tests.families import test_invariants

    suites = {
        "tests/backends/test_backends.py BACKENDS": test_backends.BACKENDS.args[1],
        "tests/backends/test_backends_http.py BACKENDS": [config for config, _ in test_backends_http.BACKENDS.values()],
        "tests/families/test_invariants.py CONFIGS": list(test_invariants.CONFIGS.values()),
    }
    for suite, configs in suites.items():
        assert {c.gang_backend for c in configs} == set(registry.BACKENDS), f"{suite} lacks a registered backend"
    # the controller's suite runs the test Volcano backend besides the registered ones
    from tests.controller import test_every_backend

    assert set(registry.BACKENDS) <= set(test_every_backend.BACKENDS), "test_every_backend.py BACKENDS lacks one"
    assert set(registry.BACKENDS) <= {c.gang_backend for c in test_every_backend.DECIDING.values()}, \
        "test_every_backend.py DECIDING lacks a registered backend"
