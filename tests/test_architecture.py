"""The import contracts of pyproject.toml (``[tool.importlinter]``) hold, so the README's test command keeps the
layering as CI does (``.ci/run`` also runs ``lint-imports``), and the pure core imports without the network stack."""

from __future__ import annotations

import re
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
                       "admit.backends.coscheduling.podgroup", "admit.backends.gangobjects",
                       "admit.backends.coscheduling.diagnose", "admit.backends.workload_api.diagnose"):
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
    from admit.families.kinds import PARENTS, RESOLVERS, SCALABLE

    keys = [k.key for k in FAMILY_KINDS]
    assert len(keys) == len(set(keys))
    assert list(RESOLVERS) == keys
    assert KNOWN_RESOURCES == {k.key: k.versions for k in FAMILY_KINDS if k.versions and k.unwatched is None}
    assert ("batch", "CronJob") in RESOLVERS and ("batch", "CronJob") not in KNOWN_RESOURCES  # its Jobs own groups
    assert ("", "Pod") in RESOLVERS and ("", "Pod") not in KNOWN_RESOURCES  # bare Pods: only Spark drivers, apart
    assert KNOWN_RESOURCES[("kubeflow.org", "MPIJob")] == (("v1", "mpijobs"), ("v2beta1", "mpijobs"))
    assert {parent for parent in SCALABLE.values()} == {(k.api_group, k.versions[0][0], k.kind) for k in FAMILY_KINDS
                                                          if k.scalable}
    assert SCALABLE[("apps", "deployments")] == ("apps", "v1", "Deployment")
    for k in FAMILY_KINDS:
        for child in k.children:
            assert k.key in PARENTS.plain[child]
    assert PARENTS.plain[("apps", "ReplicaSet")] == {("apps", "Deployment")}


#: The per-kind facts a ``WorkloadKind`` must give (keyword-only, no default: ``None`` / ``False`` says "none").
PER_KIND_FACTS = ("pod_joiner", "pod_watch_selector", "rollout", "controller_gang", "gang_from_parent", "handover",
                  "allowed_backends", "in_status")


