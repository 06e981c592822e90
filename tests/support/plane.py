"""A real Kubernetes control plane on loopback, for admit's end-to-end tests (and the bench): etcd, kube-apiserver,
kube-controller-manager and the scheduler-plugins scheduler (Coscheduling), with admit's webhooks registered from
the chart and ``admit serve`` running as a real subprocess over HTTPS.

Usage::

    with ControlPlane() as plane:                    # raises NoBinaries when none are found
        plane.add_node("node-1", cpu="4")
        admit = plane.start_admit()                   # `admit serve` + the chart's webhook configurations
        plane.create_namespace("demo")
        plane.rest("POST", "/apis/apps/v1/namespaces/demo/deployments", body={...})

Binaries (:func:`find_binaries`), brought by whoever runs the tests, as controller-runtime's envtest does: a folder of
plain executables named by ``$ADMIT_K8S_ASSETS`` (``etcd``, ``kube-apiserver``, ``kube-controller-manager``,
``kube-scheduler``, ``scheduler-plugins-scheduler``), and ``$KUBEBUILDER_ASSETS`` (the folder ``setup-envtest use``
prints: ``etcd``, ``kube-apiserver``, ``kubectl``) for whatever the first lacks. Known to work together: Kubernetes
1.36.2, etcd 3.6, scheduler-plugins v0.34.7. What the plane can run depends on what is found (:data:`TIERS`):
``apiserver`` (etcd + kube-apiserver), ``controllers`` (+ kube-controller-manager), ``coscheduling``
(+ scheduler-plugins-scheduler), ``native`` (kube-controller-manager + the stock kube-scheduler).

What it sets up (flags and traps learnt running Kubernetes 1.36.2; docs/testing.md keeps them):

- a throwaway PKI made with ``cryptography`` (``admit.tls.certs`` for the CA and serving certificates): the
  kube-apiserver serving certificate (``127.0.0.1``, ``kubernetes.default.svc``...), client certificates for the
  admin (``O=system:masters``), ``system:kube-controller-manager`` and ``scheduler-plugins-scheduler``, a
  service-account signing key, admit's serving certificate (IP SAN ``127.0.0.1``), one kubeconfig per client;
- every process on free loopback ports, in a temporary folder, its output in ``<workdir>/<name>.log``;
  kube-controller-manager without the node lifecycle and cloud controllers (fake nodes are never marked
  unreachable); the scheduler with one profile ``scheduler-plugins-scheduler``: Coscheduling on, PrioritySort off,
  ``permitWaitingTimeSeconds`` short (default 3 s);
- the PodGroup CRD rendered from admit's own chart (``podGroupCRD.install``) and the scheduler-plugins scheduler's
  RBAC (:data:`SCHEDULER_PLUGINS_RBAC`), before the scheduler starts;
- without kube-controller-manager (an ``apiserver``-only plane), :meth:`ControlPlane.create_namespace` creates the
  ``default`` ServiceAccount itself, as the ServiceAccount controller would;
- fake nodes (:meth:`ControlPlane.add_node`): created with a Ready condition, then the ``not-ready`` taint the
  admission chain adds is cleared (nothing else would clear it);
- a "kubelet" (:class:`Kubelet`, a thread): bound Pending pods get ``phase: Running`` and a ``Ready`` condition
  through the ``status`` subresource (so Deployment rollouts complete), and pods left Terminating on a node are
  deleted with grace period 0;
- ``admit serve`` (:meth:`ControlPlane.start_admit`): a subprocess with ``--cert-mode files`` and the admin
  kubeconfig; the chart's own rendered Mutating/ValidatingWebhookConfigurations (rules, matchConditions,
  failurePolicies, timeouts) are registered with ``clientConfig.url`` = the subprocess and ``caBundle`` = the test CA.

``ControlPlane(native_gang=True)`` also turns on Kubernetes' native gang scheduling as 1.36 serves it: ``--feature-gates=GenericWorkload=true,GangScheduling=true`` on
kube-apiserver and kube-controller-manager, ``--runtime-config=scheduling.k8s.io/v1alpha2=true`` on kube-apiserver,
and the stock ``kube-scheduler`` (its ``default-scheduler`` profile runs the GangScheduling plugin) with the gates, as
user ``system:kube-scheduler`` (:data:`NATIVE_GANG`).

Everything started is stopped by :meth:`ControlPlane.stop` (SIGTERM, then SIGKILL after 5 s), also when start-up
fails half way; on Linux each process also gets SIGKILL when the process that started it dies (``PR_SET_PDEATHSIG``).
A component that finds its port taken (``free_port`` cannot reserve one) makes the start begin again once. There is no kubelet, no kube-proxy, no DNS, no container runtime: a pod counts as scheduled when
``spec.nodeName`` is set.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlencode

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admit.tls.certs import BACKDATE, CertifiedKey, generate_ca, generate_serving_certificate, utcnow

__all__ = [
    "NoBinaries", "PlaneError", "REQUIRED", "NATIVE_GANG", "TIERS", "ROOT", "find_binaries", "available_binaries",
    "ControlPlane", "Kubelet", "AdmitProcess", "render_chart", "render_webhooks", "free_port", "client_certificate",
    "SCHEDULER_PLUGINS_RBAC",
]

log = logging.getLogger("admit.plane")

ROOT = Path(__file__).resolve().parents[2]
ASSETS_ENV = "ADMIT_K8S_ASSETS"
#: controller-runtime's envtest folder (``setup-envtest use -p path``): etcd and kube-apiserver (and kubectl).
ENVTEST_ENV = "KUBEBUILDER_ASSETS"
#: What each tier of the real tests needs. A test declares its tier (``pytest.mark.needs("controllers")``), so a
#: contributor with only envtest's etcd and kube-apiserver still runs every ``apiserver`` test.
TIERS: dict[str, tuple[str, ...]] = {
    "apiserver": ("etcd", "kube-apiserver"),
    "controllers": ("etcd", "kube-apiserver", "kube-controller-manager"),
    "coscheduling": ("etcd", "kube-apiserver", "kube-controller-manager", "scheduler-plugins-scheduler"),
    "native": ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"),
}
REQUIRED = TIERS["coscheduling"]
NATIVE_GANG = ("kube-scheduler",)  # also needed by ControlPlane(native_gang=True)
ALL_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "scheduler-plugins-scheduler")
#: Kubernetes' native gang scheduling in 1.36: these gates on kube-apiserver, kube-controller-manager and
#: kube-scheduler, and the runtime-config on kube-apiserver (the Workload API is alpha ``v1alpha2`` there).
NATIVE_GANG_GATES = "--feature-gates=GenericWorkload=true,GangScheduling=true"
NATIVE_GANG_RUNTIME_CONFIG = "--runtime-config=scheduling.k8s.io/v1alpha2=true"
SCHEDULER_NAME = "scheduler-plugins-scheduler"


def feature_gates_flag(native_gang: bool, extra: dict[str, bool]) -> str:
    """One ``--feature-gates=`` flag: the native gang gates (when ``native_gang``) and ``extra``."""
    gates = {"GenericWorkload": True, "GangScheduling": True} if native_gang else {}
    gates.update(extra)
    return "--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in gates.items())
JSON = dict[str, Any]
#: Where the README tells a contributor how to get the binaries (named in every "no binaries" message).
HOW_TO_GET = "docs/testing.md, 'The real control-plane tier'"


class NoBinaries(Exception):
    """No control-plane binaries were found; ``str(e)`` is one line saying where admit looked."""


class PlaneError(Exception):
    """The control plane could not start or an API call failed; the message carries the status or the log tail."""

    def __init__(self, message: str, status: int = 0, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


# ======================================================================================================================
# Binaries
# ======================================================================================================================


def _asset_folders() -> list[tuple[str, Path]]:
    return [(env, Path(os.environ[env]).expanduser()) for env in (ASSETS_ENV, ENVTEST_ENV) if os.environ.get(env)]


def available_binaries() -> dict[str, Path]:
    """Every control-plane binary found: ``{name: path}`` for the names of :data:`ALL_BINARIES` that are an
    executable file in ``$ADMIT_K8S_ASSETS``, else in ``$KUBEBUILDER_ASSETS`` (envtest's layout: plain files named
    ``etcd``, ``kube-apiserver``). Never raises; an unset variable contributes nothing."""
    found: dict[str, Path] = {}
    for _, folder in _asset_folders():
        for name in ALL_BINARIES:
            path = folder / name
            if name not in found and path.is_file() and os.access(path, os.X_OK):
                found[name] = path
    return found


def missing_message(missing: Iterable[str]) -> str:
    """One line: which binaries are missing, where admit looked and where the docs say how to get them."""
    where = ", ".join(f"${env}={folder}" for env, folder in _asset_folders()) or f"${ASSETS_ENV} is not set"
    return (f"no {', '.join(missing)} ({where}): set {ASSETS_ENV} to a folder of Kubernetes 1.36 binaries "
            f"({HOW_TO_GET})")


def find_binaries(names: Iterable[str] = REQUIRED) -> dict[str, Path]:
    """The paths of the binaries ``names`` (default :data:`REQUIRED`), from :func:`available_binaries`.

    Raises:
        NoBinaries: one of them is missing; the message is one line (:func:`missing_message`).
    """
    found = available_binaries()
    names = tuple(names)
    missing = [n for n in names if n not in found]
    if missing:
        raise NoBinaries(missing_message(missing))
    return {n: found[n] for n in names}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ======================================================================================================================
# PKI
# ======================================================================================================================


def client_certificate(ca: CertifiedKey, common_name: str, organizations: Iterable[str] = (), days: float = 2) \
        -> CertifiedKey:
    """A TLS client certificate (ECDSA P-256, ``extendedKeyUsage clientAuth``) for kube-apiserver's x509
    authenticator: the user is the CN, the groups are the O values (Kubernetes docs "Authenticating", X509 client
    certificates)."""
    now = utcnow()
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return CertifiedKey(cert, key, cert.public_bytes(serialization.Encoding.PEM), key_pem)


def _write(path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    path.chmod(mode)
    return path


def _kubeconfig(server: str, ca_pem: bytes, user: CertifiedKey, name: str) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "plane", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": name, "user": {"client-certificate-data": b64(user.cert_pem),
                                          "client-key-data": b64(user.key_pem)}}],
        "contexts": [{"name": name, "context": {"cluster": "plane", "user": name}}],
    })


# ======================================================================================================================
# Webhook configurations from the chart
# ======================================================================================================================


def render_chart(values: JSON | None = None, chart: Path | None = None, namespace: str = "admit-system",
                 release: str = "admit") -> list[JSON]:
    """Every object the chart renders (``helm template``), by Helm's Go SDK (``helm-python-sdk``, as
    ``tests/release/test_chart.py`` renders it).

    Raises:
        ImportError: helm-python-sdk is not installed (``pip install -e '.[test]'``).
    """
    import helm_python as helm

    with helm.Chart.load(str(chart or ROOT / "charts" / "admit")) as c:
        rendered = c.render(values or {}, name=release, namespace=namespace, is_install=True)
    return [doc for path, text in sorted(rendered.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def render_webhooks(url: str, ca_pem: bytes, values: JSON | None = None, chart: Path | None = None,
                    namespace: str = "admit-system", release: str = "admit") -> list[JSON]:
    """The chart's MutatingWebhookConfiguration and ValidatingWebhookConfiguration (:func:`render_chart`), with
    every ``clientConfig.service`` replaced by ``clientConfig.url`` = ``url`` + the service path, and ``caBundle`` =
    ``ca_pem``. Rules, matchConditions, namespaceSelector, failurePolicy and timeouts stay the chart's."""
    out = []
    for doc in render_chart(values, chart, namespace, release):
        if doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in doc["webhooks"]:
                cc = hook["clientConfig"]
                service = cc.pop("service", None) or {}
                cc["url"] = url.rstrip("/") + (service.get("path") or "/")
                cc["caBundle"] = base64.b64encode(ca_pem).decode()
            out.append(doc)
    if len(out) != 2:
        raise PlaneError(f"expected the chart to render 2 webhook configurations, got {len(out)}")
    return out


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def _binding(kind: str, name: str, role_kind: str, role: str, namespace: str | None = None) -> JSON:
    meta: JSON = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SCHEDULER_NAME}]}


