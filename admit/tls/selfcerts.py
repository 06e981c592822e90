"""Self-managed TLS (``admit serve --cert-mode self``): a CA kept in a Secret, caBundle injection, rotation.

On start and then every ``recheck_interval`` seconds each replica (:meth:`SelfManagedTLSProvider.reconcile`) reads
or ``POST``s the Secret, decides what it should hold (:func:`plan`, pure and clock-injected), ``PUT``s it with the
``resourceVersion`` read (a 409 either way: another replica was first, read again), writes the caBundle into every
webhook entry, then serves the Secret's pair. A CA rotates in three steps (stage, switch, retire) so that
kube-apiserver trusts every leaf any replica serves at every moment (Kubernetes docs "Dynamic Admission Control" on
``caBundle``). docs/certificates.md has the Secret's layout, the rotation's timing, the bad contents repaired, the
readiness rule and the RBAC this needs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as _dt
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes_asyncio import client as k8s

from . import certs
from ..config import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from ..kube.client import KubeError, Resource
from ..kube.watchcache import KubeRaw
from ..observability import metrics
from .certs import CertificateError, CertifiedKey, Clock, utcnow
from .provider import TLSProvider

log = logging.getLogger("admit.selfcerts")

TLS_CRT, TLS_KEY = "tls.crt", "tls.key"
CA_CRT, CA_KEY = "ca.crt", "ca.key"
CA_NEXT_CRT, CA_NEXT_KEY = "ca-next.crt", "ca-next.key"
CA_PREVIOUS_CRT = "ca-previous.crt"
OUR_KEYS = (TLS_CRT, TLS_KEY, CA_CRT, CA_KEY, CA_NEXT_CRT, CA_NEXT_KEY, CA_PREVIOUS_CRT)
STAGED_AT = "admit.dev/ca-staged-at"
PROMOTED_AT = "admit.dev/ca-promoted-at"


# ---------------------------------------------------------------------------------------------------------------
# Pure part: parse a Secret, decide what it should hold


@dataclass(frozen=True)
class Policy:
    """Lifetimes (days) of new certificates, the fraction of a lifetime left that starts a rotation, the seconds a
    new CA sits in caBundle before leaves switch to it (stage) and a retired one stays after the switch (overlap)."""

    ca_days: float = certs.DEFAULT_CA_DAYS
    leaf_days: float = certs.DEFAULT_LEAF_DAYS
    rotation_fraction: float = certs.DEFAULT_ROTATION_FRACTION
    ca_stage_seconds: float = 300.0
    ca_overlap_seconds: float = 3600.0


@dataclass(frozen=True)
class Material:
    """What the Secret holds, parsed; ``None`` for what is absent or unusable. ``next_ca`` is staged (rotation phase
    1, from ``staged_at``), ``previous_ca`` retired and still trusted with its PEM (phase 2, from ``promoted_at``; aware
    UTC); ``orphan_ca`` is a ``ca.crt`` whose ``ca.key`` is unusable (kept trusted as previous on regeneration)."""

    ca: CertifiedKey | None = None
    leaf: CertifiedKey | None = None
    next_ca: CertifiedKey | None = None
    previous_ca: tuple[x509.Certificate, bytes] | None = None
    staged_at: _dt.datetime | None = None
    promoted_at: _dt.datetime | None = None
    orphan_ca: x509.Certificate | None = None

    def bundle(self) -> bytes:
        """The caBundle for this material: current, next and previous CA, canonical order (PEM)."""
        cas = [c.cert for c in (self.ca, self.next_ca) if c is not None]
        if self.previous_ca is not None:
            cas.append(self.previous_ca[0])
        return certs.pem_bundle(cas)

    def data(self) -> dict[str, bytes]:
        """Secret data (raw bytes, not base64) for admit's keys."""
        out: dict[str, bytes] = {}
        for pair, crt, key in ((self.leaf, TLS_CRT, TLS_KEY), (self.ca, CA_CRT, CA_KEY),
                               (self.next_ca, CA_NEXT_CRT, CA_NEXT_KEY)):
            if pair is not None:
                out[crt], out[key] = pair.cert_pem, pair.key_pem
        if self.previous_ca is not None:
            out[CA_PREVIOUS_CRT] = self.previous_ca[1]
        return out

    def annotations(self) -> dict[str, str | None]:
        """admit's Secret annotations (``None`` = remove)."""
        return {
            STAGED_AT: certs.iso(self.staged_at) if self.next_ca is not None and self.staged_at else None,
            PROMOTED_AT: certs.iso(self.promoted_at) if self.previous_ca is not None and self.promoted_at else None,
        }


