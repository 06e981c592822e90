"""Run the test suite N times with one core kept busy, and report the failures per test.

A flaky test passes alone and fails under load: this runs ``python -m pytest -q -p no:cacheprovider`` (plus any
arguments given after ``--``) ``--runs`` times in a row while a busy-loop process spins on one core (pinned to it with
``os.sched_setaffinity`` where the platform has it), parses each run's ``FAILED``/``ERROR`` lines, and prints a table
of test -> failures/N, then the wall time and pass/fail counts of every run. Exit status: 0 when every run passed,
1 otherwise.

Usage (from the repository root)::

    python -m bench.repeat_suite --runs 10 -- --ignore=tests/real
    python -m bench.repeat_suite --runs 20 --no-busy -- tests/webhook/test_connections.py
    python -m bench.repeat_suite --runs 3 --json out.json -- -x --ignore=tests/real

Output (columns: failures over the runs, test id)::

    busy core: 1
    runs: 3, 2 passed, 1 failed
    run  wall_s  passed  failed  errors  skipped
      1   212.4    1140       0       0        1
      2   220.9    1139       1       0        1
      3   215.0    1140       0       0        1
    failures  test
       1/3    tests/test_x.py::test_y
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: ``FAILED tests/x.py::test_y[param] - message`` / ``ERROR tests/x.py::test_y - message`` in pytest's short summary
#: (``-q`` prints it with ``-rfE``, the default ``-r`` of pytest >= 7 being ``fE``).
_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+)(?: - .*)?$")
#: the closing line, e.g. ``2 failed, 1111 passed, 1 skipped in 212.40s (0:03:32)``
_COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)")


def busy_loop(core: int | None) -> None:  # pragma: no cover - runs in a child process until terminated
    """Spin forever, pinned to ``core`` when given and supported."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    while True:
        pass


def parse_run(output: str) -> tuple[list[str], dict[str, int]]:
    """Test ids that failed or errored in one pytest run's output, and the counts of its closing line.

    Returns ``(["tests/x.py::test_y", ...], {"passed": N, "failed": N, "errors": N, "skipped": N, ...})``; an id that
    both failed and errored (a failing test whose teardown errors) is listed once.
    """
    failed: list[str] = []
    for line in output.splitlines():
        m = _SUMMARY.match(line.strip())
        if m and m.group(2) not in failed:
            failed.append(m.group(2))
    counts: dict[str, int] = {}
    for line in reversed(output.splitlines()):
        found = _COUNTS.findall(line)
        if found and (" in " in line or line.startswith("=")):
            for n, what in found:
                key = {"error": "errors", "warning": "warnings"}.get(what, what)
                counts[key] = int(n)
            break
    return failed, counts


def run_once(pytest_args: list[str]) -> tuple[float, str, int]:
    """One suite run from the repository root: ``(wall seconds, stdout+stderr, exit status)``."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *pytest_args],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return time.monotonic() - started, proc.stdout, proc.returncode


def table(runs: list[dict[str, Any]]) -> str:
    """The report: per-run lines, then test -> failures/N (most failures first)."""
    n = len(runs)
    lines = [f"runs: {n}, {sum(r['status'] == 0 for r in runs)} passed, {sum(r['status'] != 0 for r in runs)} failed",
             "run  wall_s  passed  failed  errors  skipped"]
    for i, r in enumerate(runs, 1):
        c = r["counts"]
        lines.append(f"{i:>3}  {r['wall_s']:>6.1f}  {c.get('passed', 0):>6}  {c.get('failed', 0):>6}  "
                     f"{c.get('errors', 0):>6}  {c.get('skipped', 0):>7}")
    per_test = Counter(t for r in runs for t in r["failed"])
    if not per_test:
        lines.append("no test failed")
    else:
        lines.append("failures  test")
        for test, k in sorted(per_test.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"{k:>4}/{n:<4} {test}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [--runs N] [--no-busy] [--core C] [--json FILE] [-- PYTEST ARGS]")
    parser.add_argument("--runs", type=int, default=10, help="suite runs (default 10)")
    parser.add_argument("--no-busy", action="store_true", help="no busy-loop process")
    parser.add_argument("--core", type=int, default=None,
                        help="core the busy loop is pinned to (default: the last one this process may use)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures to this file")
    args, rest = parser.parse_known_args(argv)
    pytest_args = [a for a in rest if a != "--"]
    core = args.core
    if core is None and hasattr(os, "sched_getaffinity"):
        core = max(os.sched_getaffinity(0))
    busy = None
    if not args.no_busy:
        busy = multiprocessing.get_context("spawn").Process(target=busy_loop, args=(core,), daemon=True)
        busy.start()
    runs: list[dict[str, Any]] = []
    try:
        for i in range(1, args.runs + 1):
            wall, output, status = run_once(pytest_args)
            failed, counts = parse_run(output)
            runs.append({"run": i, "wall_s": round(wall, 1), "status": status, "counts": counts, "failed": failed})
            print(f"run {i}/{args.runs}: {wall:.1f}s, exit {status}, failed: {', '.join(failed) or 'none'}",
                  flush=True)
    finally:
        if busy is not None:
            busy.terminate()
            busy.join()
    print(("busy core: " + str(core) if busy is not None else "no busy core"))
    print(table(runs))
    if args.json is not None:
        args.json.write_text(json.dumps({"busy_core": core if busy is not None else None, "pytest_args": pytest_args,
                                         "runs": runs}, indent=2))
    return 0 if runs and all(r["status"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