#: The RBAC of the scheduler-plugins scheduler, which runs here as user ``scheduler-plugins-scheduler`` (its client
#: certificate's CN). It is a kube-scheduler build, so it gets what kube-apiserver's bootstrap policy gives
#: kube-scheduler (the ``system:kube-scheduler`` and ``system:volume-scheduler`` ClusterRoles), the
#: ``extension-apiserver-authentication-reader`` Role its delegated authentication reads, and the
#: ``scheduling.x-k8s.io`` resources the Coscheduling and CapacityScheduling plugins read and write (their informers
#: list and watch PodGroups and ElasticQuotas; Coscheduling patches PodGroup status), as scheduler-plugins' own
#: ``manifests/install/charts/as-a-second-scheduler`` ClusterRole grants them.
SCHEDULER_PLUGINS_RBAC: list[JSON] = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "scheduler-plugins-scheduler-extra"},
     "rules": [{"apiGroups": ["scheduling.x-k8s.io"],
                "resources": ["podgroups", "elasticquotas", "podgroups/status", "elasticquotas/status"],
                "verbs": ["get", "list", "watch", "create", "delete", "update", "patch"]}]},
    _binding("ClusterRoleBinding", "scheduler-plugins-scheduler-extra", "ClusterRole",
             "scheduler-plugins-scheduler-extra"),
    _binding("ClusterRoleBinding", "scheduler-plugins-scheduler-as-kube-scheduler", "ClusterRole",
             "system:kube-scheduler"),
    _binding("ClusterRoleBinding", "scheduler-plugins-scheduler-as-volume-scheduler", "ClusterRole",
             "system:volume-scheduler"),
    _binding("RoleBinding", "scheduler-plugins-scheduler-auth-reader", "Role",
             "extension-apiserver-authentication-reader", "kube-system"),
]


