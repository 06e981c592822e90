"""Test session set-up.

``ADMIT_TEST_PLAIN_INSTALL=1`` runs the tests as a plain ``pip install .`` would (no ``fast`` extra): orjson and
uvloop cannot be imported, so admit takes the stdlib JSON backend and the asyncio loop (``tests/hardening/test_fuzz.py`` runs
itself again that way).
"""

import os
import sys

import pytest

if os.environ.get("ADMIT_TEST_PLAIN_INSTALL") == "1":
    sys.modules["orjson"] = None  # type: ignore[assignment]  # import orjson raises ImportError
    sys.modules["uvloop"] = None  # type: ignore[assignment]
    os.environ["ADMIT_EVENT_LOOP"] = "asyncio"


@pytest.fixture
async def fake(request):
    """The in-repo fake Kubernetes API over HTTP (``admit.testing.fake_kube.FakeKubeAPI``, as
    ``tests.emulations.kcm.FakeControlPlane``), one per test, made with the options of the closest
    ``@pytest.mark.fake_api(**options)`` (a test's, else its module's ``pytestmark``): e.g.
    ``gc_orphans_after=GC_ORPHANS_AFTER`` (tests/helpers.py) for the garbage collector of a real cluster,
    ``job_controller=True`` for kube-controller-manager's Job controller."""
    from tests.emulations.kcm import FakeControlPlane

    marker = request.node.get_closest_marker("fake_api")
    async with FakeControlPlane(**(marker.kwargs if marker else {})) as api:
        yield api


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Run the real control-plane tier (``tests/real``) after everything else.

    Its plane is one session fixture: started at the first real test, stopped at the end of the run. Run first, it
    would keep etcd, kube-apiserver, kube-controller-manager, the scheduler and the in-process kubelet thread busy on
    the same two cores while the timing-sensitive unit tests (Lease hand-over, orphan grace periods) run.
    """
    real = os.sep + "real" + os.sep
    items.sort(key=lambda item: real in str(item.fspath))  # stable: the order within each tier is kept
