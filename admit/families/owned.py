"""The fields admit owns: the only places in a user's object that its mutating webhook adds, replaces or removes.

Everything else in an object (labels, annotations and fields the user, an operator or another webhook wrote) passes
through ``/mutate`` unchanged: ``admit.gang.patch`` adds or replaces only these keys, one operation per key, and never
rewrites a map or list it found. The invariant tests (``tests/families/test_invariants.py``, ``docs/invariants.md``) check
both halves for every kind of ``admit.families.kinds.RESOLVERS``: every leaf the user wrote survives except these, and every
operation admit sends writes only these.

A field is a key-path pattern (:class:`OwnedField`): ``"*"`` stands for any one step (a map key or a list index),
``{name}`` for a key that depends on the configuration (:func:`resolved`). An *anchored* pattern starts at the object
root; an unanchored one may start at any depth (a pod template inside a Deployment, a JobSet's list of
replicatedJobs, a Kubeflow replica, a Pod itself). Everything under an owned field is owned too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..backends.registry import hooks
from ..config import Config
from ..gang.plan import get_path
from .lws import group_spec_key
from .trainer import patch_manager

__all__ = ["OwnedField", "OWNED_FIELDS", "resolved", "owner_of"]


@dataclass(frozen=True, slots=True)
class OwnedField:
    """One field admit owns.

    Attributes:
        path: key-path pattern (``("metadata", "labels", "{managed_label}")``); ``"*"`` matches any one step.
        anchored: the pattern starts at the object root (else at any depth).
        why: what the field is for and the rule that makes it admit's (for readers and test failure messages).
        item: ``(key, value)`` that marks a list item as admit's when the pattern's last step is a list index
            (``("manager", "gang.admit.dev/admit")`` for Trainer's ``runtimePatches``); ``None`` for none.
    """

    path: tuple[str, ...]
    anchored: bool
    why: str
    item: tuple[str, str] | None = None


OWNED_FIELDS: tuple[OwnedField, ...] = (
    OwnedField(
        ("metadata", "labels", "{managed_label}"), True,
        "the workload's own <prefix>/managed label: the PodGroup controller's label selector (admit.controller)"),
    OwnedField(
        ("metadata", "annotations", "{group_spec_annotation}"), False,
        "<prefix>/group-spec on a LeaderWorkerSet's leader and worker templates: the PodGroup spec each LWS "
        "group's pods read at creation, without an API call (admit.families.lws)"),
    OwnedField(
        ("spec", "runtimePatches", "*"), True,
        "a TrainJob's runtimePatches entry with manager gang.admit.dev/admit: it carries the gang annotations to the "
        "JobSet Trainer builds (admit.families.trainer); other managers' entries are never touched",
        item=("manager", "{runtime_patch_manager}")),
    *(OwnedField(
        path + ("{" + key + "}",), True,
        "the gang annotations a wrapper's template carries to each object its operator makes: admit writes the "
        "wrapper's own gang annotations there and removes them with it (admit.families.wrappers: "
        "ScheduledSparkApplication, RayCronJob)")
      for path in (("spec", "template", "driver", "annotations"),
                   ("spec", "jobTemplate", "rayClusterSpec", "headGroupSpec", "template", "metadata", "annotations"))
      for key in ("min_member_key", "timeout_key", "min_resources_key", "backend_key")),
)
"""The fields admit writes on an admitted object whatever its gang backend (module docstring); each backend lists
its own pod fields (its ``owned_fields`` hook, :func:`resolved`)."""


def resolved(config: Config) -> tuple[OwnedField, ...]:
    """:data:`OWNED_FIELDS` with the ``{name}`` keys of ``config`` filled in, then the fields of every registered
    backend (``interface.BackendHooks.owned_fields``, in registry order)."""
    return _resolved(config, hooks("owned_fields"))


@lru_cache(maxsize=8)
def _resolved(config: Config, backends: tuple[Any, ...]) -> tuple[OwnedField, ...]:
    names = {"managed_label": config.managed_label,
             "group_spec_annotation": group_spec_key(config), "runtime_patch_manager": patch_manager(config),
             "min_member_key": config.min_member_key, "timeout_key": config.timeout_key,
             "min_resources_key": config.min_resources_key, "backend_key": config.backend_key}

    def fill(step: str) -> str:
        return names[step[1:-1]] if step.startswith("{") and step.endswith("}") else step

    return (*(OwnedField(tuple(fill(s) for s in f.path), f.anchored, f.why,
                         None if f.item is None else (f.item[0], fill(f.item[1]))) for f in OWNED_FIELDS),
            *(OwnedField(*field) for owned_fields in backends for field in owned_fields(config)))


def owner_of(path: tuple[Any, ...], obj: Any, config: Config) -> OwnedField | None:
    """The :class:`OwnedField` that makes the value at key ``path`` of ``obj`` admit's, or ``None`` when the user's.

    ``path`` steps are map keys, or list indexes (``int`` or decimal ``str``); ``obj`` is the object the path is read
    in (for :attr:`OwnedField.item`: the list item must carry the marker there). Not for the hot path: tests and
    tools.
    """
    steps = tuple(str(s) for s in path)
    for f in resolved(config):
        n = len(f.path)
        starts = (0,) if f.anchored else range(len(steps) - n + 1)
        for i in starts:
            window = steps[i:i + n]
            if len(window) == n and all(p == "*" or p == s for p, s in zip(f.path, window)):
                if f.item is None:
                    return f
                item = get_path(obj, steps[:i + n])
                if isinstance(item, dict) and item.get(f.item[0]) == f.item[1]:
                    return f
    return None
