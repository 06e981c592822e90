"""The real control-plane tier: etcd, kube-apiserver, kube-controller-manager and the scheduler-plugins scheduler
(Coscheduling) on loopback, with ``admit serve`` as a subprocess behind the chart's own webhook configurations. The
launcher is :mod:`tests.support.plane`; this file shares one plane across the whole test run.

Binaries are brought by whoever runs the tier (docs/testing.md says where to get them): ``$ADMIT_K8S_ASSETS`` names a
folder of plain ``etcd``, ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` and
``scheduler-plugins-scheduler``; ``$KUBEBUILDER_ASSETS`` (envtest's folder) is read for whatever the first lacks. Each
test declares what it needs with ``@pytest.mark.needs(TIER)`` (a module's ``pytestmark``, else ``coscheduling``), one
of :data:`tests.support.plane.TIERS`: ``apiserver`` (etcd + kube-apiserver: admission through kube-apiserver,
objects stored through CRDs), ``controllers`` (+ kube-controller-manager: ReplicaSets, Job pods, the garbage
collector, namespace deletion), ``coscheduling`` (+ the scheduler-plugins scheduler: pods bound or not) and
``native`` (+ the stock kube-scheduler with the native gang gates). A test whose binaries are missing is skipped before
any plane starts, all of them under one ``SKIPPED [N]`` line per missing set; ``ADMIT_REQUIRE_REAL=1`` makes that a
failure instead, for whoever wants the tier enforced.

Run the tier alone: ``.venv/bin/python -m pytest -q -m real`` (or ``tests/real``). ``ADMIT_PLANE_KEEP=1`` keeps the
plane's folder (every component's log, admit's included) and prints where it is.

Fixtures (every test module under ``tests/real`` gets the ``real`` marker):

``plane`` (session): a :class:`RealPlane`, started once, stopped at the end of the run (also on failure):

- ``plane.cp``: the :class:`tests.support.plane.ControlPlane` (``cp.rest(method, path, body=None, query=None,
  content_type="application/json", ok=())`` is a synchronous admin REST call returning decoded JSON;
  ``cp.apply(obj)``, ``cp.install_crd(path)``, ``cp.logs("kube-apiserver")``, ``cp.server``, ``cp.ca_file``;
  ``cp.register_webhooks(url, values)`` points the chart's webhooks elsewhere, and kube-apiserver calls them only
  once its informer has them: ``cp.wait_webhooks_answer(ns)`` waits until admit answers again, never a sleep);
- ``plane.kubeconfig``: path of the admin kubeconfig (``kubernetes_asyncio.config.load_kube_config`` or
  ``admit serve --kubeconfig``); the ``kube`` fixture below gives a ready kubernetes-asyncio ``ApiClient``;
- nodes: ``node-1`` and ``node-2``, 4 CPU / 8Gi / 110 pods each, Ready, untainted;
  ``plane.cp.add_node(name, cpu=, memory=, pods=, labels=)`` adds one (delete it in the test:
  ``plane.cp.delete_node(name)``), since other tests count on the capacity above;
- the kubelet: ``plane.cp.kubelet`` (a thread) marks bound pods Running + Ready every 0.2 s and force-deletes bound
  pods left Terminating; ``plane.cp.kubelet.enabled = False`` pauses it (set it back in a ``finally``);
- admit: ``plane.admit`` is the ``admit serve`` the webhooks point at (an
  :class:`tests.support.plane.AdmitProcess`: ``.url``, ``.log``, ``.output()``, ``.stop()``, ``.running()``),
  started with ``--orphan-grace-period 5`` and the chart's own RBAC (its ServiceAccount's ClusterRole and Role,
  applied from the rendered chart; admit authenticates as ``system:serviceaccount:admit-system:admit`` with a client
  certificate); ``plane.start_admit(name, args=[...], register=False)`` starts
  another replica with other flags (``register=True`` moves the webhooks to it and makes it ``plane.admit``);
  replicas started in a test are stopped at the end of the run, or by the test;
- CRDs: the PodGroup CRD (rendered from admit's chart) and every ``tests/real/crds/*.yaml`` (TFJob, SparkApplication),
  installed before admit starts so its controller watches them from the start;
- timings: Coscheduling ``permitWaitingTimeSeconds`` 3 (:data:`PERMIT_WAIT`); use
  ``gang.admit.dev/schedule-timeout-seconds`` of a few seconds in tests.

``ns`` (function): a fresh namespace named after the test (``t-<name>-<random>``), with its ``default``
ServiceAccount; deleted after the test.

``kube`` (function, async): a ``kubernetes_asyncio.client.ApiClient`` for the admin kubeconfig, closed after the test.

Helpers in ``tests/real/support.py``: ``wait_for`` polls a callable until it returns something truthy; ``pods`` lists
a namespace's pods; ``bound`` keeps those with ``spec.nodeName``; ``gang_deployment`` and friends build manifests.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Iterable

import pytest

from tests.support.plane import TIERS, AdmitProcess, ControlPlane, available_binaries, missing_message
from tests.real.support import PERMIT_WAIT

HERE = Path(__file__).resolve().parent
CRDS = HERE / "crds"
NODES = ("node-1", "node-2")
NODE_CPU = "4"


#: Set to 1 (or true) to fail, not skip, a real test whose binaries are missing.
REQUIRE_ENV = "ADMIT_REQUIRE_REAL"
DEFAULT_TIER = "coscheduling"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.real)


def tier_of(item: pytest.Item) -> str:
    """The tier a real test declared (its closest ``needs`` mark), else :data:`DEFAULT_TIER`.

    Raises:
        pytest.UsageError: a tier that :data:`tests.support.plane.TIERS` does not know.
    """
    mark = item.get_closest_marker("needs")
    tier = mark.args[0] if mark else DEFAULT_TIER
    if tier not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: needs({tier!r}) is none of {', '.join(TIERS)}")
    return tier


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or with ``ADMIT_REQUIRE_REAL=1`` fail) a real test whose tier's binaries are missing, before any of its
    fixtures starts a plane. The skip is raised here, at one place with one reason per missing set, so pytest's
    summary folds every such test into one ``SKIPPED [N]`` line."""
    if HERE not in Path(str(item.fspath)).resolve().parents:
        return
    found = _found()
    missing = [name for name in TIERS[tier_of(item)] if name not in found]
    if not missing:
        return
    # With no binary at all every test gets the same reason (one line for the run); with some, each missing set
    # says what it still needs.
    reason = f"real control-plane tier: {missing_message(missing if found else ['Kubernetes binaries'])}"
    if os.environ.get(REQUIRE_ENV, "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set)", pytrace=False)
    pytest.skip(reason)


