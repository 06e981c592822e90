"""The Kubernetes REST client over kubernetes-asyncio's ``ApiClient``: :class:`KubeRaw` (plain-dict requests and
watch streams: the controller, its caches, ``admit status``, the self-managed certificates) and :class:`KubeAPI` (the
object calls admission makes, on top of it).

Thin by design: every call takes a deadline (seconds, float), maps errors to :class:`KubeError`, returns plain dicts
in the API's JSON shape, and retries a throttled answer within that deadline (:func:`call_with_retries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Awaitable, Callable, Iterable, Iterator, TypeVar

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from ..jsonio import loads

__all__ = ["Resource", "KubeError", "AlreadyExists", "resource_not_served", "Budget", "KubeRaw", "KubeAPI", "load_api_client",
           "default_kubeconfig", "api_errors", "resolve_proxy_once", "retry_after_seconds", "call_with_retries",
           "MAX_RETRIES"]

log = logging.getLogger("admit.kube")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Resource:
    """API coordinates of one resource: ``group`` ("" for core), ``version``, ``plural``, ``kind``, ``namespaced``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``"apps/v1"``, or ``"v1"`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def label(self) -> str:
        """``"deployments.apps/v1"`` for logs."""
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """REST path: the collection across namespaces (``namespace=None``), in one namespace, or one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        return base


class KubeError(Exception):
    """A Kubernetes API call failed.

    Attributes:
        status: HTTP status (0 for timeouts and connection errors).
        reason: Kubernetes ``Status.reason`` or a short cause (``"Timeout"``, ``"ConnectionError"``).
        message: text for logs and admission answers.
        retry_after: seconds the server asked the client to wait before trying again (its ``Retry-After`` header,
            on a 429 or a 5xx: :func:`retry_after_seconds`), else ``None``.
    """

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def throttled(self) -> bool:
        """True for a 429 or 5xx with ``Retry-After`` (:func:`retry_after_seconds`): the server said to retry later."""
        return self.retry_after is not None and (self.status == 429 or self.status >= 500)


class AlreadyExists(KubeError):
    """409 AlreadyExists on create."""


def resource_not_served(error: KubeError) -> bool:
    """True for kube-apiserver's 404 of a resource it does not serve (a CRD not installed, an API version not
    served): "the server could not find the requested resource", the text apimachinery
    ``errors.NewGenericServerResponse`` gives a bare 404; not the 404 of a named object ('podgroups "x" not found')."""
    return error.status == 404 and "could not find the requested resource" in error.message


class Budget:
    """One time budget for all the API calls an admission request makes (``Config.api_timeout_seconds``): the
    webhook must answer within kube-apiserver's ``timeoutSeconds``, however many calls it took.

    ``Budget(seconds)`` starts the clock (monotonic); :meth:`left` is the ``timeout`` (seconds) to give the next call.
    """

    __slots__ = ("seconds", "deadline")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left for the next call. Raises KubeError(0, "Timeout") once the budget is used up."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise KubeError(0, "Timeout", f"API budget of {self.seconds:.1f}s used up")
        return remaining


def namespace_terminating(error: KubeError) -> bool:
    """True for the refusal of a create in a namespace being deleted (NamespaceLifecycle's 403 "unable to create new
    content in namespace X because it is being terminated"): everything there is about to go, so not an error worth
    a retry or a warning."""
    return error.status == 403 and "because it is being terminated" in error.message


MAX_RETRIES = 10
"""Retries of a throttled answer (:attr:`KubeError.throttled`) per call at most: client-go's default (``rest/request.go``
``NewRequest``: ``maxRetries: 10``)."""

RETRY_FLOOR = 0.2
"""Seconds a retry must still have, after its ``Retry-After`` wait, before the caller's deadline
(:func:`call_with_retries`)."""


def retry_after_seconds(status: int, headers: Any) -> float | None:
    """The wait a 429 or 5xx answer asks for: its ``Retry-After`` header as whole seconds (``"1"`` -> 1.0), ``None``
    for any other status, no header, or a value that is not a non-negative integer (an HTTP date is not honoured).

    client-go's rule (``k8s.io/client-go`` ``rest/with_retry.go`` ``checkWait``: "any 500 error code and 429 can
    trigger a wait"; ``rest/request.go`` ``retryAfterSeconds``: ``strconv.Atoi`` of the header). kube-apiserver sends
    it with its 429s (API Priority and Fairness, the max-in-flight filter) and with a 5xx ``Status`` whose
    ``details.retryAfterSeconds`` is set.
    """
    if status != 429 and status < 500:
        return None
    try:
        seconds = int(str((headers or {}).get("Retry-After")).strip())  # no header: int("None") fails
    except (AttributeError, ValueError):
        return None
    return float(seconds) if seconds >= 0 else None


async def call_with_retries(attempt: Callable[[float], Awaitable[T]], timeout: float) -> T:
    """``await attempt(seconds_left)`` until it does not raise a :attr:`KubeError.throttled` error, waiting the
    ``Retry-After`` seconds it gives before each retry, at most :data:`MAX_RETRIES` retries, and all of it within
    ``timeout`` seconds from now (one deadline, as client-go's request context covers every retry of a request).

    A retry is made only when its wait leaves at least :data:`RETRY_FLOOR` seconds before the deadline; otherwise
    the throttled error is raised at once, so the caller answers in time (admission: through its failure mode).
    client-go sleeps the wait whatever the deadline and ends with the context's error; admit answers early instead.

    Raises:
        KubeError: what the last attempt raised (a throttled one when no retry fits).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    retries = 0
    while True:
        try:
            return await attempt(deadline - loop.time())
        except KubeError as e:
            left = deadline - loop.time()
            if not e.throttled or retries >= MAX_RETRIES or (e.retry_after or 0.0) + RETRY_FLOOR > left:
                raise
            retries += 1
            log.debug("%s; retrying in %gs (retry %d of at most %d, %.2fs left)", e.message, e.retry_after, retries,
                      MAX_RETRIES, left)
            await asyncio.sleep(e.retry_after or 0.0)


def _from_api_exception(e: ApiException, what: str) -> KubeError:
    reason = e.reason or ""
    message = ""
    try:
        body = json.loads(e.body) if e.body else {}
        reason = body.get("reason") or reason
        message = body.get("message") or ""
    except (ValueError, TypeError, AttributeError):
        pass
    cls = AlreadyExists if e.status == 409 and reason == "AlreadyExists" else KubeError
    return cls(e.status or 0, reason, f"{what}: {e.status} {reason}{': ' + message if message else ''}",
               retry_after_seconds(e.status or 0, getattr(e, "headers", None)))


@contextlib.contextmanager
def api_errors(what: str, timeout: float | None = None) -> Iterator[None]:
    """Map what a kubernetes-asyncio call can raise to :class:`KubeError` (one place for every API caller).

    ``ApiException`` -> its status, Kubernetes ``Status.reason`` (:class:`AlreadyExists` for 409 AlreadyExists) and
    ``Retry-After`` (:func:`retry_after_seconds`);
    ``TimeoutError`` -> status 0, reason ``Timeout``; aiohttp/OS errors -> status 0, reason ``ConnectionError``.
    ``what`` (``"create PodGroup ns/x"``) starts each message; ``timeout`` (seconds) is named in timeout messages.
    """
    try:
        yield
    except ApiException as e:
        raise _from_api_exception(e, what) from None
    except TimeoutError:
        within = f" within {timeout:.1f}s" if timeout is not None else ""
        raise KubeError(0, "Timeout", f"{what}: no answer from the Kubernetes API{within}") from None
    except (aiohttp.ClientError, OSError) as e:
        raise KubeError(0, "ConnectionError", f"{what}: cannot reach the Kubernetes API ({e})") from None


class KubeRaw:
    """Kubernetes REST calls in plain dicts (so admit's pure resolvers read stored objects as they read
    AdmissionReview objects) over a ``kubernetes_asyncio`` ``ApiClient`` (its configuration gives the server,
    credentials and TLS). Every call raises :class:`KubeError`.

    Attributes:
        writes: successful writes counted by ``"<METHOD> <plural>"`` (``"PATCH podgroups"``, ``"PUT leases"``), for
            tests and for "only the leader writes".
    """

    def __init__(self, api_client: client.ApiClient, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.writes: Counter[str] = Counter()

    async def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] = (), body: Any = None,
                      content_type: str = "application/json", timeout: float | None = None,
                      what: str | None = None) -> Any:
        """One request; returns the decoded JSON answer (a dict for every Kubernetes verb).

        The body is read raw and decoded with ``jsonio.loads`` (orjson when installed). A non-2xx answer raises
        ``KubeError`` (:func:`api_errors`; ``what`` starts its message, default ``"<method> <path>"``), a 2xx body
        that is not JSON ``KubeError`` reason ``BadResponse``; a throttled answer is retried within ``timeout``
        seconds (:func:`call_with_retries`).
        """
        timeout = self.timeout if timeout is None else timeout
        what = what or f"{method} {path}"
        query = list(query)

        async def attempt(left: float) -> tuple[Any, bytes]:
            with api_errors(what, timeout):
                async with asyncio.timeout(left):
                    resp = await self.api_client.call_api(
                        path, method, query_params=query,
                        header_params={"Accept": "application/json", "Content-Type": content_type},
                        body=body, auth_settings=["BearerToken"], _preload_content=False, _request_timeout=left,
                    )
                    try:
                        raw = await resp.read()
                    finally:
                        resp.release()
                if not 200 <= resp.status < 300:
                    error = ApiException(status=resp.status, reason=resp.reason)
                    error.body = raw.decode("utf-8", "replace")
                    error.headers = resp.headers
                    raise error
            return resp, raw

        resp, raw = await call_with_retries(attempt, timeout)
        try:
            data = loads(raw) if raw else None
        except ValueError:
            raise KubeError(0, "BadResponse", f"{what}: not a JSON answer: {raw[:200]!r}") from None
        if method != "GET":
            self.writes[f"{method} {_plural_of(path)}"] += 1
        return data

    async def watch(self, path: str, query: Iterable[tuple[str, str]], timeout_seconds: int,
                    idle_timeout: float | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """Open a watch and yield its events (``{"type", "object"}`` dicts) until the server ends the stream.

        A stream with no line (event or bookmark) for ``idle_timeout`` seconds (default ``timeout_seconds + 30``) is
        dead (HTTP/1.1 has no pings: :mod:`admit.kube.watchcache`, *Dead streams*): ``KubeError`` status 0, reason
        ``Timeout``. A non-200 answer raises ``KubeError`` with the server's status and reason.
        """
        what = f"watch {path}"
        idle = float(timeout_seconds + 30) if idle_timeout is None else idle_timeout
        params = [*query, ("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        with api_errors(what):
            resp = await self.api_client.call_api(
                path, "GET", query_params=params, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout,
                                                       sock_read=timeout_seconds + 30),
            )
        loop = asyncio.get_running_loop()
        try:
            if resp.status != 200:  # mapped as every call's error is (its Status' reason and message)
                error = ApiException(status=resp.status)
                error.body = await resp.text()
                with api_errors(what):
                    raise error
            while True:
                try:
                    async with asyncio.timeout_at(loop.time() + idle):
                        line = await resp.content.readline()
                except TimeoutError:
                    raise KubeError(0, "Timeout", f"{what}: no event or bookmark for {idle:g}s") from None
                except (aiohttp.ClientError, OSError, ValueError) as e:
                    raise KubeError(0, "ConnectionError", f"{what}: stream broken ({e!r})") from None
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise KubeError(0, "BadResponse", f"{what}: not a JSON watch event: {line[:200]!r}") from None
                if isinstance(event, dict):
                    yield event
        finally:
            resp.close()

    async def get(self, path: str, timeout: float | None = None, what: str | None = None,
                  query: Iterable[tuple[str, str]] = ()) -> Any:
        """:meth:`request` ``GET``, ``None`` for a 404."""
        try:
            return await self.request("GET", path, query=query, timeout=timeout, what=what)
        except KubeError as e:
            if e.status == 404:
                return None
            raise


def _plural_of(path: str) -> str:
    """``podgroups`` from ``/apis/g/v/namespaces/ns/podgroups/name`` (or ``/api/v1/pods``)."""
    segs = [s for s in path.split("/") if s]
    rest = segs[2:] if segs[:1] == ["api"] else segs[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return rest[0] if rest else path


def _path(group: str, version: str, plural: str, namespace: str = "", name: str | None = None) -> str:
    """The REST path of a collection or an object (``namespace`` ``""``: cluster-scoped)."""
    return Resource(group, version, plural, "").path(namespace or None, name)


def _dry_run(dry_run: bool) -> list[tuple[str, str]]:
    return [("dryRun", "All")] if dry_run else []


class KubeAPI:
    """The generic object calls of the admission path (``backends.ensure.ObjectStore``) and its Pod reads, over
    :class:`KubeRaw`: each takes ``timeout`` (seconds, retries of a throttled answer included) and raises
    :class:`KubeError` on failure, :class:`AlreadyExists` for a 409 on create."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.raw = KubeRaw(api_client)

    async def create_object(self, group: str, version: str, plural: str, body: dict[str, Any], dry_run: bool,
                            timeout: float) -> dict[str, Any]:
        """POST a namespaced object (Workload API ``workloads``/``podgroups``); returns it as stored (or dry run)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        return await self.raw.request("POST", _path(group, version, plural, ns), query=_dry_run(dry_run), body=body,
                                      timeout=timeout, what=f"create {body.get('kind', plural)} {ns}/{name}")

    async def patch_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                           ops: list[dict[str, Any]], dry_run: bool, timeout: float) -> dict[str, Any]:
        """PATCH a namespaced object with a JSON patch (``application/json-patch+json``, RFC 6902)."""
        return await self.raw.request("PATCH", _path(group, version, plural, namespace, name), body=ops,
                                      query=_dry_run(dry_run), content_type="application/json-patch+json",
                                      timeout=timeout, what=f"patch {plural}.{group} {namespace}/{name}")

    async def delete_object(self, group: str, version: str, plural: str, namespace: str, name: str, uid: str | None,
                            dry_run: bool, timeout: float) -> None:
        """DELETE a namespaced object, with ``preconditions.uid`` when ``uid`` is given (so a newer object of the
        same name is never deleted); a 404 is success."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if dry_run:
            body["dryRun"] = ["All"]
        try:
            await self.raw.request("DELETE", _path(group, version, plural, namespace, name), body=body,
                                   timeout=timeout, what=f"delete {plural}.{group} {namespace}/{name}")
        except KubeError as e:
            if e.status != 404:
                raise

    async def get_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        """GET a Pod as the API sends it; ``None`` on 404."""
        return await self.raw.get(_path("", "v1", "pods", namespace, name), timeout, f"read Pod {namespace}/{name}")

    async def list_pods(self, namespace: str, label_selector: str, timeout: float) -> list[dict[str, Any]]:
        """LIST the Pods of ``namespace`` matching ``label_selector`` (the members a shared group's size follows)."""
        return await self.list_objects("", "v1", "pods", namespace, timeout, label_selector)

    async def list_objects(self, group: str, version: str, plural: str, namespace: str, timeout: float,
                           label_selector: str = "") -> list[dict[str, Any]]:
        """LIST the objects of ``namespace`` (``""``: every namespace's) that match ``label_selector`` (``""``: all):
        a gang workload's HorizontalPodAutoscalers."""
        what = f"list {plural}{'.' + group if group else ''} {namespace} {label_selector}".rstrip()
        query = [("labelSelector", label_selector)] if label_selector else []
        found = await self.raw.request("GET", _path(group, version, plural, namespace), query=query, timeout=timeout,
                                       what=what)
        return list(found.get("items") or [])

    async def get_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                         timeout: float) -> dict[str, Any] | None:
        """GET any object: namespaced, or cluster-scoped when ``namespace`` is ``""``; ``None`` on 404."""
        where = f"{namespace}/{name}" if namespace else name
        return await self.raw.get(_path(group, version, plural, namespace, name), timeout,
                                  f"read {plural}.{group} {where}")


def default_kubeconfig() -> str:
    """The kubeconfig file kubectl reads when given none: the first entry of ``$KUBECONFIG`` (a path list), else
    ``~/.kube/config``. An empty or unset ``KUBECONFIG`` means the default, as in client-go
    (``clientcmd.NewDefaultClientConfigLoadingRules``: the variable counts only when ``len(envVarFiles) != 0``), so
    ``KUBECONFIG=`` never names a file called ""."""
    entries = [e for e in os.environ.get("KUBECONFIG", "").split(os.pathsep) if e]
    return os.path.expanduser(entries[0] if entries else "~/.kube/config")


async def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from ``kubeconfig`` if given, else in-cluster config, else ``~/.kube/config``.

    Raises:
        kubernetes_asyncio.config.ConfigException: no usable configuration found.
    """
    from kubernetes_asyncio import config as kconfig

    configuration = client.Configuration()
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise kconfig.ConfigException(f"kubeconfig {kubeconfig} does not exist")
        await kconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            kconfig.load_incluster_config(client_configuration=configuration)
        except kconfig.ConfigException:
            default = default_kubeconfig()
            if not os.path.exists(default):
                raise kconfig.ConfigException(
                    f"no Kubernetes API configuration: not running in a pod, and {default} does not exist; pass "
                    "--kubeconfig FILE, or --api-server URL (e.g. the address of `kubectl proxy`)"
                ) from None
            await kconfig.load_kube_config(config_file=default, client_configuration=configuration)
    return client.ApiClient(configuration)


def resolve_proxy_once(api_client: client.ApiClient) -> None:
    """Look up the proxy for the API server once, instead of on every request.

    kubernetes-asyncio opens its aiohttp session with ``trust_env=True``, so every API call reads the proxy
    environment and ``~/.netrc`` on a worker thread: about half of the CPU of an admission that makes one API call
    (docs/performance.md). This resolves ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` for the configured host now
    (aiohttp's own ``get_env_proxy_for_url``, the rule it would apply per request), sets it as the client's explicit
    proxy, and turns the per-request lookups off. ``~/.netrc`` is not consulted: kube-apiserver credentials come from
    the kubeconfig or the service account. A session without the expected attribute is left as it is.
    """
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    rest = getattr(api_client, "rest_client", None)
    session = getattr(rest, "pool_manager", None)
    if rest is None or session is None or not hasattr(session, "_trust_env"):
        return
    if getattr(rest, "proxy", None) is None:
        try:
            proxy, auth = get_env_proxy_for_url(URL(api_client.configuration.host or ""))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {"Proxy-Authorization": auth.encode()}
    session._trust_env = False
