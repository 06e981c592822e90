"""The admission chain of the fake kube-apiserver (kubernetes ``staging/src/k8s.io/apiserver/pkg/admission``): the
mutating webhooks in order, with reinvocation (:meth:`AdmissionChain.mutate`), then the validating ones
(:meth:`AdmissionChain.validate`), each called when :meth:`Webhook.should_call`; each method cites the code it
follows, docs/fake-api.md lists what is not emulated (nor is ``sideEffects`` on dry run). A webhook is called over
HTTP (admit's server, :meth:`AdmissionChain.from_configurations`) or in process (an emulated operator's: any
``async (request) -> response`` callable, with :func:`allowed`, :func:`denied` and :func:`patched`).
"""

from __future__ import annotations

import base64
import contextvars
import copy
import dataclasses
import functools
import json
import ssl as _ssl
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

import jsonpatch

from .errors import ApiError
from .resources import JSON
from .objects import _label_selector_string, parse_label_selector

#: The admission warnings of the HTTP request being served (the server sets a list per request): kube-apiserver's
#: webhook dispatchers add each ``response.warnings`` entry to the request's warning recorder
#: (k8s.io/apiserver pkg/admission/plugin/webhook/{mutating,validating}/dispatcher.go: ``warning.AddWarning``).
REQUEST_WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("request_warnings", default=None)
TRUNCATE_AT_TOTAL_RUNES = 4 * 1024  # k8s.io/apiserver pkg/endpoints/filters/warning.go truncateAtTotalRunes
TRUNCATE_ITEM_RUNES = 256  # warning.go truncateItemRunes


def warning_headers(texts: Iterable[str]) -> list[str]:
    """The ``Warning`` header values kube-apiserver sends for the warnings ``texts`` of one request (warning.go
    ``recorder.AddWarning``): each text once; all whole while their runes stay within ``truncateAtTotalRunes``, else
    each cut to ``truncateItemRunes`` and, once the sum reaches the total, the rest dropped; a text with a control
    character is dropped (``net.NewWarningHeader`` refuses it). Each is ``299 - "<text>"`` with quotes and backslashes
    escaped (k8s.io/apimachinery pkg/util/net/http.go ``NewWarningHeader``), which kubectl prints as
    ``Warning: <text>``."""
    seen: set[str] = set()
    ordered: list[str] = []
    kept: list[str] = []
    written, truncating = 0, False
    for text in texts:
        if not text or (written >= TRUNCATE_AT_TOTAL_RUNES and truncating) or text in seen:
            continue
        seen.add(text)
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
            continue
        ordered.append(text)
        cut = text[:TRUNCATE_ITEM_RUNES] if truncating else text
        if written + len(cut) <= TRUNCATE_AT_TOTAL_RUNES or truncating:
            written += len(cut)
            kept.append(cut)
            continue
        truncating = True
        kept = [t[:TRUNCATE_ITEM_RUNES] for t in ordered]
        written = sum(map(len, kept))
    return ['299 - "' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in kept]

if TYPE_CHECKING:
    from .resources import ResourceType

__all__ = ["AdmissionChain", "Webhook", "WebhookCallError", "allowed", "denied", "patched", "selector_matches", "USER_INFO"]

#: An in-process webhook: AdmissionReview ``request`` in, AdmissionReview ``response`` out.
Handler = Callable[[JSON], Awaitable[JSON]]

USER_INFO = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}


def allowed(request: JSON, *, warnings: Iterable[str] = ()) -> JSON:
    """An AdmissionReview ``response`` that allows ``request`` unchanged."""
    response: JSON = {"uid": request["uid"], "allowed": True}
    warnings = list(warnings)  # a generator is truthy even when it yields nothing
    if warnings:
        response["warnings"] = warnings
    return response


def denied(request: JSON, message: str, *, code: int = 403, reason: str = "Forbidden") -> JSON:
    """A refusal as controller-runtime's ``admission.Denied`` / ``validationResponseFromStatus`` writes it
    (``code`` 403 Forbidden, or 422 Invalid for a field error list)."""
    return {"uid": request["uid"], "allowed": False,
            "status": {"code": code, "reason": reason, "message": message}}


def patched(request: JSON, new: JSON, *, warnings: Iterable[str] = ()) -> JSON:
    """Allow ``request`` with the JSONPatch from its ``object`` to ``new`` (what controller-runtime's
    ``admission.PatchResponseFromRaw`` does for a CustomDefaulter)."""
    ops = jsonpatch.make_patch(request.get("object") or {}, new).patch
    response = allowed(request, warnings=warnings)
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return response


def selector_matches(selector: JSON | None, labels: JSON) -> bool:
    """A ``metav1.LabelSelector`` against ``labels`` (``LabelSelectorAsSelector``: an absent selector matches
    everything; ``NotIn`` and ``DoesNotExist`` match a missing key), through its string form."""
    matches = parse_label_selector(_label_selector_string(selector))
    return matches is None or matches(labels)


