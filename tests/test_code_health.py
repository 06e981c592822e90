"""Checks on the shape of admit's code that no single feature test sees: short functions, checked types."""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_FUNCTION_LINES = 80
"""A function (its decorators, signature, docstring and body) longer than this is split: a decision reads as a few
named steps. The fake API (``admit/testing``) is test machinery and exempt."""


def long_functions(root: Path = ROOT) -> list[tuple[str, str, int, int]]:
    """``(path, qualified name, first line, length in lines)`` of every function under ``admit/`` outside
    ``admit/testing`` longer than :data:`MAX_FUNCTION_LINES`."""
    found = []
    for path in sorted((root / "admit").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("admit/testing/"):
            continue
        tree = ast.parse(path.read_text(), rel)
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                        assert child.end_lineno is not None
                        length = child.end_lineno - first + 1
                        if length > MAX_FUNCTION_LINES:
                            found.append((rel, name, first, length))
                    stack.append((child, f"{name}."))
    return sorted(found)


def test_no_function_under_admit_outside_the_fake_api_is_over_80_lines():
    too_long = [f"{path}:{line} {name} is {length} lines" for path, name, line, length in long_functions()]
    assert not too_long, f"split these into named steps (at most {MAX_FUNCTION_LINES} lines each):\n" + \
        "\n".join(too_long)


def test_the_function_length_check_counts_decorators_docstrings_and_nested_functions(tmp_path):
    pkg = tmp_path / "admit"
    (pkg / "testing").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 3))
    (pkg / "long.py").write_text(
        f"@decorator\ndef just_over():\n    '''Docstring.'''\n{body}\n    return 1\n\n\n"
        f"def fits():\n{body}\n    return 1\n\n\n"
        f"class Kind:\n    def outer(self):\n        def inner():\n" + body.replace("    ", "            ")
        + "\n            return 1\n        return inner\n")
    (pkg / "testing" / "fake.py").write_text(f"def exempt():\n{body}\n{body}\n    return 1\n")
    assert long_functions(tmp_path) == [
        ("admit/long.py", "Kind.outer", MAX_FUNCTION_LINES * 2 + 6, MAX_FUNCTION_LINES + 1),
        ("admit/long.py", "just_over", 1, MAX_FUNCTION_LINES + 1),
    ]


def test_mypy_finds_no_type_error_in_admit():
    """The check ``.ci/run`` makes (``[tool.mypy]`` in pyproject.toml: every module under ``admit/`` but the ones its
    override lists as not yet checked), so that ``pytest`` alone catches a shape that disagrees with its annotation.
    The cache lives in the temporary directory, one per checkout: a warm run takes seconds."""
    cache = Path(tempfile.gettempdir()) / f"admit-mypy-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("Success: no issues found"), run.stdout