def test_every_registered_kind_declares_each_per_kind_fact_and_a_record_that_leaves_one_out_is_refused():
    """A new kind cannot forget a per-kind fact: each is a required keyword of the record, every
    registered kind gives one of the right shape, and each module that used to keep the fact apart reads it from
    the registry."""
    import dataclasses

    import pytest

    from admit.cli.review import _plural
    from admit.cli.status import WORKLOAD_RESOURCES
    from admit.backends.registry import BACKENDS
    from admit.cli import build_parser
    from admit.controller.claims import watched_kinds
    from admit.config import Config
    from admit.families import FAMILY_KINDS, WorkloadKind
    from admit.families.apps import resolve_job
    from admit.families.kinds import KINDS, POD_JOINERS
    from admit.families.shared import AllowedBackends, Rollout

    fields = {f.name: f for f in dataclasses.fields(WorkloadKind)}
    for name in PER_KIND_FACTS:
        assert fields[name].kw_only and fields[name].default is dataclasses.MISSING, name
    leave_out = {name: None for name in PER_KIND_FACTS[1:]}
    with pytest.raises(TypeError, match="pod_joiner"):
        WorkloadKind("batch", "Job", (("v1", "jobs"),), resolve_job, **leave_out)  # type: ignore[call-arg]

    for k in FAMILY_KINDS:
        assert k.pod_joiner is None or callable(k.pod_joiner), k.key
        assert k.pod_watch_selector is None or ("=" in k.pod_watch_selector and not k.versions), k.key
        assert k.rollout is None or isinstance(k.rollout, Rollout), k.key
        assert k.controller_gang is None or k.controller_gang.startswith("the "), k.key
        assert k.gang_from_parent is None or (k.controller_gang is not None and "/" in k.gang_from_parent), k.key
        assert k.handover is None or (k.controller_gang is not None and isinstance(k.handover(3), dict)), k.key
        assert k.allowed_backends is None or (isinstance(k.allowed_backends, AllowedBackends)
                                              and set(k.allowed_backends.backends) <= set(BACKENDS)), k.key
        assert isinstance(k.in_status, bool), k.key
        assert _plural(k.kind) == (k.versions[0][1] if k.versions else "pods"), k.key

    def having(fact: str) -> list[str]:
        return [k.kind for k in FAMILY_KINDS if getattr(k, fact)]

    # what each kind declares today (the facts that lived in POD_JOINERS, claims.py, rollout.py, _CONTROLLER_GANGS,
    # _is_spark, status.py and review.py before)
    assert having("pod_joiner") == ["Pod", "LeaderWorkerSet"] and len(POD_JOINERS) == 2
    assert having("pod_watch_selector") == ["Pod"] and KINDS[("", "Pod")].pod_watch_selector == "spark-role=driver"
    assert having("rollout") == ["Deployment", "StatefulSet"]
    assert having("controller_gang") == ["Deployment", "StatefulSet", "Job", "JobSet", "LeaderWorkerSet"]
    assert having("gang_from_parent") == ["Job"] and having("handover") == ["Job"]
    assert build_parser().parse_args(["serve", "--controller-gang", "Job"]).controller_gang == ["Job"]
    with pytest.raises(SystemExit):  # --controller-gang offers the kinds with a handover only
        build_parser().parse_args(["serve", "--controller-gang", "Deployment"])
    assert having("allowed_backends") == ["Pod", "SparkApplication", "SparkConnect", "ScheduledSparkApplication"]
    assert having("carry") == ["ScheduledSparkApplication", "RayCronJob"] and having("unwatched") == [
        "CronJob", "ScheduledSparkApplication", "RayCronJob"]
    assert having("in_status") == ["Deployment", "ReplicaSet", "StatefulSet", "Job", "TFJob", "PyTorchJob", "XGBoostJob",
                                   "PaddleJob", "JAXJob", "MPIJob"]
    assert [r.kind for r in WORKLOAD_RESOURCES] == having("in_status")
    pod_watches = [w.selector for w in watched_kinds(Config())[0] if w.resource.kind == "Pod"]
    assert pod_watches == [f"{Config().managed_label}=true,spark-role=driver"]


def test_is_child_answers_for_a_deployments_replicaset_in_a_fresh_interpreter_whatever_was_imported_first():
    """The child registry is a value (``admit.families.kinds.PARENTS``) that ``is_child`` is given, not state that
    importing the families fills in ``admit.gang.children`` (it used to be: ``is_child`` answered False for a
    Deployment's ReplicaSet until ``admit.families.kinds`` had been imported)."""
    script = textwrap.dedent("""
        from admit.gang import children
        assert not any(isinstance(v, dict) for k, v in vars(children).items() if k.isupper()), "module-level registry"
        before = dict(vars(children))
        from admit.families.kinds import PARENTS
        assert dict(vars(children)) == before, "importing the families changed admit.gang.children"
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-5d8f", "namespace": "team",
              "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1",
                                   "controller": True, "blockOwnerDeletion": True}]}}
        print(children.is_child(rs, "apps", "ReplicaSet", PARENTS),
              children.is_child(rs, "apps", "ReplicaSet", children.Parents()))
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "False"]


def _code_words(path: str) -> set[str]:
    """The names, attributes and string constants of a module's code, docstrings left out (they may say what a
    backend or a kind does)."""
    return _source_words((ROOT / path).read_text())


def _source_words(source: str) -> set[str]:
    """:func:`_code_words` of a module's source text."""
    import ast

    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.alias):
            words.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.add(node.value)
    return words