def _parse_time(value: str | None) -> _dt.datetime | None:
    if not value:
        return None
    try:
        t = _dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def _load_pair(data: dict[str, bytes], crt: str, key: str, problems: list[str],
               check: Callable[[CertifiedKey], str]) -> CertifiedKey | None:
    """The pair under ``crt`` and ``key`` of ``data``; else ``None``, why (unloadable, ``check``) in ``problems``."""
    try:
        pair = certs.load_pair(data.get(crt, b""), data.get(key, b""), crt, key)
    except CertificateError as exc:
        problems.append(str(exc))
        return None
    if problem := check(pair):
        problems.append(problem)
        return None
    return pair


def parse_secret(data: dict[str, bytes], annotations: dict[str, str] | None = None) -> tuple[Material, list[str]]:
    """Parse admit's keys of a Secret (values base64-decoded) into ``(material, problems)``, each problem one line
    naming the Secret key(s). Checks structure only (PEM parses, key matches certificate, CA is a CA, leaf signed by
    the CA); expiry, rotation and names are :func:`plan`'s."""
    annotations = annotations or {}
    problems: list[str] = []
    ca: CertifiedKey | None = None
    orphan: x509.Certificate | None = None
    if CA_CRT in data or CA_KEY in data:
        ca = _load_pair(data, CA_CRT, CA_KEY, problems, lambda p: "" if certs.is_ca(p.cert) else
                        f"{CA_CRT} is not a CA certificate (basicConstraints CA:TRUE missing)")
        if ca is None:
            with contextlib.suppress(CertificateError):
                cand = certs.load_certificates(data.get(CA_CRT, b""), CA_CRT)[0]
                orphan = cand if certs.is_ca(cand) else None
    elif data:
        problems.append(f"{CA_CRT} and {CA_KEY} are missing")
    leaf: CertifiedKey | None = None
    if ca is not None and (TLS_CRT in data or TLS_KEY in data):
        leaf = _load_pair(data, TLS_CRT, TLS_KEY, problems, lambda p: "" if certs.is_signed_by(p.cert, ca.cert) else
                          f"{TLS_CRT} ({certs.describe(p.cert)}) is not signed by {CA_CRT} ({certs.describe(ca.cert)})")
    elif ca is not None:
        problems.append(f"{TLS_CRT} and {TLS_KEY} are missing")
    next_ca: CertifiedKey | None = None
    if CA_NEXT_CRT in data or CA_NEXT_KEY in data:
        next_ca = _load_pair(data, CA_NEXT_CRT, CA_NEXT_KEY, problems,
                             lambda p: "" if certs.is_ca(p.cert) else f"{CA_NEXT_CRT} is not a CA certificate")
    previous: tuple[x509.Certificate, bytes] | None = None
    if CA_PREVIOUS_CRT in data:
        try:
            previous = (certs.load_certificates(data[CA_PREVIOUS_CRT], CA_PREVIOUS_CRT)[0], data[CA_PREVIOUS_CRT])
        except CertificateError as exc:
            problems.append(str(exc))
    return Material(ca, leaf, next_ca, previous, _parse_time(annotations.get(STAGED_AT)),
                    _parse_time(annotations.get(PROMOTED_AT)), orphan), problems


def plan(material: Material, policy: Policy, service: str, namespace: str, dns_names: Sequence[str] = (),
         ip_addresses: Sequence[str] = (), clock: Clock = utcnow, next_ca_trusted: bool = False,
         cluster_domain: str = "cluster.local") -> tuple[Material, list[str]]:
    """What the Secret should hold now, from what it holds (:func:`parse_secret`) and the names the leaf must cover:
    ``(new material, actions)``, one line per change (none: nothing to do). Pure apart from key generation, idempotent
    once settled. ``next_ca_trusted``: every webhook entry was read back with ``material.next_ca`` in its caBundle
    (required before a CA rotation's switch)."""
    now = clock()
    actions: list[str] = []
    m = _plan_ca(material, policy, clock, now, next_ca_trusted, actions)
    m = _plan_retired_ca(m, clock, now, _dt.timedelta(seconds=policy.ca_overlap_seconds), actions)
    m = _plan_leaf(m, policy, service, namespace, dns_names, ip_addresses, clock, cluster_domain, actions)
    return m, actions


