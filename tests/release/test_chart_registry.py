"""The chart, its RBAC, its values schema, the fake API's resources and the fake's admission rules agree with the
kind registry (``admit/families/kinds.py``) and with every registered gang backend (``admit/backends/registry.py``
``BACKENDS``: its name, its objects ``GangBackend.object_types``): a kind or a backend added in one place and
forgotten in another fails here, naming the line that is missing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from admit.backends.registry import BACKENDS
from admit.config import BUILTIN_BACKENDS, Config
from admit.families.kinds import SCALABLE, WATCHED_RESOURCES, WEBHOOK_RESOURCES
from admit.testing.fake_kube import FakeKubeAPI
from admit.testing.fake_kube.admission import AdmissionChain
from tests.backends import volcano
from tests.release.test_chart import CHART, adopting_resources, container, rbac_rules, render, rule_set, webhooks

pytest.importorskip("helm_python")

CU = ("CREATE", "UPDATE")
RULES = "charts/admit/templates/_helpers.tpl (admit.workloadRules)"
RBAC = "charts/admit/templates/rbac.yaml"
SCHEMA = "charts/admit/values.schema.json"


def every_backend() -> tuple[dict[str, Any], Config]:
    """The chart's values and the Config that enable every registered backend: the default ``gangBackend`` and all
    others as ``extraGangBackends`` (read when the test runs, so a backend registered by then is in), the objects of
    one the chart does not know (installed in the image) granted through ``rbac.extraRules`` as its docs say."""
    others = [name for name in BACKENDS if name != Config().gang_backend]
    config = Config(extra_gang_backends=frozenset(others), workload_api_version="v1beta1")
    verbs = ["get", "list", "watch", "create", "patch", "update", "delete"]
    extra = [{"apiGroups": [t.group], "resources": [t.plural], "verbs": verbs}
             for name in others if name not in BUILTIN_BACKENDS for t in BACKENDS[name].object_types(config)]
    return {"config": {"extraGangBackends": others}, "rbac": {"create": True, "extraRules": extra}}, config


def registry_resources(registry: dict[tuple[str, str], tuple[tuple[str, str], ...]] = WEBHOOK_RESOURCES
                       ) -> set[tuple[str, str, str]]:
    """``(group, version, plural)`` of every kind of ``registry``: the kinds the webhooks are called for (default),
    or ``WATCHED_RESOURCES``, the ones the controller watches (a CronJob is only the former)."""
    return {(group, version, plural) for (group, _), versions in registry.items() for version, plural in versions}


def backend_objects(config: Config) -> dict[str, set[tuple[str, str]]]:
    """``backend -> {(group, plural)}`` of the objects each enabled backend writes."""
    return {name: {(t.group, t.plural) for t in BACKENDS[name].object_types(config)}
            for name in sorted(config.allowed_backends)}


def missing(want: set[Any], have: set[Any]) -> list[str]:
    return sorted(map(str, want - have))


def test_the_workload_webhooks_match_every_registered_kind_and_nothing_else():
    objects = render()
    for kind, hook in webhooks(objects):
        rules = rule_set(hook)
        if not {(g, v, r) for g, v, r, _ in rules} & registry_resources():
            continue  # the Pod webhook and the scale/HPA webhook: the tests below and test_chart.py
        want = {(g, v, r, op) for g, v, r in registry_resources() for op in CU}
        assert not missing(want, rules), f"{RULES} lacks, for {kind} {hook['name']}: {missing(want, rules)}"
        extra = {(g, v, r) for g, v, r, _ in rules if not r.endswith("/scale")} - registry_resources() - {
            ("", "v1", "pods")}
        assert not extra, f"{RULES} matches {sorted(extra)}, which no WorkloadKind in admit/families registers"


def test_the_validating_webhook_checks_the_scale_of_every_scalable_kind():
    objects = render()
    rules = set().union(*(rule_set(h) for k, h in webhooks(objects) if k == "ValidatingWebhookConfiguration"))
    want = {(group, version, f"{plural}/scale", "UPDATE") for (group, plural), (_, version, _) in SCALABLE.items()}
    assert not missing(want, rules), f"{RULES} lacks the scale rules {missing(want, rules)}"


def test_the_values_schema_accepts_every_registered_backend_by_name_and_names_the_built_ins():
    config = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]["properties"]
    pattern = config["gangBackend"]["pattern"]
    assert config["extraGangBackends"]["items"]["pattern"] == pattern  # an installed backend's name: no closed list
    for name in BACKENDS:
        assert re.fullmatch(pattern, name), f"{SCHEMA} config.gangBackend refuses registered backend {name!r}"
    for name in BUILTIN_BACKENDS:
        assert name in config["gangBackend"]["description"], f"{SCHEMA} config.gangBackend does not name {name}"
    with pytest.raises(Exception, match="gangBackend"):
        render({"config": {"gangBackend": "Volcano Test"}})


def test_a_backend_installed_in_the_image_is_passed_to_admit_and_its_objects_granted_through_extra_rules():
    volcano.install()
    try:
        values, config = every_backend()
        objects = render(values)
    finally:
        volcano.uninstall()
    assert f"--extra-gang-backend={volcano.NAME}" in container(objects)["args"]
    grants = rbac_rules(objects, "ClusterRole")
    want = {(volcano.GROUP, volcano.PLURAL, verb, ()) for verb in ("get", "list", "watch", "create", "patch", "delete")}
    assert not missing(want, grants), f"{RBAC} lacks rbac.extraRules' grants {missing(want, grants)}"


@pytest.mark.parametrize("every", [False, True], ids=["default", "every-backend"])
def test_rbac_grants_the_controller_every_registered_kind_and_every_enabled_backends_objects(every):
    values, config = every_backend() if every else ({}, Config())
    grants = rbac_rules(render(values), "ClusterRole")
    want = {(group, plural, verb, ()) for group, _, plural in registry_resources(WATCHED_RESOURCES)
            for verb in ("list", "watch")}
    assert not missing(want, grants), f"{RBAC} lacks the reads {missing(want, grants)}"
    for name, objects in backend_objects(config).items():
        verbs = ("get", "list", "watch", "create", "patch", "delete")
        want = {(group, plural, verb, ()) for group, plural in objects for verb in verbs}
        assert not missing(want, grants), f"{RBAC} lacks, for backend {name}: {missing(want, grants)}"


def test_rbac_lets_the_controller_set_block_owner_deletion_on_every_kind_it_adopts_gang_objects_to():
    # OwnerReferencesPermissionEnforcement (OpenShift, hardened clusters) refuses an ownerReference with
    # blockOwnerDeletion: true without update on the owner's finalizers; the controller sets it on every gang object it
    # adopts to a workload (admit/gang/ownerrefs.py controller_ref), whichever backend wrote the object
    grants = rbac_rules(render(every_backend()[0]), "ClusterRole")
    want = {(group, f"{plural}/finalizers", "update", ()) for group, plural in adopting_resources()}
    assert not missing(want, grants), f"{RBAC} lacks the finalizers updates {missing(want, grants)}"


async def test_the_fake_api_serves_every_registered_kind_and_every_backends_objects():
    _, config = every_backend()
    async with FakeKubeAPI(workload_api=config.workload_api_version) as fake:
        served = {(rt.group, rt.version, rt.plural) for rt in fake.resources}
    assert not missing(registry_resources(), served), (
        f"admit/testing/fake_kube/resources.py BUILTIN_RESOURCES lacks {missing(registry_resources(), served)}")
    for name in sorted(config.allowed_backends):
        want = {(t.group, t.version, t.plural) for t in BACKENDS[name].object_types(config)}
        assert not missing(want, served), f"the fake API does not serve backend {name}'s {missing(want, served)}"


async def test_the_fakes_admission_rules_send_every_registered_kind_to_admit():
    chain = AdmissionChain.from_configurations(render(), "http://127.0.0.1:1")
    try:
        async with FakeKubeAPI() as fake:
            served = {(rt.group, rt.version, rt.plural): rt for rt in fake.resources}
        for key in sorted(registry_resources()):
            for op in CU:
                assert chain.handles(served[key], None, op), (
                    f"the fake's admission chain (admit/testing/fake_kube/admission.py, from the rendered chart) does "
                    f"not send {op} of {key} to admit")
    finally:
        await chain.close()
