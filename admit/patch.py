"""JSONPatch (RFC 6902) building for the mutating webhook.

Rules (RFC 6901 / RFC 6902, and the Kubernetes docs "Dynamic Admission Control", response ``patchType: JSONPatch``):

- a path segment escapes ``~`` as ``~0`` and ``/`` as ``~1`` (``scheduling.x-k8s.io/pod-group`` becomes
  ``scheduling.x-k8s.io~1pod-group``);
- ``add`` needs its parent to exist: a missing ``metadata`` or ``labels`` map is added whole, with the new key
  inside it, instead of adding the key under a parent that is not there;
- an existing equal value gives no operation, so a second pass over an already mutated object gives an empty patch
  (``reinvocationPolicy: IfNeeded`` re-runs the webhook).
"""

from __future__ import annotations

from typing import Any

__all__ = ["escape", "pointer", "set_op"]


def escape(segment: str) -> str:
    """Escape one JSON Pointer segment (RFC 6901 section 3): ``~`` -> ``~0`` then ``/`` -> ``~1``."""
    if "~" in segment:
        segment = segment.replace("~", "~0")
    if "/" in segment:
        segment = segment.replace("/", "~1")
    return segment


def pointer(path: tuple[str, ...]) -> str:
    """JSON Pointer for a key path: ``("metadata", "labels", "a/b")`` -> ``"/metadata/labels/a~1b"``."""
    return "".join("/" + escape(p) for p in path)


def set_op(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any] | None:
    """One JSONPatch operation that makes ``obj`` hold ``value`` at key ``path``, or ``None`` if it already does.

    Walks ``path`` in ``obj``: at the first missing (or ``null``, or non-object) step it returns an ``add`` (or
    ``replace`` for a ``null``/non-object value) of the nested maps that are missing, e.g.
    ``{"op": "add", "path": "/spec/template/metadata", "value": {"labels": {"k": "v"}}}``; when the full path exists
    with another value it returns a ``replace``. ``obj`` is not modified.
    """
    node: Any = obj
    for i, key in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, list):  # an index step (list items are never added here, only walked into)
            if not key.isdigit() or int(key) >= len(node):
                return None
            child = node[int(key)]
            if last:
                return None if child == value else {"op": "replace", "path": pointer(path), "value": value}
            if not isinstance(child, dict):
                return {"op": "replace", "path": pointer(path[: i + 1]), "value": _nest(path[i + 1 :], value)}
            node = child
            continue
        if key not in node:
            return {"op": "add", "path": pointer(path[: i + 1]), "value": _nest(path[i + 1 :], value)}
        child = node[key]
        if last:
            if child == value and type(child) is type(value):
                return None
            return {"op": "replace", "path": pointer(path), "value": value}
        if not isinstance(child, (dict, list)):
            return {"op": "replace", "path": pointer(path[: i + 1]), "value": _nest(path[i + 1 :], value)}
        node = child
    return None


def _nest(rest: tuple[str, ...], value: Any) -> Any:
    for key in reversed(rest):
        value = {key: value}
    return value


def set_keys_ops(obj: dict[str, Any], map_path: tuple[str, ...], values: dict[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch operations that make the map at ``map_path`` hold every ``key: value`` of ``values``.

    When the map (or a parent of it) is missing, one ``add`` carries all keys at once, so several keys added to a
    missing ``labels`` map never overwrite each other. Keys already equal give no operation.
    """
    node: Any = obj
    for key in map_path:
        if isinstance(node, list) and key.isdigit() and int(key) < len(node) and isinstance(node[int(key)], dict):
            node = node[int(key)]
            continue
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            break
        node = node[key]
    else:
        ops = []
        for key, value in values.items():
            op = set_op(node, (key,), value)
            if op is not None:
                op["path"] = pointer(map_path) + op["path"]
                ops.append(op)
        return ops
    op = set_op(obj, map_path, dict(values))
    return [op] if op is not None else []
