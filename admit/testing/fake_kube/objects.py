"""What kube-apiserver does to an object on the way in: label and field selectors, JSON / merge / strategic
merge patches, validation and normalisation of metadata, time fields.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from datetime import datetime, timezone
from typing import Any, Callable

import jsonpatch

from .errors import ApiError, _bad_request, _invalid
from .resources import (_DNS_SUBDOMAIN, JSON, ResourceType, WORKLOAD_API_VERSIONS, _workload_api_errors,
                        _workload_api_update_errors)


def _now() -> str:
    """RFC 3339 with seconds precision and ``Z``, like ``metav1.Time``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _query_bool(value: str | None) -> bool:
    """Kubernetes' query bool conversion: present and not "0"/"false" (any case) means true."""
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")


_SEL_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_RE_EXISTS = re.compile(rf"^(!?)\s*({_SEL_KEY})$")
_RE_SET = re.compile(rf"^({_SEL_KEY})\s+(in|notin)\s*\((.*)\)$")
_RE_CMP = re.compile(rf"^({_SEL_KEY})\s*(==|=|!=|>|<)\s*([-A-Za-z0-9_.]*)$")

Selector = Callable[[dict], bool]


def _requirements(text: str) -> list[str]:
    """The comma-separated requirements of a selector (a comma inside ``in (...)`` does not separate)."""
    return [p.strip() for p in re.split(r",(?![^()]*\))", text) if p.strip()]


def _matches(labels: dict, key: str, op: str, values: Any) -> bool:
    """``Requirement.Matches`` (``k8s.io/apimachinery/pkg/labels/selector.go``): ``!=`` and ``notin`` also match
    labels without the key; ``>``/``<`` need the key with an integer value."""
    if op in ("in", "=", "=="):
        return labels.get(key) in values
    if op in ("notin", "!="):
        return labels.get(key) not in values
    if op in ("exists", "!"):
        return (key in labels) == (op == "exists")
    try:
        have = int(labels[key])
    except (KeyError, ValueError):
        return False
    return have > values if op == ">" else have < values


def parse_label_selector(text: str | None) -> Selector | None:
    """Parse a label selector string (``a=b,c!=d,e,!f,g in (x,y),h notin (z),n>3``) into a predicate on a labels dict
    (:func:`_matches`). Raises ``ApiError`` 400 on syntax errors."""
    if not text or not text.strip():
        return None
    reqs: list[tuple[str, str, Any]] = []
    for part in _requirements(text):
        if m := _RE_SET.match(part):
            reqs.append((m[1], m[2], {v.strip() for v in m[3].split(",") if v.strip()}))
        elif m := _RE_CMP.match(part):
            key, op, val = m.groups()
            try:
                reqs.append((key, op, int(val) if op in (">", "<") else {val}))
            except ValueError:
                raise _bad_request(f"unable to parse requirement: {part!r}: value must be an integer") from None
        elif m := _RE_EXISTS.match(part):
            reqs.append((m[2], "!" if m[1] else "exists", None))
        else:
            raise _bad_request(f"unable to parse requirement: found '{part}', expected: key, operator and values")
    return lambda labels: all(_matches(labels, *r) for r in reqs)


def _dotted(obj: Any, path: str) -> Any:
    """The value at a dotted ``path`` of ``obj`` (``spec.nodeName``), None when a part is missing."""
    for seg in path.split("."):
        obj = obj.get(seg) if isinstance(obj, dict) else None
    return obj


def _field_value(obj: JSON, path: str) -> str:
    value = _dotted(obj, path)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def parse_field_selector(text: str | None) -> Callable[[JSON], bool] | None:
    """Parse a field selector (``metadata.name=x,metadata.namespace!=y``) into a predicate on an object.

    Any dotted path is accepted (the real server only accepts per-resource field lists such as ``metadata.name``,
    ``metadata.namespace``, ``spec.nodeName``, ``status.phase``); missing fields compare as "".
    """
    if not text or not text.strip():
        return None
    reqs = []
    for part in _requirements(text):
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(==|=|!=)\s*(.*)$", part)
        if not m:
            raise _bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        reqs.append((m[1], m[2] == "!=", m[3]))
    return lambda o: all((_field_value(o, path) == value) != negate for path, negate, value in reqs)


def merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 JSON merge patch; with ``strategic``, :func:`strategic_merge_patch`. Returns a new value (``None``
    for a map a strategic ``$patch: delete`` removes); ``target`` is not modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch") if strategic else None
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if strategic and k.startswith("$"):
            continue
        if v is None:
            result.pop(k, None)
        elif strategic and _is_named_list(v) and (_is_named_list(result.get(k)) or result.get(k) == []):
            out = [copy.deepcopy(i) for i in result[k]]
            for item in v:
                idx = next((i for i, cur in enumerate(out) if cur.get("name") == item["name"]), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        out.pop(idx)
                elif idx is None:
                    out.append(strategic_merge_patch({}, item))
                else:
                    out[idx] = strategic_merge_patch(out[idx], item)
            result[k] = out
        elif (merged := merge_patch(result.get(k), v, strategic)) is None:
            result.pop(k, None)
        else:
            result[k] = merged
    return result


def _is_named_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A good-enough strategic merge patch: a merge patch where lists of objects that all carry a ``name`` key are
    merged item by item by ``name`` (Kubernetes' ``patchMergeKey: name`` on containers, env, volumes, webhooks...),
    ``$patch: delete`` removes a list item or map, ``$patch: replace`` replaces a map, other ``$``-directives are
    dropped, and all other lists are replaced. Returns a new value (``None`` for a deleted map)."""
    return merge_patch(target, patch, strategic=True)


_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json")


def _replace_as_set(target: JSON, patch: list[Any]) -> list[Any]:
    """kube-apiserver's JSON patch (``gopkg.in/evanphx/json-patch.v4``, ``Patch.replace``): ``replace`` of a key
    missing from an object that exists sets it (``partialDoc.get`` answers a missing key with no error), where RFC
    6902 and the ``jsonpatch`` package refuse. The Ray autoscaler relies on it: it replaces
    ``/spec/workerGroupSpecs/<i>/scaleStrategy`` of clusters written without one (ray-project/ray
    ``ray:python/ray/autoscaler/_private/kuberay/node_provider.py`` ``worker_delete_patch``). Such operations
    become ``add`` (same effect there); the operations are applied in order, so each is judged against the
    document the ones before it made."""
    doc: Any = copy.deepcopy(target)
    out: list[Any] = []
    for op in patch:
        if isinstance(op, dict) and op.get("op") == "replace" and isinstance(op.get("path"), str):
            parent_path, _, key = op["path"].rpartition("/")
            try:
                parent = jsonpatch.JsonPointer(parent_path).resolve(doc) if op["path"] else None
            except (jsonpatch.JsonPointerException, TypeError):
                parent = None
            key = key.replace("~1", "/").replace("~0", "~")
            if isinstance(parent, dict) and key not in parent:
                op = {**op, "op": "add"}
        out.append(op)
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc)
        except Exception:  # noqa: BLE001 - the whole patch is applied (and refused) by the caller
            return out + list(patch[len(out):])
    return out


def patch_media_type(rt: ResourceType | None, content_type: str | None) -> str:
    """The PATCH body's media type (``Content-Type`` without parameters), checked before the body is read or the
    object looked up, as ``handlers/patch.go`` ``PatchResource`` does: 415 for one the resource does not take
    (strategic merge on a custom resource) and for server-side apply, which the fake does not emulate."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    accepted = [t for t in _PATCH_TYPES if not (rt is not None and rt.custom and "strategic" in t)]
    if ctype not in accepted:
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                       f"media types include: {', '.join([*accepted, 'application/apply-patch+yaml'])}")
    return ctype


def apply_patch(rt: ResourceType | None, target: JSON, content_type: str | None, patch: Any) -> JSON:
    """Apply a PATCH body to ``target`` (not modified) according to its Content-Type (``patch_media_type``), as the
    real server does: json-patch (body must be a list: 400 otherwise, 422 when an operation fails), merge-patch or
    strategic merge."""
    ctype = patch_media_type(rt, content_type)
    if ctype == "application/json-patch+json":
        if not isinstance(patch, list):
            raise _bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            ops = jsonpatch.JsonPatch(_replace_as_set(target, patch))
        except (jsonpatch.InvalidJsonPatch, TypeError, AttributeError, KeyError) as e:
            raise _bad_request(f"invalid JSON patch: {e}") from None
        try:
            result = ops.apply(copy.deepcopy(target))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise ApiError(422, "Invalid", str(e)) from None
        if not isinstance(result, dict):
            raise ApiError(422, "Invalid", "the patch did not produce an object")
        return result
    strategic = ctype == "application/strategic-merge-patch+json"
    if not isinstance(patch, dict):
        raise _bad_request(f"json: cannot unmarshal non-object into {'strategic ' if strategic else ''}merge patch")
    return merge_patch(copy.deepcopy(target), patch, strategic)


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand alphabet

#: MicroTime (``.000000`` required) and Time fields checked per (group, plural), as dotted paths.
_TIME_FIELDS: dict[tuple[str, str], tuple[tuple[str, bool], ...]] = {
    ("coordination.k8s.io", "leases"): (("spec.acquireTime", True), ("spec.renewTime", True)),
    ("", "events"): (("eventTime", True), ("series.lastObservedTime", True), ("firstTimestamp", False),
                     ("lastTimestamp", False)),
    ("events.k8s.io", "events"): (("eventTime", True), ("series.lastObservedTime", True),
                                  ("deprecatedFirstTimestamp", False), ("deprecatedLastTimestamp", False)),
}


def _label_key_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"prefix part must be a lowercase RFC 1123 subdomain: {key!r}"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (f"name part must consist of alphanumeric characters, '-', '_' or '.', must start and end with an "
                f"alphanumeric character and be no more than 63 characters: {key!r}")
    return None


def _b64_error(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return "must be a base64 string"
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        return f"illegal base64 data: {e}"
    return None


def _validate(rt: ResourceType, obj: JSON, old: JSON | None = None) -> None:
    """The validations listed in the module docstring, and an update's from ``old`` (:func:`job_template_errors`,
    ``_workload_api_update_errors``); raises 400/422 ``ApiError`` like the real server."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise _invalid(rt, name, f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                                 f"consist of lower case alphanumeric characters, '-' or '.', and must start and end "
                                 f"with an alphanumeric character")
    for field in ("labels", "annotations"):
        for k, v in (meta.get(field) or {}).items():
            err = _label_key_error(k)
            if err:
                raise _invalid(rt, name, f"metadata.{field}: Invalid value: {err}")
            if not isinstance(v, str):
                raise _bad_request(f"json: cannot unmarshal {type(v).__name__} into Go struct field "
                                   f"ObjectMeta.metadata.{field} of type string")
            if field == "labels" and len(v) > 63:
                raise _invalid(rt, name, f'metadata.labels: Invalid value: "{v}": must be no more than 63 characters')
            if field == "labels" and v and not _QUALIFIED_NAME.match(v):
                raise _invalid(rt, name, f'metadata.labels: Invalid value: "{v}": a valid label must be an empty '
                                         f"string or consist of alphanumeric characters, '-', '_' or '.', and must "
                                         f"start and end with an alphanumeric character")
    for path, micro in _TIME_FIELDS.get((rt.group, rt.plural), ()):
        value = _dotted(obj, path)
        if value is None:
            continue
        layout = "2006-01-02T15:04:05.000000Z07:00" if micro else "2006-01-02T15:04:05Z07:00"
        if not isinstance(value, str) or not (_MICRO_TIME if micro else _TIME).match(value):
            raise _bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                               f'{path}: parsing time "{value}" as "{layout}": cannot parse')
    encoded: list[tuple[str, Any]] = []  # (field, value) that must be base64
    if rt.group == "" and rt.plural in ("secrets", "configmaps"):
        field_name = "data" if rt.plural == "secrets" else "binaryData"
        encoded = [(f"{field_name}[{k}]", v) for k, v in (obj.get(field_name) or {}).items()]
    if rt.group == "admissionregistration.k8s.io":
        encoded = [(f"webhooks[{i}].clientConfig.caBundle", ((hook or {}).get("clientConfig") or {}).get("caBundle"))
                   for i, hook in enumerate(obj.get("webhooks") or [])]
    for field_name, value in encoded:
        if err := _b64_error(value):
            raise _bad_request(f'{rt.kind} in version "v1" cannot be handled as a {rt.kind}: {field_name}: {err}')
    errors = []
    if rt.group == "scheduling.k8s.io" and rt.version in WORKLOAD_API_VERSIONS:
        errors = _workload_api_errors(rt, obj) or ([] if old is None else _workload_api_update_errors(rt, obj, old))
    elif rt.key == ("batch", "v1", "jobs") and old is not None:
        errors = job_template_errors(obj, old)
    if errors:
        raise _invalid(rt, name, "; ".join(errors))


def _normalize(rt: ResourceType, obj: JSON) -> None:
    """Server-side conversions applied on every write: Secret ``stringData`` is base64-encoded into ``data``; a
    scheduling.k8s.io PodGroup gets its default ``spec.disruptionMode`` (``Pod`` as the 1.36.2 kube-apiserver gives
    in v1alpha2; ``{"single": {}}``, the ``+default`` of v1beta1's types.go)."""
    if rt.group == "scheduling.k8s.io" and rt.kind == "PodGroup" and isinstance(obj.get("spec"), dict):
        obj["spec"].setdefault("disruptionMode", "Pod" if rt.version == "v1alpha2" else {"single": {}})
    if rt.group == "" and rt.plural == "secrets" and "stringData" in obj:
        string_data = obj.pop("stringData") or {}
        if string_data:
            data = dict(obj.get("data") or {})
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data


def _label_selector_string(selector: Any) -> str:
    """metav1.LabelSelector -> its string form (what Scale.status.selector carries)."""
    if not isinstance(selector, dict):
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, vals = expr.get("key"), ",".join(sorted(expr.get("values") or []))
        forms = {"In": f"{key} in ({vals})", "NotIn": f"{key} notin ({vals})", "Exists": key, "DoesNotExist": f"!{key}"}
        if expr.get("operator") in forms:
            parts.append(forms[expr["operator"]])
    return ",".join(sorted(parts))


#: Pod template fields of a suspended Job that never started which an update may change (KEP-2926, "mutable
#: scheduling directives": ``ValidateJobSpecUpdate`` with ``AllowMutableSchedulingDirectives``).
_SUSPENDED_JOB_MUTABLE = (("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector"),
                          ("spec", "tolerations"), ("spec", "affinity"), ("spec", "schedulingGates"))


def job_template_errors(new: JSON, old: JSON) -> list[str]:
    """A Job's ``spec.template`` is immutable (kubernetes ``pkg/apis/batch/validation/validation.go``
    ``ValidateJobSpecUpdate``: ``ValidateImmutableField(spec.Template, oldSpec.Template, "spec.template")``), except,
    while the stored Job is suspended and has never started (no ``status.startTime``), its labels, annotations and
    scheduling directives. Returns the field errors (empty: the update may be stored). The value is not printed in
    Go's ``core.PodTemplateSpec{...}`` syntax, only named."""
    template = (new.get("spec") or {}).get("template")
    old_template = (old.get("spec") or {}).get("template")
    if template == old_template:
        return []
    if (old.get("spec") or {}).get("suspend") and not (old.get("status") or {}).get("startTime"):
        a, b = copy.deepcopy(template or {}), copy.deepcopy(old_template or {})
        for path in _SUSPENDED_JOB_MUTABLE:
            for t in (a, b):
                parent = t.get(path[0]) if isinstance(t, dict) else None
                if isinstance(parent, dict):
                    parent.pop(path[1], None)
        if a == b:
            return []
    return ["spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"]

