"""``admit review`` answers as ``admit serve`` started with the same flags (or the chart's values) would.

Each test runs the same manifests through ``admit review`` (``review_documents``, the config its flags give) and
through a server (the webhook over HTTP with its controller, ``tests/webhook_stack.py``, the config ``admit serve``'s
flags give) and compares the verdicts: allowed, the refusal's code and message, the warnings. A CI step that passes
``admit review`` then sees what ``kubectl apply`` sees.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from admit.cli import build_parser, config_from_args, main
from admit.cli.review import review_documents
from admit.cli.values import WORKLOAD_SWITCHES, serve_flags
from admit.config import Config
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import admission_review, apply_answer, example
from tests.webhook_stack import webhook_with_controller


def _inputs() -> list[dict[str, Any]]:
    pause = example("pause-gang-deployment.yaml")
    native = copy.deepcopy(pause)
    native["metadata"]["name"] = "native"
    native["metadata"]["annotations"]["gang.admit.dev/backend"] = "workload-api"
    small = copy.deepcopy(pause)
    small["metadata"]["name"] = "small"
    small["spec"]["replicas"] = 2
    typo = copy.deepcopy(pause)
    typo["metadata"]["name"] = "typo"
    typo["metadata"]["annotations"]["gang.admit.dev/min-resource"] = "none"
    ray = example("raycluster-autoscaler.yaml")
    return [pause, native, small, typo, ray]


def _config_fields(config: Config) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}


async def _server_verdicts(aiohttp_client: Any, config: Config, docs: list[dict[str, Any]],
                           workload_api: str | None) -> list[tuple[bool, int, str, list[str]]]:
    verdicts = []
    async with FakeKubeAPI(workload_api=workload_api) as fake:
        async with webhook_with_controller(aiohttp_client, fake, **_config_fields(config)) as stack:
            for doc in docs:
                mutation = await stack.post("/mutate", admission_review(doc))
                if not mutation["allowed"]:
                    status = mutation.get("status") or {}
                    verdicts.append((False, status.get("code"), status.get("message", ""),
                                     mutation.get("warnings", [])))
                    continue
                answer = await stack.post("/validate", admission_review(apply_answer(doc, {"response": mutation})))
                status = answer.get("status") or {}
                warnings = list(dict.fromkeys(mutation.get("warnings", []) + answer.get("warnings", [])))
                verdicts.append((answer["allowed"], status.get("code") if not answer["allowed"] else 200,
                                 status.get("message", "") if not answer["allowed"] else "", warnings))
    return verdicts


#: The Config fields the decision flags set (``cli._add_decision_flags``, ``--extra-gang-backend``).
DECISION = ("gang_backend", "extra_gang_backends", "scheduler_name", "annotation_prefix", "pod_group_group",
            "pod_group_label", "ignored_api_groups", "kubeflow_gang_by_operator", "controller_gangs")

CASES = [
    pytest.param([], [], None, id="serve-defaults"),
    pytest.param(["--extra-gang-backend", "workload-api"], ["--extra-gang-backend", "workload-api"], "v1alpha2",
                 id="extra-workload-api"),
    pytest.param(["--gang-backend", "workload-api"], ["--gang-backend", "workload-api"], "v1alpha2",
                 id="workload-api-default"),
]


@pytest.mark.parametrize("review_flags,serve_args,workload_api", CASES)
async def test_review_and_serve_agree_on_every_input(review_flags, serve_args, workload_api, aiohttp_client):
    docs = _inputs()
    serve_config = config_from_args(build_parser().parse_args(["serve", *serve_args]))
    if workload_api:
        serve_config = serve_config.replace(workload_api_version=workload_api)  # what discovery finds at start
    served = await _server_verdicts(aiohttp_client, serve_config, docs, workload_api)
    config = config_from_args(build_parser().parse_args(["review", *review_flags, "-"]))
    results = await review_documents([(f"doc{i}", d) for i, d in enumerate(docs)], config)
    reviewed = [(r["allowed"], r["message"] if not r["allowed"] else "", r["warnings"]) for r in results]
    assert [(a, m, w) for a, _, m, w in served] == reviewed
    native = reviewed[1]
    assert native[0] is (serve_config.allowed_backends >= {"workload-api"})  # the case the issue found


def test_a_values_file_gives_review_the_flags_the_chart_gives_serve(tmp_path, capsys):
    from tests.support.chart import rendered

    values = {"config": {"gangBackend": "workload-api", "extraGangBackends": ["coscheduling"],
                         "schedulerName": "default-scheduler", "controllerGangs": ["Job"],
                         "kubeflowGangByOperator": True},
              "workloads": {"ray": False, "spark": False}}
    [deployment] = [o for o in rendered(values) if o["kind"] == "Deployment"]
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "admit"]
    serve = config_from_args(build_parser().parse_args(container["args"]))
    path = tmp_path / "values.yaml"
    import yaml

    path.write_text(yaml.safe_dump(values))
    parsed = {}

    def capture(args):
        parsed["config"] = config_from_args(args)
        return 0

    import admit.cli as cli

    original = cli._cmd_review
    cli._cmd_review = capture
    try:
        assert main(["review", "--values", str(path), "x.yaml"]) == 0
    finally:
        cli._cmd_review = original
    review = parsed["config"].replace(workload_api_version=serve.workload_api_version)
    assert {k: getattr(review, k) for k in DECISION} == {k: getattr(serve, k) for k in DECISION}
    assert serve.ignored_api_groups == {"ray.io", "sparkoperator.k8s.io"}


def test_the_chart_defaults_are_the_flags_defaults_so_an_empty_values_file_changes_nothing():
    from tests.support.chart import rendered

    [deployment] = [o for o in rendered({}) if o["kind"] == "Deployment"]
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "admit"]
    chart = config_from_args(build_parser().parse_args(container["args"]))
    flags = config_from_args(build_parser().parse_args(["serve"]))
    assert {k: getattr(chart, k) for k in DECISION} == {k: getattr(flags, k) for k in DECISION}
    assert serve_flags({}) == [] and set(WORKLOAD_SWITCHES) == set(deployment_values())


def deployment_values() -> dict[str, Any]:
    """The chart's ``workloads`` switches (charts/admit/values.yaml)."""
    import yaml
    from tests.support.chart import CHART

    return yaml.safe_load((CHART / "values.yaml").read_text())["workloads"]


def test_a_values_file_that_is_not_a_mapping_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "values.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(SystemExit) as e:
        main(["review", "--values", str(path), "x.yaml"])
    assert e.value.code == 2 and "a Helm values file is a mapping" in capsys.readouterr().err