def _plan_ca(m: Material, policy: Policy, clock: Clock, now: _dt.datetime, next_ca_trusted: bool,
             actions: list[str]) -> Material:
    """:func:`plan`'s CA step: a new CA when there is no usable one (the old one kept as previous while valid); else
    stage a next CA when the current one is due, drop a staged one outside its validity, and switch to it once staged
    for ``policy.ca_stage_seconds`` and trusted by every webhook."""
    overlap = _dt.timedelta(seconds=policy.ca_overlap_seconds)
    ca_problem = certs.ca_problem(m.ca, clock, CA_CRT) if m.ca is not None else "no usable CA"
    if ca_problem:
        old = m.ca.cert if m.ca is not None else m.orphan_ca
        new_ca = certs.generate_ca(days=policy.ca_days, clock=clock)
        previous = None
        if old is not None and certs.is_ca(old) and not certs.validity_problem(old, clock):
            previous = (old, old.public_bytes(serialization.Encoding.PEM))
        m = Material(ca=new_ca, previous_ca=previous, promoted_at=now if previous else None)
        actions.append(f"{ca_problem}: generated a new CA ({certs.describe(new_ca.cert)})")
    else:
        assert m.ca is not None
        ca = m.ca  # unchanged below until the switch
        if m.next_ca is not None and certs.validity_problem(m.next_ca.cert, clock):
            m = dataclasses.replace(m, next_ca=None, staged_at=None)
            actions.append(f"dropped {CA_NEXT_CRT}: outside its validity window")
        if m.next_ca is None and certs.needs_rotation(ca.cert, clock, policy.rotation_fraction):
            nxt = certs.generate_ca(days=policy.ca_days, clock=clock)
            m = dataclasses.replace(m, next_ca=nxt, staged_at=now)
            actions.append(f"CA is due for rotation (expires {certs.iso(ca.cert.not_valid_after_utc)}): "
                           f"staged a new CA ({certs.describe(nxt.cert)}) in caBundle")
        elif m.next_ca is not None and m.staged_at is None:
            m = dataclasses.replace(m, staged_at=now)
            actions.append(f"{STAGED_AT} missing: restarted the staging period of {CA_NEXT_CRT}")
        elif (m.next_ca is not None and m.staged_at is not None and next_ca_trusted
              and now >= m.staged_at + _dt.timedelta(seconds=policy.ca_stage_seconds)):
            promoted = m.next_ca
            m = dataclasses.replace(m, ca=promoted, next_ca=None, staged_at=None, previous_ca=(ca.cert, ca.cert_pem),
                                    promoted_at=now, leaf=None)
            actions.append(f"switched to the new CA ({certs.describe(promoted.cert)}); the old one stays in caBundle "
                           f"until {certs.iso(now + overlap)}")
    return m


def _plan_retired_ca(m: Material, clock: Clock, now: _dt.datetime, overlap: _dt.timedelta,
                     actions: list[str]) -> Material:
    """:func:`plan`'s retired-CA step: the previous CA stays in caBundle for ``overlap`` after the switch, and goes
    when it has expired or is the current CA again."""
    if m.previous_ca is not None:
        prev = m.previous_ca[0]
        if m.ca is not None and certs.fingerprint(prev) == m.ca.fingerprint:
            m = dataclasses.replace(m, previous_ca=None, promoted_at=None)
        elif certs.is_expired(prev, clock):
            m = dataclasses.replace(m, previous_ca=None, promoted_at=None)
            actions.append(f"removed {CA_PREVIOUS_CRT}: it has expired")
        elif m.promoted_at is None:
            m = dataclasses.replace(m, promoted_at=now)
            actions.append(f"{PROMOTED_AT} missing: restarted the overlap period of {CA_PREVIOUS_CRT}")
        elif now >= m.promoted_at + overlap:
            m = dataclasses.replace(m, previous_ca=None, promoted_at=None)
            actions.append(f"removed the retired CA from caBundle ({certs.describe(prev)}): overlap is over")
    return m