def test_the_mutating_decision_names_no_backend_and_the_backend_framework_names_no_kind():
    """``webhook/mutate.py`` asks the plan's backend (``GangBackend``) for every pod mark, and every per-kind fact
    ``backends/__init__.py`` reads comes from the kind's record (``WorkloadKind``): neither spells the other's
    knowledge."""
    mutate = _code_words("admit/webhook/mutate.py")
    backend_words = {"coscheduling", "workload_api", "COSCHEDULING", "WORKLOAD_API", "pod_group_label",
                     "scheduler_name", "scheduler_ops", "template_group", "schedulingGroup", "podGroupName"}
    assert not mutate & backend_words
    assert not [w for w in mutate if "scheduling.x-k8s.io" in w or "scheduling.k8s.io" in w]
    framework = _code_words("admit/backends/__init__.py")
    kind_words = {"Job", "batch", "Deployment", "StatefulSet", "apps", "JobSet", "LeaderWorkerSet"}
    assert not framework & kind_words
    assert not [w for w in framework if "group-template-name" in w or "minCount" in w]


def emulation_imports_outside_the_kit(source: str, package: str = "tests.emulations") -> list[tuple[int, str]]:
    """``(line, module)`` of each import in ``source`` (a module of ``package``) of admit or the tests that is not
    the test kit: an operator emulation may import ``admit.testing`` (the fake API, which an import contract keeps
    off admit's decision code) and its own package, nothing else of admit or of ``tests`` (a helper there may import
    admit's decisions). Imports in functions and under ``if TYPE_CHECKING:`` count too; relative ones are resolved
    against ``package``; ``from admit import families`` names ``admit.families``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            modules = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            allowed = "admit.testing" if top == "admit" else package if top == "tests" else None
            if allowed is not None and not (module == allowed or module.startswith(allowed + ".")):
                found.append((node.lineno, module))
    return found


def test_no_operator_emulation_imports_admits_decision_code_so_each_can_disagree_with_admit():
    """``tests/emulations`` is written from the operators' own code: an emulation that built its objects with admit's
    ``families``, ``gang``, ``backends`` or ``webhook`` (Trainer's JobSet once came from admit's
    ``families.trainer.trainer_jobset``) would agree with admit by construction, and its conformance tests could not
    fail on a misreading of the operator."""
    offending = {path.name: found for path in sorted((ROOT / "tests" / "emulations").glob("*.py"))
                 if (found := emulation_imports_outside_the_kit(path.read_text()))}
    assert offending == {}


def test_the_emulation_import_check_finds_decision_code_however_it_is_imported():
    source = textwrap.dedent("""
        from __future__ import annotations
        import copy
        from typing import TYPE_CHECKING
        import admit.gang.quantity as quantity
        from admit import webhook
        from admit.families.trainer import trainer_jobset
        from admit.testing.fake_kube import FakeKubeAPI
        from .kit import put_event
        from . import quantity as own
        if TYPE_CHECKING:
            from admit.backends.interface import GangBackend

        def later():
            from tests.helpers import eventually
            from ..operators import conftest
    """)
    assert emulation_imports_outside_the_kit(source) == [
        (5, "admit.gang.quantity"), (6, "admit.webhook"), (7, "admit.families.trainer.trainer_jobset"),
        (12, "admit.backends.interface.GangBackend"), (15, "tests.helpers.eventually"),
        (16, "tests.operators.conftest")]


BUILTIN_BACKEND_NAMES = ("coscheduling", "workload-api")
"""``admit/config.py`` ``BUILTIN_BACKENDS``, spelt out: the test reads the words, not the constant."""

SPELT_BACKEND = re.compile(r"(?<![\w./-])(coscheduling|workload-api)(?![\w.-])")
"""A built-in backend's name as a word of a string: not a path or a field (``pkg/coscheduling/core/core.go``,
``podGroupPolicy.coscheduling``, ``coscheduling.go``) nor part of a flag (``--workload-api-version``)."""

SPELLS_A_BACKEND_ON_PURPOSE: dict[tuple[str, str], str] = {
    ("admit/families/jobset.py", "coscheduling"):
        "Kubeflow Trainer's runtime field podGroupPolicy.coscheduling, read as Trainer names it (an operator's key, "
        "not admit's backend)",
    ("admit/families/trainer.py", "coscheduling"):
        "the same Trainer field, read from the TrainingRuntime",
    ("admit/cli/__init__.py", "workload-api"):
        "the help of the flags that exist for that backend alone: --controller-gang (its handover) and review's "
        "--workload-api-version (its served version, offline)",
    ("admit/observability/metrics.py", "workload-api"):
        "the help text of the metric that backend's writes count in (its BackendAPI.count)",
}
"""``(module, word) -> why``: the modules outside ``admit/backends/<name>/`` and ``admit/config.py`` that spell a
built-in backend's name in their code, each for a reason that is not a branch on the backend."""

