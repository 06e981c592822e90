"""What the docs and admit's docstrings point a reader to exists: every repository path they name, every link between
the docs, every logger name the docs tell an operator to filter on. A moved module or a renamed logger then fails
here, naming the file and line that still say the old name, instead of sending a reader to nothing."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

# A path from the repository's root: `admit/webhook/mutate.py`, `docs/behaviour.md`, `charts/admit/values.yaml`.
ROOTED = re.compile(r"(?<![\w./@:<-])((?:admit|docs|charts|tests|bench|hack|examples|deploy|\.ci|\.github)/"
                    r"[A-Za-z0-9_.*/-]*)")
# Inside admit/: a module named from the package's root or from its own folder (``backends/workload_api/status.py``,
# ``podgroups.py``).
PACKAGE_RELATIVE = re.compile(r"(?<![\w./@:-])((?:[a-z_]+/)+[a-z_]+\.py)\b")
BARE_MODULE = re.compile(r"``([a-z_]+\.py)``")
# A document named without a folder: README.md, CHANGELOG.md (at the root), or DESIGN.md (nowhere in the repository).
BARE_DOC = re.compile(r"(?<![\w./-])([A-Z][A-Za-z-]*\.md)\b")
# A Markdown link to another file of the repository: [operations.md](operations.md#logs).
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")

NOT_PATHS = {
    "admit/baseline": "the benchmark's throughput ratio, a column of its table",
    "tests/test_x.py": "an example test id in repeat_suite's output",
}


def _documents(root: Path) -> list[Path]:
    return sorted([*root.glob("docs/*.md"), *[p for p in [root / "README.md"] if p.exists()],
                   *root.glob("admit/**/*.py")])


def missing_paths(root: Path = ROOT) -> list[str]:
    """``"<file>:<line>: <path>"`` for every repository path a doc or a module of ``admit/`` names that is not there
    (a glob matches nothing)."""
    missing = []
    for doc in _documents(root):
        rel = doc.relative_to(root).as_posix()
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            named = [(m.group(1).rstrip(".,:;"), root) for m in ROOTED.finditer(line)]
            named += [(m.group(1), root) for m in BARE_DOC.finditer(line)
                      if not (root / "docs" / m.group(1)).exists()]
            if doc.suffix == ".md":
                named += [(m.group(1), doc.parent) for m in LINK.finditer(line) if "://" not in m.group(1)
                          and not m.group(1).startswith("mailto:")]
            else:
                named += [(m.group(1), None) for m in PACKAGE_RELATIVE.finditer(line)
                          if not ROOTED.fullmatch(m.group(1))]
                named += [(m.group(1), None) for m in BARE_MODULE.finditer(line)]
            for path, base in named:
                if path in NOT_PATHS or re.fullmatch(r"deploy/[\w-]+", path):  # kubectl's deploy/<name>
                    continue
                if path.startswith("charts/") and not (root / "/".join(path.split("/")[:2])).exists():
                    continue  # another project's chart (charts/spark-operator-chart/...): admit has charts/admit only
                if base is None:  # inside admit/: from the module's folder, from the package's, or (bare) anywhere
                    found = ((doc.parent / path).exists() or (root / "admit" / path).exists()
                             or ("/" not in path and any((root / "admit").rglob(path))))
                elif "*" in path:
                    found = any(base.glob(path))
                else:
                    found = (base / path).exists()
                if not found:
                    missing.append(f"{rel}:{n}: {path}")
    return missing


def loggers_created(root: Path = ROOT) -> set[str]:
    """The names admit passes to ``logging.getLogger``."""
    names = set()
    for module in (root / "admit").rglob("*.py"):
        names.update(re.findall(r"""getLogger\(["'](admit[\w.]*)["']\)""", module.read_text()))
    return names


# A dotted admit name that is a host, a domain or a file, not a logger: gang.admit.dev, admit.default.svc, admit.yaml.
_NOT_LOGGER = re.compile(r"\.(dev|io|svc|yaml|yml|json|md|py)$")


def unknown_loggers(root: Path = ROOT) -> list[str]:
    """``"<file>: <name>"`` for every ``admit.*`` name the docs give as a logger (in a paragraph about loggers, or as
    a ``"logger"`` value of a log line) that admit does not create."""
    created = loggers_created(root)
    unknown = []
    for doc in sorted([*root.glob("docs/*.md"), root / "README.md"]):
        if not doc.exists():
            continue
        for paragraph in re.split(r"\n\s*\n", doc.read_text()):
            names = re.findall(r'"logger":\s*"([^"]+)"', paragraph)
            if re.search(r"\blogger", paragraph, re.I):
                names += re.findall(r"[`\"'](admit(?:\.[a-z_]+)*)[`\"']", paragraph)
            for name in names:
                if name not in created and not _NOT_LOGGER.search(name):
                    unknown.append(f"{doc.relative_to(root).as_posix()}: {name}")
    return sorted(set(unknown))


# A scheduling.k8s.io version: v1, v1beta1, v1alpha3 (not v1.2 or v1alpha1x).
WORKLOAD_API_VERSION = re.compile(r"(?<![\w.])v1(?:alpha\d+|beta\d+)?(?!\w|\.\w)")
#: Where a document says in which order ``admit serve`` picks the served Workload API version: (file, words of that
#: sentence). Each must name every version discovery knows, in the order it chooses them.
VERSION_ORDER_SENTENCES = (
    ("README.md", "takes the first served of"),
    ("docs/behaviour.md", "reads the served `scheduling.k8s.io` version at start"),
    ("docs/cli.md", "| `--workload-api-version`"),
    ("docs/compatibility.md", "Discovery prefers"),
    ("docs/fake-api.md", "| Native gang API"),
    ("admit/backends/workload_api/discovery.py", "admit speaks the versions whose shapes it knows"),
)


def discovery_order() -> list[str]:
    """The Workload API versions in the order ``admit serve`` chooses them: ``discovery.choose_version`` asked again
    and again on an API server serving every version it has not chosen yet (v1alpha1 too, which it never speaks)."""
    from admit.backends.workload_api.discovery import choose_version
    from admit.config import WORKLOAD_API_VERSIONS

    left, order = {*WORKLOAD_API_VERSIONS, "v1alpha1"}, []
    while chosen := choose_version({v: {"workloads", "podgroups"} for v in left}):
        order.append(chosen)
        left.discard(chosen)
    return order


def _versions_named(text: str) -> list[str]:
    named: list[str] = []
    for version in WORKLOAD_API_VERSION.findall(text):
        if version not in named:
            named.append(version)
    return named


def version_order_problems(order: list[str], root: Path = ROOT) -> list[str]:
    """``"<file>: <versions>"`` for every sentence of README.md and docs/ that names three or more of ``order`` (a
    list of the versions) in another order, for every sentence of :data:`VERSION_ORDER_SENTENCES` that does not name
    exactly ``order`` (or is missing), and for the table of docs/workload-api.md ("Versions admit speaks") when its
    rows are not ``order``."""
    problems = []
    for doc in sorted([*root.glob("docs/*.md"), root / "README.md"]):
        if not doc.exists():
            continue
        rel = doc.relative_to(root).as_posix()
        for paragraph in re.split(r"\n\s*\n|\n(?=\|)|\n(?=- )", doc.read_text()):
            for sentence in re.split(r"(?<=[.;])\s+", " ".join(paragraph.split())):
                named = [v for v in _versions_named(sentence) if v in order]
                if len(named) >= 3 and named != sorted(named, key=order.index):
                    problems.append(f"{rel}: {', '.join(named)} in \"{sentence[:100]}\"")
    for path, words in VERSION_ORDER_SENTENCES:
        text = (root / path).read_text() if (root / path).exists() else ""
        sentences = [s for p in re.split(r"\n\s*\n|\n(?=\|)", text)
                     for s in re.split(r"(?<=[.;])\s+", " ".join(p.split())) if words in s]
        named = [v for v in _versions_named(sentences[0]) if v in order] if sentences else []
        if named != order:
            problems.append(f"{path}: {', '.join(named) or 'no sentence'} where it says \"{words}\"")
    table = root / "docs" / "workload-api.md"
    rows = re.findall(r"^\| `(v1\w*)` \|", table.read_text(), re.M) if table.exists() else []
    if rows != order:
        problems.append(f"docs/workload-api.md: the table of versions lists {', '.join(rows) or 'none'}")
    return problems


def test_every_repository_path_the_docs_and_admits_docstrings_name_exists():
    missing = missing_paths()
    assert not missing, "these name a path that is not in the repository:\n" + "\n".join(missing)


def test_every_logger_name_the_docs_mention_is_one_admit_creates():
    created = loggers_created()
    assert {"admit.requests", "admit.controller", "admit.watchcache"} <= created
    unknown = unknown_loggers()
    assert not unknown, f"these loggers do not exist (admit creates {sorted(created)}):\n" + "\n".join(unknown)


def test_a_moved_module_and_a_renamed_logger_are_reported_with_the_file_that_names_them(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "admit" / "controller").mkdir(parents=True)
    (tmp_path / "admit" / "controller" / "podgroups.py").write_text(
        '"""Decisions in ``reconcile.py``; see ``backends/coscheduling/reconcile.py``, docs/behaviour.md, DESIGN.md."""\n'
        'import logging\nlog = logging.getLogger("admit.controller")\n')
    (tmp_path / "docs" / "behaviour.md").write_text(
        "The controller (`admit/controller/podgroups.py`, `admit/controller.py`); see [ops](operations.md#logs).\n\n"
        "Filter on the logger `admit.controller.podgroups`, not `admit.controller`; the domain `gang.admit.dev`.\n")
    assert missing_paths(tmp_path) == [
        "admit/controller/podgroups.py:1: DESIGN.md",
        "admit/controller/podgroups.py:1: backends/coscheduling/reconcile.py",
        "admit/controller/podgroups.py:1: reconcile.py",
        "docs/behaviour.md:1: admit/controller.py",
        "docs/behaviour.md:1: operations.md",
    ]
    assert unknown_loggers(tmp_path) == ["docs/behaviour.md: admit.controller.podgroups"]


def test_every_doc_that_lists_the_workload_api_versions_lists_them_in_the_order_admit_serve_chooses_them():
    order = discovery_order()
    assert order == ["v1", "v1beta1", "v1alpha3", "v1alpha2"]
    problems = version_order_problems(order)
    assert not problems, f"these list the Workload API versions in another order than {order}:\n" + "\n".join(problems)


def test_a_version_list_out_of_discovery_order_or_missing_one_is_reported_with_its_file(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("PodGroup (`admit serve` takes the first served of v1beta1 and v1alpha2).\n")
    (tmp_path / "docs" / "behaviour.md").write_text(
        "It reads the served `scheduling.k8s.io` version at start (v1, then v1beta1, then v1alpha3, then v1alpha2).\n\n"
        "Priority fields (v1alpha3, v1beta1, v1) are written. 1.37 stops serving v1alpha2; admit speaks v1beta1 now.\n")
    (tmp_path / "docs" / "workload-api.md").write_text("| `v1alpha2` | 1.36 |\n| `v1beta1` | 1.37 |\n")
    problems = version_order_problems(["v1", "v1beta1", "v1alpha3", "v1alpha2"], tmp_path)
    assert problems == [
        'docs/behaviour.md: v1alpha3, v1beta1, v1 in "Priority fields (v1alpha3, v1beta1, v1) are written."',
        'README.md: v1beta1, v1alpha2 where it says "takes the first served of"',
        'docs/cli.md: no sentence where it says "| `--workload-api-version`"',
        'docs/compatibility.md: no sentence where it says "Discovery prefers"',
        'docs/fake-api.md: no sentence where it says "| Native gang API"',
        'admit/backends/workload_api/discovery.py: no sentence where it says "admit speaks the versions whose shapes '
        'it knows"',
        "docs/workload-api.md: the table of versions lists v1alpha2, v1beta1",
    ]


def _value_keys(values: dict, prefix: str = "") -> list[str]:
    """The dotted keys of a values.yaml: a mapping with entries is walked, anything else (a scalar, a list, an
    empty mapping) is one key."""
    keys = []
    for key, value in values.items():
        dotted = f"{prefix}.{key}" if prefix else key
        keys += _value_keys(value, dotted) if isinstance(value, dict) and value else [dotted]
    return keys


def _documented_values(text: str) -> set[str]:
    """Every value key the first column of a table names, expanding the ``a.b`` / ``.c`` shorthand of a row
    (``.c`` is a sibling of the key before it) and ``a.b.labels`` covering the keys under it."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        last = ""
        for key in re.findall(r"`([A-Za-z.][\w.]*)`", line.split("|")[1]):
            if key.startswith(".") and last:
                key = last.rsplit(".", key.count("."))[0] + key
            names.add(key)
            last = key
    return names


def test_every_chart_value_has_a_row_in_the_values_table_of_the_install_guide():
    values = yaml.safe_load((ROOT / "charts/admit/values.yaml").read_text())
    documented = _documented_values((ROOT / "docs/install.md").read_text())
    missing = [key for key in _value_keys(values)
               if not any(key == name or key.startswith(name + ".") for name in documented)]
    assert missing == [], f"docs/install.md 'Values' has no row for {missing}"