def _plan_leaf(m: Material, policy: Policy, service: str, namespace: str, dns_names: Sequence[str],
               ip_addresses: Sequence[str], clock: Clock, cluster_domain: str, actions: list[str]) -> Material:
    """:func:`plan`'s serving-certificate step: a new leaf from the current CA when there is none, it is not signed by
    the CA, outside its validity, due for rotation, or misses one of the names it must cover."""
    assert m.ca is not None
    names = [*certs.service_dns_names(service, namespace, cluster_domain), *dns_names, *ip_addresses]
    why = ""
    if m.leaf is None:
        why = "no usable serving certificate"
    elif not certs.is_signed_by(m.leaf.cert, m.ca.cert):
        why = f"{TLS_CRT} is not signed by the current CA"
    elif outside := certs.validity_problem(m.leaf.cert, clock, TLS_CRT):
        why = outside
    elif certs.needs_rotation(m.leaf.cert, clock, policy.rotation_fraction):
        why = f"{TLS_CRT} is due for rotation (expires {certs.iso(m.leaf.cert.not_valid_after_utc)})"
    elif missing := certs.missing_names(m.leaf.cert, names):
        why = f"{TLS_CRT} does not cover {', '.join(missing)}"
    if why:
        leaf = certs.generate_serving_certificate(m.ca, service, namespace, dns_names, ip_addresses,
                                                  days=policy.leaf_days, clock=clock, cluster_domain=cluster_domain)
        m = dataclasses.replace(m, leaf=leaf)
        actions.append(f"{why}: issued {certs.describe(leaf.cert)}")
    return m


# ---------------------------------------------------------------------------------------------------------------
# Kubernetes part


