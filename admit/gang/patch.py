"""JSONPatch (RFC 6902) building for the mutating webhook: admit adds its own keys and never rewrites what it found.

Rules (RFC 6901 / RFC 6902, and the Kubernetes docs "Dynamic Admission Control", response ``patchType: JSONPatch``):

- a path segment escapes ``~`` as ``~0`` and ``/`` as ``~1`` (``scheduling.x-k8s.io/pod-group`` becomes
  ``scheduling.x-k8s.io~1pod-group``; RFC 6901 section 3: ``~`` first, so ``a/b~`` is ``a~1b~0``);
- only the keys admit owns (``admit.families.owned.OWNED_FIELDS``) are added or replaced, one operation per key, wherever the
  map is: under plain maps or across lists (a JobSet's ``spec.replicatedJobs[i].template.spec.template``, a Ray
  ``workerGroupSpecs[i].template``), so every key the user, an operator or another webhook wrote stays;
- ``add`` needs its parent to exist (RFC 6902 section 4.1): a missing map (or one that is ``null``) is added holding
  only admit's keys (``{"op": "add", "path": "/spec/template/metadata", "value": {"labels": {<admit's>}}}``);
- a list is only walked into, never written, and no list item is added: an index past the end, or a step that is not
  an index, gives no operation;
- a scalar or a list where a map belongs (an object the API server's schema validation refuses anyway) is left as it
  is: no operation, never a replace that would drop it;
- an existing equal value (same JSON type) gives no operation, so a second pass over an already mutated object gives
  an empty patch (``reinvocationPolicy: IfNeeded`` re-runs the webhook).

The hot path: one walk of the path (dict and list lookups, no copies), the map's pointer escaped once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["escape", "pointer", "set_op", "set_keys_ops"]


def escape(segment: str) -> str:
    """Escape one JSON Pointer segment (RFC 6901 section 3): ``~`` -> ``~0`` then ``/`` -> ``~1``."""
    return segment.replace("~", "~0").replace("/", "~1")


def pointer(path: tuple[str, ...]) -> str:
    """JSON Pointer for a key path: ``("metadata", "labels", "a/b")`` -> ``"/metadata/labels/a~1b"``."""
    return "".join("/" + escape(p) for p in path)


def _nest(rest: tuple[str, ...], value: Any) -> Any:
    for key in reversed(rest):
        value = {key: value}
    return value


def set_keys_ops(obj: dict[str, Any], map_path: tuple[str, ...], values: dict[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch operations that make the map at ``map_path`` (a key path from the object root, a list index as a
    decimal string, as ``gang.plan.get_path`` reads it) hold every ``key: value`` of ``values``, touching nothing
    else (rules in the module docstring): one ``add`` or ``replace`` per key, in ``values`` order, or one operation
    creating a missing map; ``[]`` when nothing changes or cannot be patched. ``obj`` is not modified; no error is
    raised for any shape."""
    node: Any = obj
    for i, key in enumerate(map_path):
        if isinstance(node, dict):
            child = node.get(key)
            if child is None:  # missing, or null: the map starts here, holding admit's keys only
                op = "replace" if key in node else "add"
                return [{"op": op, "path": pointer(map_path[: i + 1]), "value": _nest(map_path[i + 1:], dict(values))}]
        elif isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                return []
            child = node[int(key)]
        else:
            return []
        node = child
    if not isinstance(node, dict):
        return []
    ops: list[dict[str, Any]] = []
    base: str | None = None
    for key, value in values.items():
        if key in node:
            have = node[key]
            if have == value and type(have) is type(value):
                continue
            op = "replace"
        else:
            op = "add"
        if base is None:
            base = pointer(map_path)
        ops.append({"op": op, "path": f"{base}/{escape(key)}", "value": value})
    return ops


def set_op(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any] | None:
    """One JSONPatch operation that makes ``obj`` hold ``value`` at key ``path`` (``("spec", "template", "spec",
    "schedulerName")``), or ``None`` when it already does or cannot be patched: :func:`set_keys_ops` for the one
    key ``path[-1]`` of the map at ``path[:-1]``."""
    ops = set_keys_ops(obj, path[:-1], {path[-1]: value})
    return ops[0] if ops else None