def backend_spellings(source: str) -> set[str]:
    """The built-in backend names a module's code spells (docstrings left out): ``"coscheduling"`` or
    ``"workload-api"`` as a word of a string constant (:data:`SPELT_BACKEND`), ``"COSCHEDULING"`` or
    ``"WORKLOAD_API"`` as a name or an imported name (``admit/config.py``'s constants)."""
    found = set()
    for word in _source_words(source):
        if word in ("COSCHEDULING", "WORKLOAD_API"):
            found.add(word)
        else:
            found.update(m.group(1) for m in SPELT_BACKEND.finditer(word))
    return found


def test_no_module_outside_the_backend_folders_spells_a_built_in_backends_name_but_the_config_defaults():
    """The framework, the webhook, the families and the model reach a backend through the registries and the
    backends' hooks; the built-in names stay in their folders (``admit/backends/coscheduling/``,
    ``admit/backends/workload_api/``) and in ``admit/config.py``, the ground floor that fills the registry's
    built-in entry points and the defaults. What else spells one is listed in :data:`SPELLS_A_BACKEND_ON_PURPOSE`
    with why."""
    spelt = {}
    for path in sorted((ROOT / "admit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "admit/config.py" or rel.startswith(("admit/backends/coscheduling/", "admit/backends/workload_api/")):
            continue
        for word in backend_spellings(path.read_text()):
            spelt[(rel, word)] = word
    unexplained = sorted(key for key in spelt if key not in SPELLS_A_BACKEND_ON_PURPOSE)
    assert unexplained == [], "ask the plan's backend (registry, hooks) instead, or say why in SPELLS_A_BACKEND_ON_PURPOSE"
    stale = sorted(key for key in SPELLS_A_BACKEND_ON_PURPOSE if key not in spelt)
    assert stale == [], "these no longer spell the name: take them off SPELLS_A_BACKEND_ON_PURPOSE"


def test_the_backend_name_check_finds_a_name_in_code_and_not_in_an_upstream_path_or_a_docstring():
    source = textwrap.dedent('''
        """Coscheduling's rule: scheduler-plugins pkg/coscheduling/core/core.go; the coscheduling backend."""
        from ..config import COSCHEDULING, Config

        def pick(config: Config) -> str:
            """Used by the workload-api backend."""
            policy = {"coscheduling": 1}  # Trainer's key, exactly the name
            flag = "--workload-api-version"
            source = "podGroupPolicy.coscheduling, coscheduling.go"
            return f"moved to the workload-api backend ({config.gang_backend})" if policy else COSCHEDULING
    ''')
    assert backend_spellings(source) == {"COSCHEDULING", "coscheduling", "workload-api"}
    prose_only = textwrap.dedent('''
        """The coscheduling backend and the workload-api backend, in a docstring."""
        RULE = "scheduler-plugins pkg/coscheduling/core/core.go, podGroupPolicy.coscheduling, --workload-api-version"
    ''')
    assert backend_spellings(prose_only) == set()