def _b64decode(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error is one
        return None


def _decoded(secret: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """admit's keys of ``secret``'s data base64-decoded (``b""`` where not valid base64), and the keys that were not."""
    raw = {k: _b64decode(v) for k, v in (secret.get("data") or {}).items() if k in OUR_KEYS}
    return {k: v or b"" for k, v in raw.items()}, [k for k, v in raw.items() if v is None]


SECRETS = Resource("", "v1", "secrets", "Secret")
WEBHOOK_CONFIGURATIONS = {
    kind: Resource("admissionregistration.k8s.io", "v1", kind.lower() + "s", kind, namespaced=False)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")}


@dataclass
class ReconcileResult:
    """What one :meth:`SelfManagedTLSProvider.reconcile` did: this replica created or updated the Secret, met 409s,
    applied :func:`plan`'s actions, found bad content, patched webhook configurations (``"<Kind>/<name>"``), serves a
    new pair from the next handshake."""

    created: bool = False
    written: bool = False
    conflicts: int = 0
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    installed: bool = False


class SelfManagedTLSProvider(TLSProvider):
    """TLS pair from a self-managed CA in the Secret ``secret_name`` of ``namespace``, with caBundle injection into the
    webhook configurations named (``""`` skips one) and rotation (see the module docstring).

    ``api_client`` is not closed by the provider. ``service_name`` and the extra SANs are what the leaf covers
    (:func:`certs.service_dns_names`). Checks every ``recheck_interval`` seconds (+-10 % jitter; at most 5 s while not
    ready), each API request within ``request_timeout`` seconds. The default :class:`Policy` stages for ``max(300, 3 *
    recheck_interval)`` and overlaps for ``max(3600, 10 * recheck_interval)`` seconds, so that every replica picks up
    the new CA and leaf within them.
    """

    def __init__(self, api_client: k8s.ApiClient, namespace: str, secret_name: str, service_name: str,
                 mutating_config: str, validating_config: str, recheck_interval: float = 60.0, clock: Clock = utcnow,
                 *, dns_names: Iterable[str] = (), ip_addresses: Iterable[str] = (), policy: Policy | None = None,
                 cluster_domain: str = "cluster.local", request_timeout: float = 10.0) -> None:
        super().__init__(clock=clock)
        self.api = KubeRaw(api_client, timeout=request_timeout)
        self.namespace = namespace
        self.secret_name = secret_name
        self.service_name = service_name
        self.mutating_config = mutating_config
        self.validating_config = validating_config
        self.recheck_interval = recheck_interval
        self.dns_names = list(dns_names)
        self.ip_addresses = list(ip_addresses)
        self.cluster_domain = cluster_domain
        self.policy = policy or Policy(ca_stage_seconds=max(300.0, 3 * recheck_interval),
                                       ca_overlap_seconds=max(3600.0, 10 * recheck_interval))
        self._lock = asyncio.Lock()
        self._bundle_reason = "caBundle not checked yet"
        self._last_failure = ""

    @property
    def secret_ref(self) -> str:
        return f"{self.namespace}/{self.secret_name}"

    def _secret_body(self, material: Material, existing: dict[str, Any] | None) -> dict[str, Any]:
        meta_in = (existing or {}).get("metadata") or {}
        labels = {**(meta_in.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY_VALUE}
        annotations = {k: v for k, v in {**(meta_in.get("annotations") or {}), **material.annotations()}.items()
                       if v is not None}
        data = {k: v for k, v in ((existing or {}).get("data") or {}).items() if k not in OUR_KEYS}
        data.update({k: base64.b64encode(v).decode() for k, v in material.data().items()})
        metadata: dict[str, Any] = {"name": self.secret_name, "namespace": self.namespace, "labels": labels}
        if annotations:
            metadata["annotations"] = annotations
        if existing is not None:
            metadata["resourceVersion"] = meta_in.get("resourceVersion")
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
                "type": (existing or {}).get("type") or "kubernetes.io/tls", "data": data}

    async def _settle_secret(self, result: ReconcileResult) -> Material:
        """Read/create/repair the Secret until this replica holds a material consistent with the stored one."""
        for _attempt in range(5):
            secret = await self.api.get(SECRETS.path(self.namespace, self.secret_name))
            data, bad = _decoded(secret or {})
            annotations = ((secret or {}).get("metadata") or {}).get("annotations") or {}
            current, problems = parse_secret(data, annotations)
            # an undecodable value is reported once, as such, not again as an empty/unparsable PEM
            problems = [f"{k} is not valid base64" for k in bad] + [p for p in problems if p.split(" ")[0] not in bad]
            next_trusted = bool(current.ca and current.next_ca  # the switch waits until every webhook trusts it
                                and await self._bundle_contains(current.next_ca.fingerprint))
            material, actions = plan(current, self.policy, self.service_name, self.namespace, self.dns_names,
                                     self.ip_addresses, self.clock, next_trusted, self.cluster_domain)
            if secret is not None and material.data() == data and not problems and all(
                annotations.get(k) == v for k, v in material.annotations().items()
            ):
                return material
            method, name = ("POST", None) if secret is None else ("PUT", self.secret_name)
            try:
                await self.api.request(method, SECRETS.path(self.namespace, name),
                                       body=self._secret_body(material, secret))
            except KubeError as exc:
                if exc.status == 409:  # another replica created or changed it first: read it again
                    result.conflicts += 1
                    if secret is None:
                        log.info("Secret %s was created by another replica; using it", self.secret_ref)
                    continue
                raise
            if secret is None:
                result.created = True
                log.info("created Secret %s with a new CA and serving certificate (%s)",
                         self.secret_ref, certs.describe(material.leaf.cert))  # type: ignore[union-attr]
                return material
            for p in problems:
                log.error("Secret %s: %s; repaired", self.secret_ref, p)
            for a in actions:
                log.info("Secret %s: %s", self.secret_ref, a)
            result.written = True
            result.problems += problems
            result.actions += actions
            return material
        raise CertificateError(f"Secret {self.secret_ref} keeps changing under this replica (5 conflicts in a row)")

    def _configs(self) -> list[tuple[str, str]]:
        """``(path, "<Kind> <name>")`` of each webhook configuration to keep the caBundle of."""
        names = zip(WEBHOOK_CONFIGURATIONS.items(), (self.mutating_config, self.validating_config))
        return [(resource.path(name=name), f"{kind} {name}") for (kind, resource), name in names if name]

    async def _bundle_contains(self, fp: str) -> bool:
        """Every entry of both configurations has the certificate ``fp`` in its caBundle (False on any error)."""
        try:
            for path, _ in self._configs():
                obj = await self.api.request("GET", path)
                for wh in obj.get("webhooks") or []:
                    have = certs.bundle_fingerprints(_b64decode((wh.get("clientConfig") or {}).get("caBundle")))
                    if not have or fp not in have:
                        return False
        except KubeError:
            return False
        return True

    async def inject_ca_bundle(self, bundle: bytes) -> list[str]:
        """Make every webhook entry's ``clientConfig.caBundle`` hold exactly the certificates in ``bundle`` (compared
        as sets: another writer's order does not trigger a patch), and set readiness; returns ``"<Kind>/<name>"`` of
        each configuration patched.

        One JSON Patch (RFC 6902) per configuration with an entry that differs, for those entries only: ``{"op":
        "test", "path": "/webhooks/<i>/name", "value": <name>}`` (the list was not reordered since read) then ``{"op":
        "add", "path": "/webhooks/<i>/clientConfig/caBundle", "value": <base64 PEM>}``. Raises KubeError when reading
        or patching fails; a configuration not found leaves the replica unready instead.
        """
        want = certs.bundle_fingerprints(bundle)
        value = base64.b64encode(bundle).decode()
        patched: list[str] = []
        missing: list[str] = []
        for path, config in self._configs():
            try:
                obj = await self.api.request("GET", path)
            except KubeError as exc:
                if exc.status == 404:
                    missing.append(f"{config} not found")
                    continue
                raise
            ops: list[dict[str, Any]] = []
            entries: list[str] = []
            for i, wh in enumerate(obj.get("webhooks") or []):
                have = certs.bundle_fingerprints(_b64decode((wh.get("clientConfig") or {}).get("caBundle")))
                if have != want:
                    ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": wh.get("name")})
                    ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
                    entries.append(str(wh.get("name")))
            if ops:
                await self.api.request("PATCH", path, body=ops, content_type="application/json-patch+json")
                log.info("caBundle of %s updated (entries: %s)", config, ", ".join(entries))
                patched.append(config.replace(" ", "/"))
        self._bundle_reason = "; ".join(missing) + ("; caBundle not in place" if missing else "")
        return patched

    async def reconcile(self) -> ReconcileResult:
        """One check: settle the Secret, inject caBundle, then serve the Secret's pair (even if the caBundle step
        failed: the Secret no longer holds the old one), so that a pair from a new CA is served once trusted.

        Raises:
            KubeError: the Kubernetes API failed or did not answer within ``request_timeout`` (in the caBundle step:
                after the pair is served, and ``ready()`` is False with the reason).
            CertificateError: the Secret kept changing (5 conflicts in a row) or OpenSSL refused the pair.
        """
        async with self._lock:
            result = ReconcileResult()
            material = await self._settle_secret(result)
            assert material.leaf is not None
            try:
                result.patched = await self.inject_ca_bundle(material.bundle())
            except KubeError as exc:
                self._bundle_reason = f"caBundle could not be checked: {exc.message}"
                raise
            finally:
                if self.pair is None or self.pair.fingerprint != material.leaf.fingerprint:
                    self.install(material.leaf)
                    result.installed = True
                if material.ca is not None:
                    metrics.certificate("ca", material.ca.cert.not_valid_after_utc.timestamp())
            return result

    async def start(self) -> None:
        """First check, then the periodic loop. Raises :class:`CertificateError`, one line, when no serving pair can
        be had (Kubernetes API unreachable, RBAC); a failure only in the caBundle step does not raise (the loop
        retries every few seconds, ``ready()`` False meanwhile)."""
        try:
            await self.reconcile()
        except KubeError as exc:
            if self.pair is None:
                raise CertificateError(
                    f"self-managed TLS: cannot read or create Secret {self.secret_ref}: {exc.message}"
                ) from None
            self._note_failure(exc)
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="admit-tls-self-managed")

    def _note_failure(self, exc: KubeError) -> None:
        line = f"self-managed TLS check failed: {exc.message}"
        log.log(logging.WARNING if line != self._last_failure else logging.DEBUG, "%s (retrying)", line)
        self._last_failure = line

    async def _loop(self) -> None:
        while True:
            interval = self.recheck_interval * random.uniform(0.9, 1.1)
            await asyncio.sleep(interval if self.ready() else min(interval, 5.0))
            try:
                await self.reconcile()
                self._last_failure = ""
            except KubeError as exc:
                self._note_failure(exc)
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything
                log.exception("self-managed TLS check failed: %s", exc.__class__.__name__)

    def reason(self) -> str:
        """``""`` when ready; else why: no/expired certificate, or caBundle not (yet) in place."""
        return super().reason() or self._bundle_reason
