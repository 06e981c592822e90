"""bench/apiserver_bench.py keeps working on the real control plane: a tiny run (one round, a few pods per path)
with its own admit and allow-only webhook. Nothing is timed; the figures are checked for shape, and admit's
/metrics must have counted the pod webhook calls kube-apiserver made to it."""

from __future__ import annotations

import argparse

import pytest

from bench import apiserver_bench


@pytest.mark.needs("controllers")
async def test_a_tiny_apiserver_bench_run_reports_every_path_and_the_added_cost(plane, tmp_path):
    args = argparse.Namespace(rounds=1, pods=4, concurrency=2, namespace_prefix="bench-tiny")
    result = await apiserver_bench.measure(args, str(plane.kubeconfig), tmp_path)
    for mode in ("none", "admit", "allow"):
        figures = result["modes"][mode]
        assert figures["pods"] == 4 and figures["errors"] == 0 and figures["pods_per_s"] > 0
        assert 0 < figures["p50_ms"] <= figures["p99_ms"]
    assert set(result["added"]) == set(result["added_per_round_median"]) == {
        "admit vs none", "allow-only vs none", "admit vs allow-only"}
    assert set(result["admit_own_ms"]) == {"/mutate", "/validate"} and all(v > 0 for v in result["admit_own_ms"].values())
    assert all(a["throughput_ratio"] > 0 for a in result["added"].values())
    # admit saw the warm-up and the measured pods of its namespace, on both webhooks
    seen = result["admit_webhook_requests"]
    assert seen["/mutate 200"] >= 4 + 10 and seen["/validate 200"] >= 4 + 10
    report = apiserver_bench.render(result, args)
    assert "| admit vs none |" in report and "| admit (mutate + validate) | 4 |" in report
    # nothing left behind: the bench's webhook configurations are gone
    hooks = plane.cp.rest("GET", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")["items"]
    assert not [h for h in hooks if h["metadata"]["name"].endswith("-bench")]
