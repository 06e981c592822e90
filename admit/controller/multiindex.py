"""A one-to-many index (key -> set of members) that stores a lone member without a set.

The controller indexes every cached gang workload and gang object several ways (``manager.py``: claims by group, by
owner identity; ``gangs.py``: objects by owner), and almost every key has exactly one member (one Deployment names
one PodGroup). A Python ``set`` of one costs 216 bytes: at 20,000 gang workloads, which the chart's 256 MiB must
hold, three such indexes would hold about 12 MiB of one-member sets.
"""

from __future__ import annotations

from typing import Generic, Hashable, Iterator, TypeVar

__all__ = ["MultiIndex"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


class MultiIndex(Generic[K, V]):
    """``key -> {members}`` with ``add``, ``discard`` and ``get``.

    Members must be hashable and never ``set`` objects themselves (admit's are tuples: workload keys
    ``(apiVersion, kind, namespace, name)`` and group keys ``(namespace, name)``).
    """

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: dict[K, V | set[V]] = {}

    def add(self, key: K, member: V) -> None:
        """Add ``member`` under ``key`` (no-op when present)."""
        current = self._map.get(key)
        if current is None:
            self._map[key] = member
        elif isinstance(current, set):
            current.add(member)
        elif current != member:
            self._map[key] = {current, member}

    def discard(self, key: K, member: V) -> None:
        """Remove ``member`` from ``key`` (no-op when absent); a key left with no member is dropped, one left with
        one member goes back to storing it alone."""
        current = self._map.get(key)
        if current is None:
            return
        if isinstance(current, set):
            current.discard(member)
            if len(current) == 1:
                self._map[key] = next(iter(current))
            elif not current:
                del self._map[key]
        elif current == member:
            del self._map[key]

    def get(self, key: K) -> frozenset[V]:
        """The members of ``key``, a new frozenset (empty for an unknown key): callers may keep it while the index
        changes."""
        current = self._map.get(key)
        if isinstance(current, set):
            return frozenset(current)
        return frozenset() if current is None else frozenset((current,))

    def __contains__(self, key: object) -> bool:
        """True when ``key`` has at least one member."""
        return key in self._map

    def __iter__(self) -> Iterator[K]:
        """The keys that have members."""
        return iter(self._map)

    def __len__(self) -> int:
        """Number of keys with members."""
        return len(self._map)
