"""bench/ keeps working: a --quick run of bench.admit_bench with a tiny request count, on the paths of a plain install
(stdlib JSON, stdlib asyncio loop). Nothing here is timed; the figures are only checked for shape and for the
Kubernetes API calls each mix must cost."""

import json
import os
import re
import subprocess
import sys

from tests.helpers import ROOT

BENCH = ["-m", "bench.admit_bench"]  # run as docs/performance.md says: from the root of the checkout


def test_a_quick_run_with_a_tiny_request_count_prints_every_figure_per_mix(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "orjson.py").write_text("raise ImportError('blocked: the benchmark test runs the stdlib JSON path')\n")
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(ROOT)]), "ADMIT_EVENT_LOOP": "asyncio"}
    proc = subprocess.run(
        [sys.executable, *BENCH, "--quick", "--max-requests", "24", "--rates", "200", "--rss-marks", "150,300",
         "--no-go", "--json", str(out)],  # the suite never builds the Go peer
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = proc.stdout
    result = json.loads(out.read_text())

    assert result["meta"]["json"] == "json" and result["meta"]["loop"] == "asyncio"
    assert result["meta"]["admit_exit_code"] == 0
    assert "Go webhook: skipped (--no-go)" in proc.stderr and result["meta"]["go"] == "skipped (--no-go)"
    assert list(result["mixes"]) == ["known-group", "no-group", "deployment", "scale"]
    for name, mix in result["mixes"].items():
        for server in ("baseline", "admit"):
            closed = mix["closed"][server]
            assert closed["requests"] >= 2 and closed["errors"] == 0 and closed["rps"] > 0
            assert 0 < closed["p50_ms"] <= closed["p99_ms"] <= closed["p999_ms"]
            opened = mix["open"]["200"][server]
            assert opened["requests"] >= 1 and opened["errors"] == 0
        assert mix["ratio"] > 0 and "cpu admit/baseline" in mix["ratios"]  # None when a tiny run used no CPU tick
        assert set(mix["closed"]) == {"baseline", "admit"}  # no Go peer row without a Go build
        assert f"| {name} | admit |" in report and f"| {name} | baseline |" in report
    per = {name: mix["api_calls_per_admission"] for name, mix in result["mixes"].items()}
    assert per == {"known-group": 0, "no-group": 0, "deployment": 1, "scale": 1}
    assert set(result["mixes"]["deployment"]["api_calls_by"]) == {"POST podgroups"}
    assert set(result["mixes"]["scale"]["api_calls_by"]) == {"GET deployments"}

    memory = result["memory"]
    assert set(memory["admit_rss_at_mb"]) == {"150", "300"}
    assert memory["admit_requests"] >= 300
    assert 0 < memory["admit_idle_mb"] <= memory["admit_peak_mb"]
    assert "after 150 requests" in report and "after 300 requests" in report
    assert 10 < memory["floor_mb"] < memory["admit_idle_mb"] and "aiohttp.web" in memory["floor_modules"]
    assert re.search(r"import floor [\d.]+ MiB: .*admit is \+[\d.]+ MiB over it idle", report), report
    assert "Targets" in report and ("PASS" in report or "FAIL" in report)

    scraped = result["metrics"]["scraped_requests_total"]  # admit serve ran with --metrics-port, as the chart does
    assert scraped["/mutate 200"] + scraped["/validate 200"] == result["metrics"]["requests_sent"]
    assert result["metrics"]["cost"]["us_per_request"] > 0 and "Metrics (admit/observability/metrics.py)" in report


def test_the_floor_peer_answers_a_constant_review_and_gets_its_own_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, *BENCH, "--quick", "--max-requests", "24", "--rates", "200", "--rss-marks", "150,300",
         "--no-go", "--floor", "--mixes", "known-group", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mix = json.loads(out.read_text())["mixes"]["known-group"]
    assert set(mix["closed"]) == {"baseline", "floor", "admit"}
    assert mix["closed"]["floor"]["errors"] == 0 and mix["closed"]["floor"]["requests"] >= 2
    assert "cpu admit/floor" in mix["ratios"] and "| known-group | aiohttp floor (constant answer) |" in proc.stdout


def test_the_handler_profile_prints_each_layer_of_a_known_group_request_and_admit_before_and_now():
    proc = subprocess.run([sys.executable, "-m", "bench.handler_profile", "--requests", "40", "--repeat", "1"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = re.findall(r"^\| (.+?) \| ([\d.]+) \| ([+-][\d.]+)? \|$", proc.stdout, re.M)
    assert [name for name, _, _ in rows] == [
        "aiohttp low-level server, constant answer", "+ body read under admit's limits", "+ JSON parse",
        "+ AdmissionReview checks", "+ decision", "+ metrics", "+ answer encoding",
        "admit before: Application, router, guard middleware",
        "admit, aiohttp's path: low-level server, dispatch, guard",
        "fast path, constant answer: aiohttp's parser, the fast path, guard", "+ JSON parse, inline",
        "+ AdmissionReview checks, inline", "+ decision, inline", "admit now: low-level server, fast path, guard"]
    assert all(float(us) > 0 for _, us, _ in rows) and all(layer for name, _, layer in rows if name[0] == "+")


def test_the_idle_connection_probe_prints_rss_and_shows_the_bounds_at_work(tmp_path):
    out = tmp_path / "idle.json"
    proc = subprocess.run(
        [sys.executable, *BENCH, "--idle-connections", "40", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["connections"] == 40 and result["failed_handshakes"] == 0 and result["held_by_server"] == 40
    assert 0 < result["rss_idle_mib"] <= result["peak_mib"]
    assert result["answer_during_flood"] == "HTTP/1.1 200 OK"
    assert result["partial_header_closed_after_s"] is not None  # the read deadline closed them
    assert "idle TLS connections" in proc.stdout and "RSS" in proc.stdout


def test_the_gang_workloads_mode_runs_admit_with_its_controller_over_stored_workloads(tmp_path):
    """``--gang-workloads``, tiny: 30 stored gang Deployments with their PodGroups; figures checked for shape only
    (the 1k/5k/20k runs are made by hand, see docs/performance.md, "The controller at scale")."""
    out = tmp_path / "gang.json"
    proc = subprocess.run(
        [sys.executable, *BENCH, "--gang-workloads", "30", "--gang-resync", "6", "--gang-relists", "1",
         "--gang-rate", "20", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # without --check a missed goal is printed, not fatal
    [run] = json.loads(out.read_text())["gang"]
    assert run["workloads"] == 30 and 4000 < run["deployment_bytes"] < 7000
    assert run["exit_code"] == 0 and run["all"]["errors"] == 0 and run["all"]["requests"] > 0
    assert run["controller_writes"] == {}  # everything preloaded in step: nothing to write
    assert 0 < run["rss_after_sync_mb"] <= run["hwm_mb"] and len(run["rss_after_relist_mb"]) == 1
    assert "| 30 |" in proc.stdout and "Goals" in proc.stdout


def test_repeat_suite_counts_each_tests_failures_over_the_runs(tmp_path):
    """bench/repeat_suite.py over a test file whose one test fails every other run (a counter file beside it)."""
    counter = tmp_path / "runs"
    (tmp_path / "test_sample.py").write_text(
        "from pathlib import Path\n"
        f"COUNTER = Path({str(counter)!r})\n"
        "def test_steady():\n"
        "    assert True\n"
        "def test_fails_every_other_run():\n"
        "    n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1\n"
        "    COUNTER.write_text(str(n))\n"
        "    assert n % 2 == 0\n")
    out = tmp_path / "runs.json"
    proc = subprocess.run([sys.executable, "-m", "bench.repeat_suite", "--runs", "3", "--no-busy",
                           "--json", str(out), "--", str(tmp_path / "test_sample.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "runs: 3, 1 passed, 2 failed" in proc.stdout
    assert re.search(r"^\s+2/3\s+\S*test_sample.py::test_fails_every_other_run$", proc.stdout, re.M), proc.stdout
    assert "test_steady" not in proc.stdout.split("failures  test")[1]
    runs = json.loads(out.read_text())["runs"]
    assert [r["counts"]["passed"] for r in runs] == [1, 2, 1] and [r["status"] for r in runs] == [1, 0, 1]


def test_the_bench_modules_import_each_other_one_way_and_never_edit_sys_path():
    """bench/ is a package run as ``python -m bench.<script>``: its modules import each other by their own names
    (``from bench.processes import Server``), no two import each other in a cycle, a shared module imports no
    script, and none reaches a name through ``sys.path`` edits."""
    import ast

    scripts = {"admit_bench", "apiserver_bench", "restart_bench", "repeat_suite", "gang_scale", "idle_connections"}
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        tree = ast.parse(path.read_text())
        name = path.stem
        edits = re.findall(r"sys\.path\.(?:insert|append|extend)\(|sys\.path\s*\+?=", path.read_text())
        assert not edits, f"bench/{path.name} edits sys.path: {edits}"
        graph[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("bench."):
                    graph[name].add(node.module.removeprefix("bench."))
                elif node.module == "bench":
                    graph[name].update(a.name for a in node.names)
                assert node.level == 0 and node.module.split(".")[0] not in scripts | {"reviews", "processes",
                                                                                        "driver", "baseline"}, \
                    f"bench/{path.name} imports {node.module!r}: import bench modules as bench.<name>"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] not in graph.keys() | scripts, \
                        f"bench/{path.name} imports {alias.name!r}: import bench modules as bench.<name>"
    assert {"processes", "driver", "baseline", "reviews", "admit_bench", "gang_scale"} <= graph.keys()
    for name, deps in graph.items():
        if name not in scripts:
            assert not deps & scripts, f"bench/{name}.py (shared) imports the script(s) {sorted(deps & scripts)}"

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(d == goal or (d not in seen and reaches(d, goal, seen | {d})) for d in graph.get(start, ()))

    cycles = [name for name in graph if reaches(name, name, {name})]
    assert not cycles, f"bench modules in an import cycle: {cycles}"
