"""Every refusal admit gives reaches the user with its fix first: an imperative (set, raise, lower, scale, ...), then
a colon and why.

kubectl prints a refusal as ``Error from server (Forbidden): admission webhook "..." denied the request: <message>``
and a terminal often cuts that line at its width, so the words a user needs to act come first, as warnings' do
(``test_warnings_fit.py``). The corpus is the repository's own refused examples (``examples/denied/``) and
real-shaped manifests of every kind whose gang admit refuses below its minMember, through ``admit review`` (the
webhook's own ``/mutate`` and ``/validate``).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from admit.cli import build_parser, config_from_args
from admit.cli.review import review_documents

ROOT = Path(__file__).resolve().parents[2]

#: The verbs a refusal may open with: each names what the user does next.
IMPERATIVES = frozenset({"Set", "Raise", "Lower", "Scale", "Add", "Remove", "Rename", "Delete", "Use", "Run",
                         "Change", "Give", "Drop", "Create", "Keep", "Wait", "Enable", "Move", "Make", "Put",
                         "Label", "Annotate", "Split"})


def _statefulset(replicas: int, min_member: int) -> str:
    return f"""
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: kafka, namespace: data, annotations: {{gang.admit.dev/min-member: "{min_member}"}}}}
spec:
  replicas: {replicas}
  podManagementPolicy: Parallel
  serviceName: kafka
  selector: {{matchLabels: {{app: kafka}}}}
  template:
    metadata: {{labels: {{app: kafka}}}}
    spec: {{containers: [{{name: kafka, image: apache/kafka:3.9.0}}]}}
"""


_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: shards, namespace: ml, annotations: {gang.admit.dev/min-member: "4"}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: w, image: busybox:1.36, command: [sh, -c, "sleep 5"]}]
"""

_PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp, namespace: ml, annotations: {gang.admit.dev/min-member: "5"}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: pytorch, image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: pytorch, image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime}]}}
"""


def _denied_examples() -> list[tuple[str, list[dict[str, Any]]]]:
    cases = []
    for path in sorted((ROOT / "examples" / "denied").iterdir()):
        if path.suffix == ".yaml":
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        else:  # an AdmissionReview of a Scale: reviewed with the workload it scales
            docs = [*yaml.safe_load_all((ROOT / "examples" / "web-gang-deployment.yaml").read_text()),
                    *yaml.safe_load_all((ROOT / "examples" / "paused-gang-deployment.yaml").read_text()),
                    yaml.safe_load(path.read_text())]
        cases.append((f"examples/denied/{path.name}", [d for d in docs if d]))
    return cases


CASES = [*_denied_examples(),
         ("StatefulSet below its minMember", list(yaml.safe_load_all(_statefulset(2, 3)))),
         ("Job below its minMember", list(yaml.safe_load_all(_JOB))),
         ("PyTorchJob below its minMember", list(yaml.safe_load_all(_PYTORCHJOB)))]


def _refusals(docs: list[dict[str, Any]]) -> list[str]:
    config = config_from_args(build_parser().parse_args(["review", "-"]))
    results = asyncio.run(review_documents([(f"doc#{i}", d) for i, d in enumerate(docs)], config))
    return [r["message"] for r in results if r["allowed"] is False]


def leads_with_fix(message: str) -> bool:
    """Whether ``message`` opens with an imperative of :data:`IMPERATIVES` and gives its reason after a colon."""
    first = re.match(r"[A-Za-z]+", message)
    return first is not None and first.group() in IMPERATIVES and ": " in message


@pytest.mark.parametrize("name, docs", CASES, ids=[c[0] for c in CASES])
def test_every_refusal_leads_with_an_imperative_fix_and_then_says_why(name: str, docs: list[dict[str, Any]]) -> None:
    refusals = _refusals(docs)
    assert refusals, f"{name} is no longer refused"
    for message in refusals:
        assert leads_with_fix(message), f"{name}: the fix does not come first: {message}"
