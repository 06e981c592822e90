"""admit/controller/multiindex.py: the controllers' one-to-many indexes, which store a lone member without a set."""

import sys

from admit.controller.multiindex import MultiIndex

WEB = ("apps/v1", "Deployment", "team-a", "web")
WEB_RS = ("apps/v1", "ReplicaSet", "team-a", "web-7d9c5b8f6d")
GROUP = ("team-a", "web")


def test_a_key_with_one_member_stores_the_member_and_no_set():
    index: MultiIndex = MultiIndex()
    index.add(GROUP, WEB)
    assert index.get(GROUP) == frozenset({WEB})
    assert index._map[GROUP] is WEB
    assert GROUP in index and len(index) == 1 and list(index) == [GROUP]


def test_a_second_member_turns_the_entry_into_a_set_and_removing_it_turns_it_back():
    index: MultiIndex = MultiIndex()
    index.add(GROUP, WEB)
    index.add(GROUP, WEB)  # adding again changes nothing
    assert index._map[GROUP] is WEB
    index.add(GROUP, WEB_RS)
    assert index.get(GROUP) == frozenset({WEB, WEB_RS}) and isinstance(index._map[GROUP], set)
    index.discard(GROUP, WEB_RS)
    assert index._map[GROUP] == WEB and index.get(GROUP) == frozenset({WEB})


def test_removing_the_last_member_drops_the_key_and_unknown_removals_are_ignored():
    index: MultiIndex = MultiIndex()
    index.discard(GROUP, WEB)
    index.add(GROUP, WEB)
    index.discard(GROUP, WEB_RS)
    assert index.get(GROUP) == frozenset({WEB})
    index.discard(GROUP, WEB)
    assert GROUP not in index and index.get(GROUP) == frozenset() and len(index) == 0
    index.add(GROUP, WEB)
    index.add(GROUP, WEB_RS)
    index.discard(GROUP, WEB)
    index.discard(GROUP, WEB_RS)
    assert GROUP not in index


def test_get_returns_a_snapshot_that_later_changes_do_not_touch():
    index: MultiIndex = MultiIndex()
    index.add(GROUP, WEB)
    index.add(GROUP, WEB_RS)
    members = index.get(GROUP)
    index.discard(GROUP, WEB)
    assert members == frozenset({WEB, WEB_RS})


def test_twenty_thousand_one_member_keys_cost_no_set_each():
    index: MultiIndex = MultiIndex()
    for i in range(20_000):
        index.add(("team-a", f"web-{i}"), ("apps/v1", "Deployment", "team-a", f"web-{i}"))
    assert not any(isinstance(v, set) for v in index._map.values())
    assert sys.getsizeof(set()) * 20_000 > 4 * 1024 * 1024  # what the plain dict of sets held on top of this
