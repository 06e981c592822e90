"""``admit review --values FILE``: the chart values that become ``admit serve``'s decision flags, so that a review
answers as the server the chart starts.

The chart's Deployment (``charts/admit/templates/deployment.yaml``) turns these values into ``admit serve`` flags:
``config.schedulerName``, ``annotationPrefix``, ``podGroupAPI`` and ``gangBackend`` into ``--scheduler-name``,
``--annotation-prefix``, ``--pod-group-api`` and ``--gang-backend``; each of ``config.extraGangBackends[]`` but
``gangBackend`` into ``--extra-gang-backend``; ``config.controllerGangs[]`` into ``--controller-gang``;
``config.kubeflowGangByOperator: true`` into ``--kubeflow-gang-by-operator``; ``workloads.<switch>: false`` into
``--ignore-api-group`` of that switch's API group (:data:`WORKLOAD_SWITCHES`). A key the file leaves out keeps the
chart's default (``charts/admit/values.yaml``), which is each flag's own default (``tests/cli/test_review_serve.py``
checks both against the rendered chart).
"""

from __future__ import annotations

from typing import Any

import yaml

from ..config import Config

__all__ = ["ValuesError", "WORKLOAD_SWITCHES", "serve_flags", "load_values"]

#: ``workloads.<switch>`` of the chart -> the API group ``--ignore-api-group`` names when it is false.
WORKLOAD_SWITCHES = {"kubeflow": "kubeflow.org", "spark": "sparkoperator.k8s.io", "jobset": "jobset.x-k8s.io",
                     "leaderWorkerSet": "leaderworkerset.x-k8s.io", "ray": "ray.io", "trainer": "trainer.kubeflow.org"}

_SCALARS = (("schedulerName", "--scheduler-name"), ("annotationPrefix", "--annotation-prefix"),
            ("podGroupAPI", "--pod-group-api"), ("gangBackend", "--gang-backend"))


class ValuesError(ValueError):
    """The values file cannot be read or holds a value of the wrong type; ``str(e)`` names the file and the key."""


def load_values(path: str) -> dict[str, Any]:
    """The mapping a Helm values file holds (``{}`` for an empty file).

    Raises:
        ValuesError: the file cannot be read, is not YAML, or is not a mapping.
    """
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValuesError(f"--values {path}: {e}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValuesError(f"--values {path}: a Helm values file is a mapping, not a {type(values).__name__}")
    return values


def _typed(values: dict[str, Any], key: str, kind: type, source: str, section: str = "") -> Any:
    """``values[key]``: a mapping (``kind`` dict) or a list of names (``kind`` list), empty when absent or null."""
    value = values.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(i, str) for i in value)):
        what = "a mapping" if kind is dict else "a list of names"
        raise ValuesError(f"--values {source}: {section}{key} must be {what}")
    return value


def serve_flags(values: dict[str, Any], source: str = "values.yaml") -> list[str]:
    """The ``admit serve`` decision flags the chart gives for ``values`` (module docstring), in the chart's order:
    ``{"config": {"gangBackend": "workload-api"}, "workloads": {"ray": False}}`` ->
    ``["--gang-backend=workload-api", "--ignore-api-group=ray.io"]``.

    Raises:
        ValuesError: ``config`` or ``workloads`` is not a mapping, a list value is not a list of names, a scalar is
            not a string (``source`` names the file).
    """
    config = _typed(values, "config", dict, source)
    workloads = _typed(values, "workloads", dict, source)
    flags = []
    for key, flag in _SCALARS:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValuesError(f"--values {source}: config.{key} must be a string, not {value!r}")
        flags.append(f"{flag}={value}")
    default = config.get("gangBackend", Config().gang_backend)  # the chart's default is admit's
    flags += [f"--extra-gang-backend={b}" for b in _typed(config, "extraGangBackends", list, source, "config.")
              if b != default]
    flags += [f"--controller-gang={k}" for k in _typed(config, "controllerGangs", list, source, "config.")]
    flags += [f"--ignore-api-group={group}" for switch, group in WORKLOAD_SWITCHES.items()
              if workloads.get(switch, True) is False]
    if config.get("kubeflowGangByOperator") is True:
        flags.append("--kubeflow-gang-by-operator")
    return flags
