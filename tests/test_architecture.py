"""The import contracts of pyproject.toml (``[tool.importlinter]``) hold, so the README's test command keeps the
layering as CI does (``.ci/run`` also runs ``lint-imports``), and the pure core imports without the network stack."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_import_contract_in_pyproject_is_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    run = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert " 0 broken." in run.stdout, run.stdout
    assert "BROKEN" not in run.stdout, run.stdout


def test_the_gang_model_and_the_pure_decisions_import_where_aiohttp_and_kubernetes_asyncio_are_missing():
    """What the forbidden contract promises, checked the way a user would meet it: an interpreter that cannot import
    aiohttp or kubernetes_asyncio still imports the model, the families, the kind registry and the decisions."""
    script = textwrap.dedent("""
        import importlib, importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("aiohttp", "kubernetes_asyncio"):
                    raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
                return None

        sys.meta_path.insert(0, Block())
        for module in ("admit.gang.plan", "admit.gang.claim", "admit.gang.ownerrefs", "admit.families.kinds",
                       "admit.webhook.mutate", "admit.webhook.validate", "admit.backends.diagnose",
                       "admit.backends.coscheduling.podgroup", "admit.backends.coscheduling.reconcile",
                       "admit.backends.workload_api.reconcile"):
            importlib.import_module(module)
        print("imported", len([m for m in sys.modules if m.startswith("admit")]), "admit modules")
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("imported "), run.stdout


def test_each_workload_kind_is_declared_once_by_its_family_and_the_registry_watches_and_scale_follow_from_it():
    """Adding a kind is adding one ``WorkloadKind`` record to its family (as Kueue's ``pkg/controller/jobs/<kind>``):
    the resolver registry, the controller's watches, the ``*/scale`` checks and the child rule all come from it."""
    from admit.controller.claims import KNOWN_RESOURCES
    from admit.families import FAMILY_KINDS
    from admit.families.kinds import RESOLVERS, SCALABLE
    from admit.gang.children import PARENTS

    keys = [k.key for k in FAMILY_KINDS]
    assert len(keys) == len(set(keys))
    assert list(RESOLVERS) == keys
    assert KNOWN_RESOURCES == {k.key: k.versions for k in FAMILY_KINDS if k.versions}
    assert ("", "Pod") in RESOLVERS and ("", "Pod") not in KNOWN_RESOURCES  # bare Pods: only Spark drivers, apart
    assert KNOWN_RESOURCES[("kubeflow.org", "MPIJob")] == (("v1", "mpijobs"), ("v2beta1", "mpijobs"))
    assert {parent for parent in SCALABLE.values()} == {(k.api_group, k.versions[0][0], k.kind) for k in FAMILY_KINDS
                                                          if k.scalable}
    assert SCALABLE[("apps", "deployments")] == ("apps", "v1", "Deployment")
    for k in FAMILY_KINDS:
        for child in k.children:
            assert k.key in PARENTS[child]
    assert PARENTS[("apps", "ReplicaSet")] == {("apps", "Deployment")}