_FOUND: dict[str, Path] | None = None


def _found() -> dict[str, Path]:
    """:func:`tests.support.plane.available_binaries`, looked up once per run."""
    global _FOUND
    if _FOUND is None:
        _FOUND = available_binaries()
    return _FOUND


class RealPlane:
    """What the ``plane`` fixture yields (see the module docstring)."""

    def __init__(self, cp: ControlPlane, admit: AdmitProcess) -> None:
        self.cp = cp
        self.admit = admit

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    def start_admit(self, name: str, args: Iterable[str] = (), *, register: bool = False) -> AdmitProcess:
        """Another ``admit serve`` replica (same Lease name unless ``args`` says otherwise)."""
        proc = self.cp.start_admit(name, args, register=register)
        if register:
            self.admit = proc
        return proc


@pytest.fixture(scope="session")
def plane() -> Iterable[RealPlane]:
    # Every component of the Coscheduling tier that was found; the hook above already skipped the tests that need
    # one that was not.
    found = _found()
    components = tuple(name for name in TIERS[DEFAULT_TIER] if name in found)
    keep = bool(os.environ.get("ADMIT_PLANE_KEEP"))
    cp = ControlPlane(found, permit_waiting_seconds=PERMIT_WAIT, keep=keep, components=components)
    cp.start()
    try:
        for name in NODES:
            cp.add_node(name, cpu=NODE_CPU, memory="8Gi")
        for crd in sorted(CRDS.glob("*.yaml")):
            cp.install_crd(crd)
        admit = cp.start_admit("admit-0", ["--orphan-grace-period", "5"])
        yield RealPlane(cp, admit)
    finally:
        cp.stop()
        if keep:
            print(f"\nADMIT_PLANE_KEEP: logs and data of the control plane are in {cp.workdir}")


@pytest.fixture
def ns(plane: RealPlane, request: pytest.FixtureRequest) -> Iterable[str]:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().removeprefix("test_")).strip("-")
    name = f"t-{base[:44].strip('-')}-{uuid.uuid4().hex[:5]}"
    plane.cp.create_namespace(name)
    yield name
    plane.cp.delete_namespace(name)


@pytest.fixture
async def kube(plane: RealPlane):
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(plane.kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield api_client