def pod_group_crd() -> JSON:
    """The PodGroup CRD (``scheduling.x-k8s.io/v1alpha1``) as admit's own chart installs it
    (``podGroupCRD.install: true``, :func:`render_chart`): the tests run on the CRD users get from admit."""
    for doc in render_chart({"podGroupCRD": {"install": True}}):
        if doc.get("kind") == "CustomResourceDefinition" and doc["metadata"]["name"] == "podgroups.scheduling.x-k8s.io":
            return doc
    raise PlaneError("the chart rendered no podgroups.scheduling.x-k8s.io CRD with podGroupCRD.install=true")


# ======================================================================================================================
# The plane
# ======================================================================================================================


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class AdmitProcess:
    """One ``admit serve`` subprocess.

    Attributes:
        name: its identity (also ``--lease`` holder identity through ``POD_NAME``).
        url: ``https://127.0.0.1:PORT``. port: the port. log: its output file. args: the extra flags it got.
        popen: the ``subprocess.Popen``.
    """

    name: str
    url: str
    port: int
    log: Path
    args: list[str]
    popen: subprocess.Popen

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        """Everything it logged so far."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit code. Idempotent."""
        return _stop(self.popen, timeout)


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the process that started it dies (Linux ``prctl(PR_SET_PDEATHSIG)``),
    so a test run killed with SIGKILL leaves no etcd or kube-apiserver running on a shared machine. Not SIGTERM:
    kube-apiserver then began a graceful shutdown with etcd gone and was still running 20 minutes later."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(popen: subprocess.Popen, timeout: float = 5.0) -> int | None:
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            popen.wait(5)
    return popen.returncode


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + scheduler-plugins scheduler on loopback (module docstring).

    Args:
        binaries: ``{name: path}`` of the binaries (or one folder holding them); default :func:`find_binaries` for
            ``components``.
        components: which components to start, a tuple of :data:`TIERS` (default ``TIERS["coscheduling"]``, or
            ``TIERS["native"]`` with ``native_gang``); etcd and kube-apiserver are always started.
        workdir: folder for data, certificates, kubeconfigs and logs (default: a new temporary folder, removed by
            :meth:`stop` unless ``keep``).
        permit_waiting_seconds: Coscheduling ``permitWaitingTimeSeconds`` (how long bound-to-be pods of an
            incomplete gang wait in Permit before they are rejected).
        pod_group_backoff_seconds: Coscheduling ``podGroupBackoffSeconds``; 0 (scheduler-plugins' default, and what
            its Helm chart installs) turns the backoff off. With a backoff, no scheduler-plugins controller and
            nothing else to schedule, a gang retried during its backoff (its first pod was tried before its siblings
            existed) stays unschedulable until kube-scheduler's 5-minute flush (docs/operations.md, "Why are my pods
            Pending?"), so the shared test plane keeps the default.
        kubelet: run the :class:`Kubelet` thread.
        feature_gates: more ``--feature-gates`` for kube-apiserver, kube-controller-manager and kube-scheduler
            (``{"WorkloadWithJob": True}``), merged into one flag with :data:`NATIVE_GANG_GATES`. A gate the binaries
            do not know stops the component ("unrecognized feature gate"): :meth:`start` raises ``PlaneError`` with
            that log line.
        native_gang: also run Kubernetes' native gang scheduling: :data:`NATIVE_GANG_GATES` on
            kube-apiserver and kube-controller-manager, :data:`NATIVE_GANG_RUNTIME_CONFIG` on kube-apiserver, and the
            stock ``kube-scheduler`` (profile ``default-scheduler``, user ``system:kube-scheduler``) with the gates.

    Attributes (after :meth:`start`):
        server: ``https://127.0.0.1:PORT`` of kube-apiserver. kubeconfig: the admin kubeconfig path.
        ca_file: the cluster CA (PEM path; it also signed admit's serving certificate). ca_pem: its bytes.
        kubelet: the :class:`Kubelet`. admits: the ``admit serve`` processes started.
    """

    def __init__(self, binaries: dict[str, Path] | Path | None = None, workdir: Path | None = None, *,
                 permit_waiting_seconds: int = 3, pod_group_backoff_seconds: int = 0, kubelet: bool = True,
                 keep: bool = False, native_gang: bool = False, components: Iterable[str] | None = None,
                 feature_gates: dict[str, bool] | None = None) -> None:
        self.native_gang = native_gang
        self.feature_gates = dict(feature_gates or {})
        wanted = tuple(components) if components is not None else TIERS["native" if native_gang else "coscheduling"]
        self.components = tuple(dict.fromkeys(TIERS["apiserver"] + wanted + (NATIVE_GANG if native_gang else ())))
        if isinstance(binaries, Path):
            binaries = {name: binaries / name for name in self.components}
        self.binaries = binaries
        self._own_workdir = workdir is None
        self.workdir = workdir
        self.permit_waiting_seconds = permit_waiting_seconds
        self.pod_group_backoff_seconds = pod_group_backoff_seconds
        self.keep = keep
        self._want_kubelet = kubelet
        self._procs: list[_Proc] = []
        self.admits: list[AdmitProcess] = []
        self.kubelet: Kubelet | None = None
        self.server = ""
        self.kubeconfig = Path()
        self.ca_file = Path()
        self.ca_pem = b""
        self._ssl: ssl.SSLContext | None = None
        self._admit_cert: tuple[Path, Path] | None = None
        self._local = threading.local()

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 90.0) -> "ControlPlane":
        """Start everything (a few seconds); on any failure stop what was started and raise.

        Raises:
            NoBinaries: no binaries. PlaneError: a component did not become healthy (message: its log tail).
        """
        for attempt in (1, 2):
            try:
                self._start(timeout)
                return self
            except BaseException as e:
                self.stop()
                # free_port() cannot reserve a port: another process (another plane on a shared machine) may take
                # it before the component binds it. Start once more on new ports.
                if attempt == 1 and isinstance(e, PlaneError) and "address already in use" in str(e):
                    log.warning("a port was taken meanwhile; starting the control plane again: %s", str(e)[:200])
                    if self._own_workdir:
                        self.workdir = None
                    continue
                raise
        return self

    def _start(self, timeout: float) -> None:
        binaries = self.binaries or find_binaries(self.components)
        has = set(self.components)
        gates = [feature_gates_flag(self.native_gang, self.feature_gates)] if (
            self.native_gang or self.feature_gates) else []
        self.binaries = binaries
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="admit-plane-"))
        wd = self.workdir
        wd.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        deadline = started + timeout
        api_port = free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        pki = self._pki(wd)
        # etcd
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn("etcd", [
            str(binaries["etcd"]), "--name", "test", "--data-dir", str(wd / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._wait(lambda: _http_ok(f"{etcd_url}/health"), "etcd", deadline)
        # kube-apiserver
        self._spawn("kube-apiserver", [
            str(binaries["kube-apiserver"]), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--tls-cert-file={pki['apiserver.crt']}", f"--tls-private-key-file={pki['apiserver.key']}",
            f"--client-ca-file={pki['ca.crt']}", f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=Node,RBAC",
            # API Priority and Fairness stays on, as in every cluster (its default): with it off kube-apiserver
            # stores FlowSchemas but never applies them (k8s.io/apiserver pkg/server/config.go
            # DefaultBuildHandlerChain: WithPriorityAndFairness only when FlowControl is set, else
            # WithMaxInFlightLimit), and tests/real/test_real_throttling.py throttles admit through one.
            "--profiling=false", "-v=1",
            *gates, *([NATIVE_GANG_RUNTIME_CONFIG] if self.native_gang else []),
        ])
        self._wait(lambda: self._healthy("/readyz"), "kube-apiserver", deadline)
        # the scheduler-plugins RBAC and the PodGroup CRD, before the scheduler starts
        for doc in SCHEDULER_PLUGINS_RBAC:
            self.apply(doc)
        self.install_crd(pod_group_crd())
        if "kube-controller-manager" in has:
            self._start_controller_manager(binaries, pki, gates)
        if SCHEDULER_NAME in has:
            self._start_scheduler_plugins(binaries, pki, wd)
        if "kube-scheduler" in has:
            self._start_kube_scheduler(binaries, pki, wd, gates)
        if "kube-controller-manager" in has:  # the default namespace's ServiceAccount proves it works
            self._wait(lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"),
                       "kube-controller-manager (default ServiceAccount)", deadline)
        else:
            self._wait(lambda: self._exists("/api/v1/namespaces/default"), "kube-apiserver (default namespace)",
                       deadline)
            self._ensure_default_service_account("default")
        if self._want_kubelet:
            self.kubelet = Kubelet(self)
            self.kubelet.start()
        log.info("control plane up in %.1fs at %s (%s; %s)", time.monotonic() - started, self.server, wd,
                 ", ".join(self.components))

    def _start_controller_manager(self, binaries: dict[str, Path], pki: dict[str, Path], gates: list[str]) -> None:
        self._spawn("kube-controller-manager", [
            str(binaries["kube-controller-manager"]), f"--kubeconfig={pki['kcm.kubeconfig']}",
            f"--authentication-kubeconfig={pki['kcm.kubeconfig']}",
            f"--authorization-kubeconfig={pki['kcm.kubeconfig']}",
            "--controllers=*,-nodelifecycle,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki['sa.key']}", f"--root-ca-file={pki['ca.crt']}",
            f"--cluster-signing-cert-file={pki['ca.crt']}", f"--cluster-signing-key-file={pki['ca.key']}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--profiling=false", "-v=1",
            # React quickly: the garbage collector and the workload controllers are what the tests wait on.
            "--concurrent-gc-syncs=20", *gates,
        ])

    def _start_scheduler_plugins(self, binaries: dict[str, Path], pki: dict[str, Path], wd: Path) -> None:
        """The scheduler-plugins scheduler with one profile, ``scheduler-plugins-scheduler``: Coscheduling on
        (``multiPoint``), PrioritySort off (Coscheduling brings its own queue sort), as scheduler-plugins'
        ``manifests/coscheduling/scheduler-config.yaml`` configures it."""
        sched_cfg = _write(wd / "scheduler.yaml", yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(pki["sched.kubeconfig"])},
            "profiles": [{
                "schedulerName": SCHEDULER_NAME,
                "plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}],
                                           "disabled": [{"name": "PrioritySort"}]}},
                "pluginConfig": [{"name": "Coscheduling", "args": {
                    "permitWaitingTimeSeconds": self.permit_waiting_seconds,
                    "podGroupBackoffSeconds": self.pod_group_backoff_seconds}}],
            }],
        }))
        self._spawn("scheduler-plugins-scheduler", [
            str(binaries[SCHEDULER_NAME]), f"--config={sched_cfg}",
            f"--authentication-kubeconfig={pki['sched.kubeconfig']}",
            f"--authorization-kubeconfig={pki['sched.kubeconfig']}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "-v=1",
        ])

    def _start_kube_scheduler(self, binaries: dict[str, Path], pki: dict[str, Path], wd: Path,
                              gates: list[str]) -> None:
        """The stock kube-scheduler: its ``default-scheduler`` profile runs the GangScheduling plugin when the
        gates are on."""
        native_cfg = _write(wd / "kube-scheduler.yaml", yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(pki["ksched.kubeconfig"])},
        }))
        self._spawn("kube-scheduler", [
            str(binaries["kube-scheduler"]), f"--config={native_cfg}",
            f"--authentication-kubeconfig={pki['ksched.kubeconfig']}",
            f"--authorization-kubeconfig={pki['ksched.kubeconfig']}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "-v=1", *gates,
        ])

    def stop(self) -> None:
        """Stop every process started (admit first, then the scheduler, controller-manager, apiserver, etcd) and
        remove the temporary workdir. Idempotent; never raises."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        for admit in self.admits:
            with contextlib.suppress(Exception):
                admit.stop()
        for proc in reversed(self._procs):
            with contextlib.suppress(Exception):
                _stop(proc.popen)
        self._procs.clear()
        self.admits.clear()
        self._ssl = None
        self._local = threading.local()
        if self._own_workdir and self.workdir is not None and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _pki(self, wd: Path) -> dict[str, Path]:
        d = wd / "pki"
        d.mkdir(exist_ok=True)
        ca = generate_ca("admit test plane CA", days=2)
        self._ca = ca
        api = generate_serving_certificate(ca, "kubernetes", "default", dns_names=["localhost"],
                                           ip_addresses=["127.0.0.1", "10.0.0.1"], days=2)
        admit = generate_serving_certificate(ca, "admit", "admit-system", dns_names=["localhost"],
                                             ip_addresses=["127.0.0.1"], days=2)
        sa = ec.generate_private_key(ec.SECP256R1())
        files = {
            "ca.crt": _write(d / "ca.crt", ca.cert_pem, 0o644), "ca.key": _write(d / "ca.key", ca.key_pem),
            "apiserver.crt": _write(d / "apiserver.crt", api.cert_pem, 0o644),
            "apiserver.key": _write(d / "apiserver.key", api.key_pem),
            "admit.crt": _write(d / "admit.crt", admit.cert_pem, 0o644),
            "admit.key": _write(d / "admit.key", admit.key_pem),
            "sa.key": _write(d / "sa.key", sa.private_bytes(serialization.Encoding.PEM,
                                                            serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption())),
            "sa.pub": _write(d / "sa.pub", sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644),
        }
        for name, cn, orgs in (("admin", "admin", ["system:masters"]), ("kcm", "system:kube-controller-manager", []),
                               ("sched", SCHEDULER_NAME, []), ("ksched", "system:kube-scheduler", [])):
            user = client_certificate(ca, cn, orgs)
            files[f"{name}.crt"] = _write(d / f"{name}.crt", user.cert_pem, 0o644)
            files[f"{name}.key"] = _write(d / f"{name}.key", user.key_pem)
            files[f"{name}.kubeconfig"] = _write(d / f"{name}.kubeconfig",
                                                 _kubeconfig(self.server, ca.cert_pem, user, name))
        self.ca_file = files["ca.crt"]
        self.ca_pem = ca.cert_pem
        self.kubeconfig = files["admin.kubeconfig"]
        self._admit_cert = (files["admit.crt"], files["admit.key"])
        self._pki_files = files
        return files

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> _Proc:
        assert self.workdir is not None
        log_path = self.workdir / f"{name}.log"
        out = log_path.open("ab")
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=self.workdir, env=env, start_new_session=True, preexec_fn=_die_with_parent)
        out.close()
        proc = _Proc(name, popen, log_path, list(argv), env)
        self._procs.append(proc)
        return proc

    def restart(self, name: str, down: float = 0.0, timeout: float = 90.0) -> float:
        """Stop component ``name`` (SIGTERM, as a rolling upgrade or a crash-restarted static pod), keep it down for
        ``down`` seconds, and start it again with the same flags (same port, same data). For ``kube-apiserver``,
        waits until ``/readyz`` answers again. Returns the seconds the component was unavailable."""
        proc = next(p for p in self._procs if p.name == name)
        started = time.monotonic()
        _stop(proc.popen)
        time.sleep(down)
        assert self.workdir is not None
        out = proc.log.open("ab")
        proc.popen = subprocess.Popen(proc.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      cwd=self.workdir, env=proc.env, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        out.close()
        if name == "kube-apiserver":
            self._wait(lambda: self._healthy("/readyz"), "kube-apiserver (restarted)", time.monotonic() + timeout)
        return time.monotonic() - started

    def _wait(self, check: Any, what: str, deadline: float) -> None:
        while True:
            for proc in self._procs:
                if proc.popen.poll() is not None:
                    raise PlaneError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            try:
                if check():
                    return
            except (OSError, PlaneError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in self._procs)
                raise PlaneError(f"{what} not ready in time\n{tails}")
            time.sleep(0.1)

    def logs(self, name: str) -> str:
        """The output of component ``name`` (``etcd``, ``kube-apiserver``, ...) so far."""
        proc = next((p for p in self._procs if p.name == name), None)
        return proc.log.read_text(errors="replace") if proc is not None else ""

    # ------------------------------------------------------------------ REST (admin, synchronous)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
            ctx.load_cert_chain(str(self._pki_files["admin.crt"]), str(self._pki_files["admin.key"]))
            self._ssl = ctx
        return self._ssl

    def connect(self, timeout: float = 30.0) -> http.client.HTTPSConnection:
        """A new HTTPS connection to kube-apiserver as the admin (client certificate), not shared with :meth:`rest`:
        for a request whose answer the caller reads later, or never (closing the connection cancels it on the
        server, as Go's ``net/http`` cancels a request's context when its client goes away)."""
        host, port = self.server.removeprefix("https://").split(":")
        return http.client.HTTPSConnection(host, int(port), context=self._context(), timeout=timeout)

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.connect()
            self._local.conn = conn
        return conn

    def rest(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
             content_type: str = "application/json", ok: Iterable[int] = ()) -> Any:
        """One API request as the admin; returns the decoded JSON answer (``None`` for a status in ``ok``).

        Args:
            path: ``/api/v1/...`` or ``/apis/...``. query: query parameters. content_type: of ``body`` (e.g.
                ``application/merge-patch+json``). ok: error statuses to return ``None`` for instead of raising.

        Raises:
            PlaneError: any other non-2xx answer (``status``, ``body`` = the decoded Status).
        """
        url = path + ("?" + urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = raw.decode(errors="replace")
        if 200 <= resp.status < 300:
            return doc
        if resp.status in ok:
            return None
        message = doc.get("message") if isinstance(doc, dict) else doc
        raise PlaneError(f"{method} {path}: {resp.status} {message}", resp.status, doc)

    def _healthy(self, path: str) -> bool:
        self.rest("GET", path)  # raises until it answers 2xx
        return True

    def _exists(self, path: str) -> bool:
        return self.rest("GET", path, ok=(404,)) is not None

    def apply(self, obj: JSON) -> JSON:
        """Create ``obj`` (cluster-scoped or with ``metadata.namespace``), or replace it if it exists."""
        path = api_path(obj)
        name = obj["metadata"]["name"]
        try:
            return self.rest("POST", path, body=obj)
        except PlaneError as e:
            if e.status != 409:
                raise
        current = self.rest("GET", f"{path}/{name}")
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        return self.rest("PUT", f"{path}/{name}", body=obj)

    def install_crd(self, manifest: Path | JSON, timeout: float = 30.0) -> JSON:
        """Create a CustomResourceDefinition (a YAML path or the object) and wait until it is Established."""
        crd = manifest if isinstance(manifest, dict) else _yaml_docs(Path(manifest))[0]
        self.apply(crd)
        name = crd["metadata"]["name"]
        deadline = time.monotonic() + timeout
        while True:
            got = self.rest("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                return got
            if time.monotonic() > deadline:
                raise PlaneError(f"CRD {name} not Established: {conds}")
            time.sleep(0.05)

    def create_namespace(self, name: str, labels: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        """Create a namespace and wait for its ``default`` ServiceAccount (pods are refused until it exists: the
        ServiceAccount admission plugin). Without kube-controller-manager the ServiceAccount is created here, as
        its ServiceAccount controller would (``pkg/controller/serviceaccount``), the way envtest users do."""
        self.rest("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": name, "labels": labels or {}}})
        if "kube-controller-manager" not in self.components:
            self._ensure_default_service_account(name)
        deadline = time.monotonic() + timeout
        while not self._exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"):
            if time.monotonic() > deadline:
                raise PlaneError(f"namespace {name}: no default ServiceAccount after {timeout}s")
            time.sleep(0.05)

    def _ensure_default_service_account(self, namespace: str) -> None:
        self.rest("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", ok=(409,),
                  body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace (in the background; its pods are force-deleted by the kubelet thread)."""
        self.rest("DELETE", f"/api/v1/namespaces/{name}", ok=(404,))

    # ------------------------------------------------------------------ nodes

    def add_node(self, name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110",
                 labels: dict[str, str] | None = None) -> JSON:
        """A Ready fake node with that capacity (= allocatable); the ``not-ready`` taint is cleared."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        capacity = {"cpu": cpu, "memory": memory, "pods": pods}
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "type": "fake", **(labels or {})}},
            "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node, no kubelet",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}]},
        }
        self.rest("POST", "/api/v1/nodes", body=node)
        got = self.rest("PATCH", f"/api/v1/nodes/{name}", body={"spec": {"taints": None}},
                        content_type="application/merge-patch+json")
        if not (got.get("status") or {}).get("allocatable"):
            self.rest("PATCH", f"/api/v1/nodes/{name}/status", body={"status": node["status"]},
                      content_type="application/merge-patch+json")
        return got

    def delete_node(self, name: str) -> None:
        self.rest("DELETE", f"/api/v1/nodes/{name}", ok=(404,))

    # ------------------------------------------------------------------ admit

    def start_admit(self, name: str | None = None, args: Iterable[str] = (), *, register: bool = True,
                    values: JSON | None = None, wait: float = 30.0, chart_rbac: bool = True) -> AdmitProcess:
        """Start ``admit serve`` (``python -m admit.cli serve``) over HTTPS on a free port with the test CA's serving
        certificate and the admin kubeconfig, wait for ``/readyz``, and (``register``) register the chart's webhook
        configurations (rendered with ``values``) pointing at it.

        ``args`` are extra flags (``--orphan-grace-period 2``, ``--no-controller`` ...); defaults added unless
        given: ``--namespace admit-system --lease-namespace admit-system``. The process identity (Lease holder) is
        ``name`` (``POD_NAME``). Several replicas: call again with ``register=False`` (kube-apiserver then calls
        only the registered one, as a Service would pick one) or ``True`` to move the webhooks to the new one.

        ``chart_rbac`` (default): admit runs with the chart's own RBAC, as its ServiceAccount would: the chart's
        ServiceAccount, (Cluster)Roles and bindings (rendered with ``values``) are applied, and admit's kubeconfig
        holds a client certificate for ``system:serviceaccount:admit-system:<account>`` (RBAC matches a
        ServiceAccount subject by that user name). ``False``: the cluster admin.
        """
        assert self._admit_cert is not None and self.workdir is not None
        name = name or f"admit-{len(self.admits)}"
        port = free_port()
        args = list(args)
        self._ensure_namespace("admit-system")
        kubeconfig = self._chart_identity(values) if chart_rbac else self.kubeconfig
        flags = ["--host", "127.0.0.1", "--port", str(port), "--cert-mode", "files",
                 "--tls-cert-file", str(self._admit_cert[0]), "--tls-key-file", str(self._admit_cert[1]),
                 "--kubeconfig", str(kubeconfig)]
        if "--namespace" not in args:
            flags += ["--namespace", "admit-system"]
        if "--lease-namespace" not in args:
            flags += ["--lease-namespace", "admit-system"]
        log_path = self.workdir / f"{name}.log"
        out = log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": name, "HOSTNAME": name}
        popen = subprocess.Popen([sys.executable, "-m", "admit.cli", "serve", *flags, *args], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                 start_new_session=True, preexec_fn=_die_with_parent)
        out.close()
        proc = AdmitProcess(name, f"https://127.0.0.1:{port}", port, log_path, args, popen)
        self.admits.append(proc)
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + wait
        while True:
            if popen.poll() is not None:
                raise PlaneError(f"admit serve {name} exited with {popen.returncode}:\n{proc.output()[-3000:]}")
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
                conn.close()
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                raise PlaneError(f"admit serve {name} not ready in {wait}s:\n{proc.output()[-3000:]}")
            time.sleep(0.1)
        if register:
            self.register_webhooks(proc.url, values)
            self.wait_webhooks_answer(values=values)
        return proc

    def wait_webhooks_answer(self, namespace: str = "default", values: JSON | None = None,
                             timeout: float = 60.0) -> None:
        """Wait until kube-apiserver calls the admit its webhook configurations name: dry-run creates of a gang
        Deployment in ``namespace`` (one the chart's namespaceSelector sends to admit) until one comes back with
        admit's ``<prefix>/managed`` label, which both gang backends put on a workload they gang. kube-apiserver goes
        on calling the webhooks it had, or none, until its informer delivers the configurations just written
        (``k8s.io/apiserver`` ``pkg/admission/plugin/webhook/configuration``): on a loaded machine longer than any
        fixed sleep, and a test's first write could beat it. A dry run stores nothing (``sideEffects:
        NoneOnDryRun``); ``values`` are the chart values the webhooks were rendered with (their annotation prefix).

        Raises:
            PlaneError: no answer from admit within ``timeout`` seconds (the last refusal, if any).
        """
        prefix = ((values or {}).get("config") or {}).get("annotationPrefix") or "gang.admit.dev"
        name = "webhook-probe"
        pod = {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
        body = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "annotations": {f"{prefix}/min-member": "2"}},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                got = self.rest("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", body=body,
                                query={"dryRun": "All"})
                if ((got.get("metadata") or {}).get("labels") or {}).get(f"{prefix}/managed") == "true":
                    return
                last = "answered without admit's mutation"
            except PlaneError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise PlaneError(f"kube-apiserver did not call admit's webhooks within {timeout}s: {last}")
            time.sleep(0.2)

    def _chart_identity(self, values: JSON | None) -> Path:
        """Apply the chart's RBAC objects; a kubeconfig for its ServiceAccount (see :meth:`start_admit`)."""
        assert self.workdir is not None
        account = None
        for doc in render_chart(values):
            if doc.get("kind") in RBAC_KINDS:
                self.apply(doc)
                if doc["kind"] == "ServiceAccount":
                    account = doc["metadata"]["name"]
        if account is None:
            raise PlaneError("the chart rendered no ServiceAccount")
        ns = "admit-system"
        user = client_certificate(self._ca, f"system:serviceaccount:{ns}:{account}",
                                  ["system:serviceaccounts", f"system:serviceaccounts:{ns}"])
        return _write(self.workdir / "pki" / "admit-sa.kubeconfig", _kubeconfig(self.server, self.ca_pem, user, account))

    def register_webhooks(self, url: str, values: JSON | None = None) -> list[JSON]:
        """Create or replace the chart's two webhook configurations, pointing at ``url`` (see
        :func:`render_webhooks`); returns them as stored."""
        return [self.apply(doc) for doc in render_webhooks(url, self.ca_pem, values)]

    def _ensure_namespace(self, name: str) -> None:
        if not self._exists(f"/api/v1/namespaces/{name}"):
            try:
                self.create_namespace(name)
            except PlaneError as e:
                if e.status != 409:
                    raise