def _rule_matches(rule: JSON, rt: "ResourceType", sub: str | None, operation: str) -> bool:
    """``rules/rules.go`` ``Matcher.Matches``: group, version, operation, resource (``*``, ``pods``, ``pods/*``,
    ``*/scale``, ``deployments/scale``) and scope."""
    def has(values: Any, value: str) -> bool:
        return "*" in (values or []) or value in (values or [])

    if not (has(rule.get("apiGroups"), rt.group) and has(rule.get("apiVersions"), rt.version)
            and has(rule.get("operations"), operation)):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and not rt.namespaced or scope == "Cluster" and rt.namespaced:
        return False
    for resource in rule.get("resources") or []:
        res, _, res_sub = resource.partition("/")
        if res not in ("*", rt.plural):
            continue
        if sub is None and not res_sub:
            return True
        if sub is not None and res_sub in ("*", sub):
            return True
    return False


@functools.cache
def _cel(expression: str) -> Any:
    """A compiled CEL program (cel-python, the test extra)."""
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expression))


def evaluate_match_conditions(conditions: Iterable[JSON], request: JSON) -> bool:
    """Every matchCondition of a webhook on ``request``; raises ``ValueError`` naming the condition when one cannot
    be evaluated (the caller applies the failurePolicy)."""
    from celpy.adapter import json_to_cel  # where cel-python defines it (``celpy`` re-exports it without __all__)

    activation = {"object": json_to_cel(request.get("object")),
                  "oldObject": json_to_cel(request.get("oldObject")),
                  "request": json_to_cel({k: v for k, v in request.items() if k not in ("object", "oldObject")})}
    for cond in conditions:
        try:
            result = _cel(cond["expression"]).evaluate(activation)
        except Exception as e:  # noqa: BLE001 - any CEL failure is an evaluation error
            raise ValueError(f"matchCondition {cond.get('name')!r}: {e}") from e
        if isinstance(result, Exception) or not isinstance(result, (bool, int)):
            raise ValueError(f"matchCondition {cond.get('name')!r}: {result!r}")
        if not result:
            return False
    return True


@dataclasses.dataclass
class Webhook:
    """One webhook of a Mutating/ValidatingWebhookConfiguration, with how to call it.

    ``spec`` is the webhook's entry as written in the configuration (``name``, ``rules``, ``namespaceSelector``,
    ``objectSelector``, ``matchConditions``, ``failurePolicy``, ``reinvocationPolicy``); ``call`` is the in-process
    handler (AdmissionReview request -> response). ``configuration`` is the configuration's name (for the order).
    """

    configuration: str
    spec: JSON
    call: Handler

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def path(self) -> str:
        """Where the webhook is called: its ``clientConfig`` Service path or URL, else (in process) its name."""
        client = self.spec.get("clientConfig") or {}
        return str((client.get("service") or {}).get("path") or client.get("url") or self.name)

    @property
    def fails_closed(self) -> bool:
        return (self.spec.get("failurePolicy") or "Fail") == "Fail"

    @property
    def reinvoked_if_needed(self) -> bool:
        return self.spec.get("reinvocationPolicy") == "IfNeeded"

    def matches_rules(self, rt: "ResourceType", sub: str | None, operation: str) -> bool:
        return any(_rule_matches(rule, rt, sub, operation) for rule in self.spec.get("rules") or [])

    def should_call(self, rt: "ResourceType", sub: str | None, request: JSON, ns_labels: JSON) -> bool:
        """``plugin/webhook/generic/webhook.go`` ``ShouldCallHook``: the rules (:func:`_rule_matches`), the
        namespaceSelector against ``ns_labels`` (a namespace not stored has only ``kubernetes.io/metadata.name``), the
        objectSelector against the object's or the old object's labels, then every matchCondition
        (``plugin/webhook/matchconditions/matcher.go`` ``Match``: all true). A matchCondition that fails to evaluate
        raises ApiError under ``failurePolicy: Fail`` and skips the webhook under ``Ignore``."""
        if not self.matches_rules(rt, sub, request["operation"]):
            return False
        if rt.namespaced and not selector_matches(self.spec.get("namespaceSelector"), ns_labels):
            return False
        selector = self.spec.get("objectSelector")
        if selector:
            objs = [o for o in (request.get("object"), request.get("oldObject")) if isinstance(o, dict)]
            if not any(selector_matches(selector, (o.get("metadata") or {}).get("labels") or {}) for o in objs):
                return False
        conditions = self.spec.get("matchConditions") or []
        if not conditions:
            return True
        try:
            return evaluate_match_conditions(conditions, request)
        except ValueError as e:
            if self.fails_closed:
                raise _call_error(self.name, str(e)) from None
            return False


