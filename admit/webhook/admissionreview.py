"""AdmissionReview (``admission.k8s.io/v1``): parse a request body, build the response.

Shapes follow the Kubernetes docs "Dynamic Admission Control" (request and response) and
``k8s.io/api/admission/v1/types.go``:

- request: ``{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid", "kind": {group,
  version, kind}, "resource": {group, version, resource}, "subResource", "requestKind", "requestResource", "name",
  "namespace", "operation": CREATE|UPDATE|DELETE|CONNECT, "userInfo", "object", "oldObject", "dryRun", "options"}}``;
- response: ``{"apiVersion", "kind": "AdmissionReview", "response": {"uid", "allowed", "status": {"code",
  "message"}, "patchType": "JSONPatch", "patch": base64(JSON array), "warnings": [str]}}``. The ``uid`` always
  echoes ``request.uid``; an empty patch is sent with neither ``patch`` nor ``patchType``.

``admission.k8s.io/v1beta1`` has the same shape; a v1beta1 review is answered in v1beta1.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from ..echo import clip, clip_message
from ..jsonio import JSON_BACKEND, dumps, loads  # re-exported: the review body is parsed and answered with them

__all__ = ["BadReview", "AdmissionRequest", "Decision", "parse_review", "review_response", "encode_response",
           "fit_warnings", "loads", "dumps", "JSON_BACKEND"]

SUPPORTED_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
# kube-apiserver keeps a request's warnings (every webhook's and its own) whole only while their sum stays within
# 4,096 runes; past that it cuts each to 256 runes and drops those that no longer fit (k8s.io/apiserver
# pkg/endpoints/filters/warning.go: truncateAtTotalRunes, truncateItemRunes). admit's two answers to one request
# (/mutate, /validate) each keep to half of the sum, so together they are never what pushes it over.
WARNING_ITEM_RUNES = 256
WARNING_TOTAL_RUNES = 4096
ANSWER_WARNING_RUNES = WARNING_TOTAL_RUNES // 2
_CONTROL = dict.fromkeys([*range(0x20), 0x7F], " ")


class BadReview(ValueError):
    """The body is not an AdmissionReview admit can answer; the server replies HTTP 400 with this message."""


@dataclass(slots=True)
class AdmissionRequest:
    """A view over ``AdmissionReview.request`` with the fields admit reads (no copies of ``object``).

    Attributes:
        uid: ``request.uid`` (echoed in every answer).
        api_version: the review's ``apiVersion`` (the answer uses the same).
        group / version / kind: ``request.kind`` (the object's kind; ``autoscaling/v1 Scale`` for ``*/scale``).
        resource: ``request.resource.resource`` plural (``"deployments"``); resource_group its group.
        sub_resource: ``request.subResource`` (``"scale"``, ``"status"`` or ``""``).
        operation: CREATE, UPDATE, DELETE or CONNECT.
        namespace: ``request.namespace`` (objects created by controllers often lack ``metadata.namespace``).
        name: ``request.name`` (empty on CREATE with generateName).
        object / old_object: the new and old objects (dicts, ``None`` where absent).
        dry_run: ``request.dryRun``: write nothing (``sideEffects: NoneOnDryRun``).
    """

    uid: str
    api_version: str
    group: str
    version: str
    kind: str
    resource_group: str
    resource: str
    sub_resource: str
    operation: str
    namespace: str
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool


@dataclass(slots=True)
class Decision:
    """The answer to one admission request, before it is wrapped in an AdmissionReview.

    Attributes:
        allowed: admit or refuse.
        message: ``status.message`` (reason for a denial, or a note on an allowed answer); ``""`` for none.
        code: ``status.code`` (HTTP status for a denial, e.g. 400 malformed, 403 policy, 503 API unavailable).
        patch: JSONPatch operations (list of ``{"op", "path", "value"}``); empty for none.
        warnings: admission warnings shown by kubectl (``Warning: ...``): only what the user should change.
        notes: what admit explains without asking for a change (``GangPlan.notes``); never sent as warnings
            (kubectl would print each as ``Warning:``): the validating answer carries them as ``message`` instead,
            and ``admit review -v`` shows them.
        pod_groups: PodGroup objects admit created, patched, or would create (for ``admit review``).
        lookup: a read the mutation waits on, never part of the answer, for ``admission.Admission`` to do (a pod
            joiner's ``families.shared.PodRead``: a Spark executor whose driver the cache does not know), or ``None``.
    """

    allowed: bool = True
    message: str = ""
    code: int = 200
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pod_groups: list[dict[str, Any]] = field(default_factory=list)
    lookup: Any = None

    @classmethod
    def deny(cls, message: str, code: int = 403, warnings: list[str] | None = None) -> "Decision":
        """A refusal with ``message`` and HTTP ``code``."""
        return cls(allowed=False, message=message, code=code, warnings=list(warnings or ()))


OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
"""``request.operation`` values (``k8s.io/api/admission/v1`` ``Operation``)."""

_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    """``"a string"``, ``"an array"``, ...: the JSON type of a decoded value, for a message."""
    name = _JSON_TYPES.get(type(value), type(value).__name__)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _group_version(req: dict[str, Any], field_name: str, last: str) -> tuple[str, str, str]:
    """``(group, version, <last>)`` of ``request.<field_name>``, a ``metav1.GroupVersionKind`` (``last`` "kind") or
    ``GroupVersionResource`` (``last`` "resource"). kube-apiserver always sends all three strings, the group ``""``
    for the core API; a missing group is read as ``""``. Raises BadReview: the field is missing or not an object,
    a part is not a string, or version or ``last`` is empty."""
    value = req.get(field_name)
    shape = f"{{group, version, {last}}}"
    if value is None:
        raise BadReview(f"request.{field_name} is missing (expected an object {shape}, as kube-apiserver sends)")
    if not isinstance(value, dict):
        raise BadReview(f"request.{field_name} is {_json_type(value)} ({clip(value, 60)}), expected an object "
                        f"{shape}")
    parts = []
    for part in ("group", "version", last):
        text = value.get(part, "") if part == "group" else value.get(part)
        if text is not None and not isinstance(text, str):
            raise BadReview(f"request.{field_name}.{part} is {_json_type(text)}, expected a string")
        if not text and part != "group":
            raise BadReview(f"request.{field_name}.{part} is missing or empty")
        parts.append(text or "")
    return parts[0], parts[1], parts[2]


def _optional_str(req: dict[str, Any], field_name: str) -> str:
    """``request.<field_name>`` (``subResource``, ``name``, ``namespace``): a string, ``""`` when absent or null
    (Go's decoder leaves a string unset for null). Raises BadReview when it is another type."""
    value = req.get(field_name)
    if value is not None and not isinstance(value, str):
        raise BadReview(f"request.{field_name} is {_json_type(value)}, expected a string")
    return value or ""


def _document(body: bytes) -> tuple[str, dict[str, Any]]:
    """``(apiVersion, request)`` of an AdmissionReview body; raises BadReview as :func:`parse_review` does."""
    try:
        doc = loads(body)
    except ValueError as e:
        raise BadReview(f"body is not valid JSON: {clip_message(str(e), 200)}") from None
    except RecursionError:  # the stdlib decoder on deeply nested arrays/objects (orjson stops at depth 1024)
        raise BadReview("body is not valid JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadReview("body is not a JSON object (expected an AdmissionReview)")
    api_version = doc.get("apiVersion")
    if doc.get("kind") != "AdmissionReview":
        raise BadReview("kind is missing (expected kind: AdmissionReview, apiVersion: admission.k8s.io/v1)"
                        if doc.get("kind") is None else f"kind is {clip(doc.get('kind'))}, expected 'AdmissionReview'")
    if api_version not in SUPPORTED_VERSIONS:
        raise BadReview("apiVersion is missing (expected apiVersion: admission.k8s.io/v1)" if api_version is None
                        else f"apiVersion {clip(api_version)} is not supported (use admission.k8s.io/v1)")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview("AdmissionReview has no request object")
    return api_version, req


def parse_review(body: bytes) -> AdmissionRequest:
    """Parse and check an AdmissionReview request body against the shape kube-apiserver sends
    (``k8s.io/api/admission/v1`` ``AdmissionRequest``: ``uid``, ``kind``, ``resource`` and ``operation`` always;
    ``object`` on CREATE and UPDATE, ``oldObject`` on UPDATE).

    Raises:
        BadReview: not JSON, not an object, wrong ``apiVersion``/``kind``, no ``request``, a missing or empty
            ``request.uid`` or one that is not a string, a ``request.kind``/``request.resource`` that is not
            ``{group, version, kind|resource}`` strings, a ``request.operation`` missing or not CREATE, UPDATE,
            DELETE or CONNECT, ``subResource``/``name``/``namespace`` that are not strings, a ``dryRun`` that is
            not a boolean, ``object``/``oldObject`` that are not JSON objects, or one the operation carries
            missing. The message names the field; the server answers it with HTTP 400.
    """
    api_version, req = _document(body)
    return _plain_request(api_version, req) or _checked_request(api_version, req)


_OPERATION_OBJECTS = {"CREATE": (True, False), "UPDATE": (True, True), "DELETE": (None, None),
                      "CONNECT": (None, None)}
"""Per operation: whether kube-apiserver sends ``object`` and ``oldObject`` (``None``: it may or may not)."""


def _plain_request(api_version: str, req: dict[str, Any]) -> AdmissionRequest | None:
    """``req`` read at one look when every field has the type kube-apiserver sends (the request of almost every
    review: about a microsecond less than :func:`_checked_request`), else ``None``, and :func:`_checked_request`
    then reads it field by field: it also takes what Go's decoder takes (a ``null`` group, name or dryRun) and names
    what it refuses. What this accepts, that accepts too, as the same :class:`AdmissionRequest`
    (tests/webhook/test_admissionreview.py)."""
    get = req.get
    uid, kind, resource = get("uid"), get("kind"), get("resource")
    operation: Any = get("operation")
    obj, old = get("object"), get("oldObject")
    carried = _OPERATION_OBJECTS.get(operation) if type(operation) is str else None
    if carried is None or type(uid) is not str or not uid or type(kind) is not dict or type(resource) is not dict \
            or (type(obj) is not dict if carried[0] or obj is not None else False) \
            or (type(old) is not dict if carried[1] or old is not None else False):
        return None
    group, version, kind_name = kind.get("group", ""), kind.get("version"), kind.get("kind")
    resource_group, resource_version, plural = resource.get("group", ""), resource.get("version"), \
        resource.get("resource")
    dry_run, sub, namespace, name = get("dryRun", False), get("subResource", ""), get("namespace", ""), get("name", "")
    if type(group) is not str or type(version) is not str or not version or type(kind_name) is not str \
            or not kind_name or type(resource_group) is not str or type(resource_version) is not str \
            or not resource_version or type(plural) is not str or not plural or type(dry_run) is not bool \
            or type(sub) is not str or type(namespace) is not str or type(name) is not str:
        return None
    return AdmissionRequest(uid, api_version, group, version, kind_name, resource_group, plural, sub, operation,
                            namespace, name, obj, old, dry_run)


def _checked_request(api_version: str, req: dict[str, Any]) -> AdmissionRequest:
    """``req`` read field by field: :func:`parse_review`'s checks, each BadReview naming its field."""
    uid = req.get("uid")
    if uid is not None and not isinstance(uid, str):
        raise BadReview(f"request.uid is a {type(uid).__name__}, expected a string (kube-apiserver sends a UID)")
    if not uid:
        raise BadReview("request.uid is missing or empty")
    obj, old = req.get("object"), req.get("oldObject")
    for name, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise BadReview(f"request.{name} is not a JSON object (it is {_json_type(value)})")
    group, version, kind = _group_version(req, "kind", "kind")
    resource_group, _, resource = _group_version(req, "resource", "resource")
    operation = req.get("operation")
    if operation not in OPERATIONS:
        raise BadReview("request.operation is missing (expected CREATE, UPDATE, DELETE or CONNECT)" if operation is None
                        else f"request.operation is {clip(operation, 60)}, expected CREATE, UPDATE, DELETE or CONNECT")
    dry_run = req.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise BadReview(f"request.dryRun is {_json_type(dry_run)}, expected true or false")
    # kube-apiserver sends object on CREATE and UPDATE and oldObject on UPDATE: without them there is nothing to judge
    if obj is None and operation in ("CREATE", "UPDATE"):
        raise BadReview(f"request.object is missing: kube-apiserver sends the object on {operation}")
    if old is None and operation == "UPDATE":
        raise BadReview("request.oldObject is missing: kube-apiserver sends the stored object on UPDATE")
    return AdmissionRequest(uid, api_version, group, version, kind, resource_group, resource,
                            _optional_str(req, "subResource"), str(operation), _optional_str(req, "namespace"),
                            _optional_str(req, "name"), obj, old, dry_run is True)


def review_response(api_version: str, uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview answer for ``decision`` (see module docstring for the shape)."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed or decision.message:
        status: dict[str, Any] = {"code": decision.code if not decision.allowed else 200}
        if decision.message:
            status["message"] = clip_message(decision.message)
        if not decision.allowed:
            status["status"] = "Failure"
            status["reason"] = {400: "BadRequest", 403: "Forbidden", 409: "Conflict", 500: "InternalError",
                                 503: "ServiceUnavailable"}.get(decision.code, "Invalid")
        response["status"] = status
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(dumps(decision.patch)).decode("ascii")
    if decision.warnings:
        response["warnings"] = fit_warnings(decision.warnings)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


_ALLOWED_HEAD = {v: b'{"apiVersion":"%s","kind":"AdmissionReview","response":{"uid":' % v.encode()
                 for v in SUPPORTED_VERSIONS}
_ALLOWED_TAIL = b',"allowed":true}}'


def encode_response(api_version: str, uid: str, decision: Decision) -> bytes:
    """:func:`review_response` as JSON bytes (what the server sends). The most common answer, allowed with nothing
    to add (no patch, message or warning: most pods), is joined from pre-encoded parts around the JSON-encoded
    ``uid``: the same bytes as ``dumps(review_response(...))``, about a microsecond sooner."""
    if decision.allowed and not (decision.patch or decision.message or decision.warnings):
        head = _ALLOWED_HEAD.get(api_version)
        if head is not None:
            return head + dumps(uid) + _ALLOWED_TAIL
    return dumps(review_response(api_version, uid, decision))


def fit_warnings(warnings: list[str]) -> list[str]:
    """``warnings`` as one answer sends them: each at most :data:`WARNING_ITEM_RUNES` runes (Python counts code
    points, as Go's ``utf8.RuneCountInString``), control characters made spaces (kube-apiserver drops a warning
    that holds one: ``net.NewWarningHeader`` refuses it), duplicates left out (kube-apiserver sends a text once), and
    all together at most :data:`ANSWER_WARNING_RUNES` runes: past that, the last one kept says how many more there
    are. Every warning admit writes leads with its fix, so a cut keeps the fix (``tests/webhook/test_warnings_fit.py``
    holds a corpus of inputs, one per warning)."""
    out: list[str] = []
    total = 0
    texts = list(dict.fromkeys(w.translate(_CONTROL)[:WARNING_ITEM_RUNES] for w in warnings if w))
    for i, text in enumerate(texts):
        left = len(texts) - i
        more = f"{left} more warning(s) not shown: run admit review -v on this object to read them all"
        if total + len(text) + (len(more) if left > 1 else 0) > ANSWER_WARNING_RUNES:
            out.append(more)
            break
        out.append(text)
        total += len(text)
    return out
