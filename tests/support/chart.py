"""The chart as Helm renders it, for tests that need what a cluster would be given: the webhook configurations the
fake API's admission chain is built from (``admission_chain``), rather than a hand-written copy of their rules.

Rendering uses Helm's Go SDK (``helm-python-sdk``, the test extra) once per values per process.
"""

from __future__ import annotations

import copy
import functools
import json
import ssl as _ssl
from pathlib import Path
from typing import Any

import yaml

from admit.testing.fake_kube import AdmissionChain

CHART = Path(__file__).resolve().parents[2] / "charts" / "admit"
RELEASE = "admit"
NAMESPACE = "admit-system"


@functools.lru_cache(maxsize=None)
def _render(values_json: str) -> tuple[dict[str, Any], ...]:
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(json.loads(values_json), name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return tuple(objects)


def rendered(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object ``helm template`` gives for ``values`` (fresh copies)."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True))))


def webhook_configurations(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's MutatingWebhookConfiguration and ValidatingWebhookConfiguration for ``values``."""
    return [o for o in rendered(values) if o.get("kind") in ("MutatingWebhookConfiguration",
                                                               "ValidatingWebhookConfiguration")]


def admission_chain(url: str, ssl: _ssl.SSLContext | bool = False,
                    values: dict[str, Any] | None = None) -> AdmissionChain:
    """The fake API's admission chain with admit's webhooks exactly as the chart registers them (rules,
    namespaceSelector, matchConditions, failurePolicy, reinvocationPolicy), called at ``url``."""
    return AdmissionChain.from_configurations(webhook_configurations(values), url, ssl)