class AdmissionChain:
    """The mutating and validating webhooks of a fake kube-apiserver (see the module docstring).

    Args:
        mutating / validating: the webhooks, each list in the order kube-apiserver calls them (use :meth:`add`,
            which keeps configurations sorted by name).

    Attributes:
        reviews: every ``(path, request, response)`` exchanged, oldest first (``path``: :attr:`Webhook.path`).
        calls: the same as ``(webhook name, request, response)``.
        warnings: every admission warning returned, as ``(kind, name, warning)``.
    """

    def __init__(self, mutating: Iterable[Webhook] = (), validating: Iterable[Webhook] = ()) -> None:
        self.mutating: list[Webhook] = list(mutating)
        self.validating: list[Webhook] = list(validating)
        self.reviews: list[tuple[str, JSON, JSON]] = []
        self.calls: list[tuple[str, JSON, JSON]] = []
        self.warnings: list[tuple[str, str, str]] = []
        self._session: Any = None  # the aiohttp.ClientSession of from_configurations' webhooks

    # ------------------------------------------------------------------ building

    def add(self, kind: str, configuration: str, spec: JSON, call: Handler) -> Webhook:
        """Register one webhook of a ``kind`` (``"Mutating"`` or ``"Validating"``) configuration named
        ``configuration``; configurations are kept sorted by name, webhooks of one configuration in the order added
        (``configuration/mutating_webhook_manager.go``, ``validating_webhook_manager.go``:
        ``sort.SliceStable(configurations, ...ByName)``)."""
        hook = Webhook(configuration, copy.deepcopy(spec), call)
        hooks = self.mutating if kind == "Mutating" else self.validating
        hooks.insert(next((i for i, h in enumerate(hooks) if h.configuration > configuration), len(hooks)), hook)
        return hook

    def add_configuration(self, configuration: JSON, call: Callable[[JSON], Handler]) -> None:
        """Register every webhook of a rendered ``Mutating/ValidatingWebhookConfiguration``; ``call(webhook spec)``
        gives the handler of each."""
        kind = "Mutating" if configuration["kind"] == "MutatingWebhookConfiguration" else "Validating"
        for spec in configuration.get("webhooks") or []:
            self.add(kind, configuration["metadata"]["name"], spec, call(spec))

    @classmethod
    def from_configurations(cls, configurations: Iterable[JSON], url: str, ssl: _ssl.SSLContext | bool = False,
                            *, timeout: float = 5.0) -> "AdmissionChain":
        """The chain of the chart's rendered webhook configurations, every webhook called over HTTP at ``url``
        (``https://127.0.0.1:PORT``) plus its ``clientConfig.service.path`` (the Service stands for admit's
        server; ``ssl``: a context trusting it, or False for plain HTTP)."""
        chain = cls()

        def handler(spec: JSON) -> Handler:
            path = ((spec.get("clientConfig") or {}).get("service") or {}).get("path") or "/"

            async def post(request: JSON) -> JSON:
                import aiohttp

                if chain._session is None:  # noqa: SLF001
                    chain._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout))  # noqa: SLF001
                review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
                async with chain._session.post(url.rstrip("/") + path, json=review, ssl=ssl) as resp:  # noqa: SLF001
                    if resp.status != 200:
                        raise _call_error(spec["name"], f"expected response code 200, got {resp.status}: "
                                                        f"{await resp.text()}")
                    return (await resp.json()).get("response") or {}

            return post

        for conf in configurations:
            if conf.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                chain.add_configuration(conf, handler)
        return chain

    async def close(self) -> None:
        """Close the HTTP client. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # ------------------------------------------------------------------ the chain

    def handles(self, rt: "ResourceType", sub: str | None, operation: str) -> bool:
        """True when some webhook's rules match a write of ``rt`` (``sub``: None or a subresource)."""
        return any(h.matches_rules(rt, sub, operation) for h in (*self.mutating, *self.validating))

    @staticmethod
    def request(operation: str, rt: "ResourceType", ns: str | None, obj: JSON | None, old: JSON | None,
                dry_run: bool, sub: str | None = None, user: JSON | None = None) -> JSON:
        """The AdmissionReview ``request`` kube-apiserver sends for a write (``admission/v1``)."""
        src = obj if obj is not None else old or {}
        name = (src.get("metadata") or {}).get("name") or ""
        kind = ({"group": "autoscaling", "version": "v1", "kind": "Scale"} if sub == "scale" else
                {"group": rt.group, "version": rt.version, "kind": rt.kind})
        resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        request: JSON = {
            "uid": str(uuid.uuid4()), "kind": kind, "resource": resource, "requestKind": kind,
            "requestResource": resource, "operation": operation, "userInfo": user or USER_INFO,
            "object": obj, "oldObject": old, "dryRun": dry_run,
            "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
        }
        if name:
            request["name"] = name
        if ns is not None:
            request["namespace"] = ns
        if sub:
            request["subResource"] = request["requestSubResource"] = sub
        return request

    async def _call(self, hook: Webhook, request: JSON) -> JSON | None:
        """One webhook call; the response when it answered and allowed, None when it failed open; raises the
        refusal (``plugin/webhook/errors/statuserror.go`` ``ToStatusErr``: ``admission webhook "<name>" denied the
        request: <message>``, the webhook's code or 403) or the call failure (fail closed: 500) as ApiError."""
        try:
            response = await hook.call(request)
            if not isinstance(response, dict) or response.get("uid") != request["uid"]:
                raise _call_error(hook.name, "the response uid does not match the request uid")
        except ApiError as e:
            if isinstance(e, WebhookCallError) and not hook.fails_closed:
                return None
            raise
        except Exception as e:  # noqa: BLE001 - an unreachable webhook
            if not hook.fails_closed:
                return None
            raise _call_error(hook.name, f"failed to call webhook: {e}") from e
        self.reviews.append((hook.path, request, response))
        self.calls.append((hook.name, request, response))
        sink = REQUEST_WARNINGS.get()
        for warning in response.get("warnings") or []:
            self.warnings.append((request["kind"]["kind"], request.get("name", ""), warning))
            if sink is not None:
                sink.append(warning)
        if not response.get("allowed"):
            status = response.get("status") or {}
            code = int(status.get("code") or 403)
            if code < 400:
                code = 403
            message = status.get("message") or ""
            raise ApiError(code, str(status.get("reason") or "Forbidden"),
                           f'admission webhook "{hook.name}" denied the request' + (f": {message}" if message else ""))
        return response

    async def mutate(self, operation: str, rt: "ResourceType", ns: str | None, obj: JSON, old: JSON | None,
                     dry_run: bool, user: JSON | None = None, ns_labels: JSON | None = None) -> JSON:
        """The object after every mutating webhook (a new dict when changed), as ``plugin/webhook/mutating/
        dispatcher.go`` ``Dispatch`` and ``reinvocationcontext.go``: each matching webhook gets the object as the
        previous one left it; a patch that changes it marks every earlier ``IfNeeded`` webhook
        (``RequireReinvokingPreviouslyInvokedPlugins``, ``AddReinvocableWebhookToPreviouslyInvoked``), and one more
        round (``admission/reinvocation.go`` ``reinvoker.Admit``: never two) calls only those marked. Raises ApiError
        when one refuses or fails closed."""
        labels = ns_labels if ns_labels is not None else {"kubernetes.io/metadata.name": ns or ""}
        previously_invoked: set[int] = set()
        reinvoke: set[int] = set()
        should_reinvoke = False
        for round_ in (0, 1):
            if round_ == 1 and not should_reinvoke:
                break
            for i, hook in enumerate(self.mutating):
                request = self.request(operation, rt, ns, obj, old, dry_run, None, user)
                if not hook.should_call(rt, None, request, labels):
                    continue
                if round_ == 1 and i not in reinvoke:
                    continue
                response = await self._call(hook, request) or {}  # {}: failed open
                patch = response.get("patch")
                if patch and response.get("patchType") != "JSONPatch":
                    if hook.fails_closed:
                        raise _call_error(hook.name, f"unsupported patch type {response.get('patchType')!r}")
                elif patch:
                    new = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(patch)))
                    if new != obj:
                        reinvoke |= previously_invoked  # RequireReinvokingPreviouslyInvokedPlugins
                        previously_invoked, should_reinvoke = set(), True
                    obj = new
                if hook.reinvoked_if_needed:
                    previously_invoked.add(i)
        return obj

    async def validate(self, operation: str, rt: "ResourceType", ns: str | None, obj: JSON, old: JSON | None,
                       dry_run: bool, sub: str | None = None, user: JSON | None = None,
                       ns_labels: JSON | None = None) -> None:
        """Every matching validating webhook (``plugin/webhook/validating/dispatcher.go``), on the object the store
        prepared; kube-apiserver calls them in parallel, here in order: the first refusal raises ApiError, the same
        answer to a client."""
        labels = ns_labels if ns_labels is not None else {"kubernetes.io/metadata.name": ns or ""}
        for hook in self.validating:
            request = self.request(operation, rt, ns, obj, old, dry_run, sub, user)
            if hook.should_call(rt, sub, request, labels):
                await self._call(hook, request)


class WebhookCallError(ApiError):
    """A webhook that could not be called or answered wrongly (``webhookutil.ErrCallingWebhook``): 500 when it fails
    closed; skipped under ``failurePolicy: Ignore``."""


def _call_error(hook: str, why: str) -> ApiError:
    return WebhookCallError(500, "InternalError", f'Internal error occurred: failed calling webhook "{hook}": {why}')