def api_path(obj: JSON) -> str:
    """The collection path of ``obj`` (``/apis/apps/v1/namespaces/x/deployments``), from its apiVersion/kind with
    the usual English plural (enough for the kinds the tests create)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    lower = kind.lower()
    plural = lower + "es" if lower.endswith(("s", "ch")) else (lower[:-1] + "ies" if lower.endswith("y") else
                                                               lower + "s")
    ns = (obj.get("metadata") or {}).get("namespace")
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"


def _yaml_docs(path: Path) -> list[JSON]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _http_ok(url: str) -> bool:
    host, _, rest = url.removeprefix("http://").partition("/")
    h, p = host.split(":")
    conn = http.client.HTTPConnection(h, int(p), timeout=2)
    try:
        conn.request("GET", "/" + rest)
        return conn.getresponse().status == 200
    finally:
        conn.close()


# ======================================================================================================================
# The kubelet's part
# ======================================================================================================================


class Kubelet(threading.Thread):
    """What a kubelet would do for fake nodes, polled every ``interval`` seconds (0.2): a bound (``spec.nodeName``)
    Pending pod gets ``status.phase: Running`` with ``Ready``/``ContainersReady``/``Initialized``/``PodScheduled``
    conditions (through ``pods/status``); a bound pod with a ``deletionTimestamp`` is deleted with grace period 0.

    Attributes:
        enabled: clear it to pause (pods then stay Pending / Terminating). marked: pods made Running, as
            ``(namespace, name)``.
    """

    def __init__(self, plane: ControlPlane, interval: float = 0.2) -> None:
        super().__init__(name="fake kubelet", daemon=True)
        self.plane = plane
        self.interval = interval
        self.enabled = True
        self.marked: list[tuple[str, str]] = []
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(5)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            if not self.enabled:
                continue
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - keep polling; the plane may be stopping
                log.debug("kubelet sync failed: %s", e)

    def sync(self) -> None:
        """One pass over the bound pods (also callable from a test)."""
        pods = self.plane.rest("GET", "/api/v1/pods", query={"fieldSelector": "spec.nodeName!="})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for pod in pods.get("items") or []:
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if meta.get("deletionTimestamp"):
                self.plane.rest("DELETE", path, body={"gracePeriodSeconds": 0}, ok=(404, 409))
                continue
            status = pod.get("status") or {}
            if status.get("phase") != "Pending":
                continue
            conds = [{"type": t, "status": "True", "lastTransitionTime": now}
                     for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
            containers = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                           "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}}
                          for c in pod["spec"].get("containers") or []]
            body = {"metadata": {"uid": meta["uid"]},
                    "status": {"phase": "Running", "conditions": conds, "containerStatuses": containers,
                               "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                               "startTime": now}}
            self.plane.rest("PATCH", f"{path}/status", body=body, content_type="application/strategic-merge-patch+json",
                            ok=(404, 409, 422))
            self.marked.append((meta["namespace"], meta["name"]))
