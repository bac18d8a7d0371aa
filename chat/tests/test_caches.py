"""`BoundedCache`: never more than its capacity, the least recently used dropped first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.caches import BoundedCache


def test_the_least_recently_used_entry_goes_first():
    cache: BoundedCache[int, str] = BoundedCache(3)
    for n in range(5):
        cache.put(n, f"persona {n}")
    cache.put(2, "persona 2")  # written again: the most recent now

    assert len(cache) == 3
    assert [cache.peek(n) for n in range(5)] == [None, None, "persona 2", "persona 3", "persona 4"]
    cache.put(5, "persona 5")
    assert list(cache) == [4, 2, 5]  # 3 was the least recently used: peeking moved nothing

    assert cache.get(2) == "persona 2"  # reading makes it the most recent
    cache.put(6, "persona 6")
    assert list(cache) == [5, 2, 6]


def test_get_or_put_makes_a_missing_entry_once():
    cache: BoundedCache[str, list[int]] = BoundedCache(2)
    made = []

    def make() -> list[int]:
        made.append(1)
        return []

    first = cache.get_or_put("a", make)
    assert cache.get_or_put("a", make) is first
    assert made == [1]
    assert cache.pop("a") is first and "a" not in cache and cache.pop("a") is None


@pytest.mark.parametrize("capacity", [0, -1])
def test_a_cache_holds_at_least_one_entry(capacity):
    with pytest.raises(ValueError, match="at least 1 entry"):
        BoundedCache(capacity)


@given(
    capacity=st.integers(1, 8),
    steps=st.lists(st.tuples(st.sampled_from(["put", "get", "peek"]), st.integers(0, 12))),
)
def test_it_never_holds_more_than_its_capacity_and_keeps_the_newest_put(capacity, steps):
    cache: BoundedCache[int, int] = BoundedCache(capacity)
    for verb, key in steps:
        if verb == "put":
            cache.put(key, key)
            assert cache.peek(key) == key
        else:
            getattr(cache, verb)(key)
        assert len(cache) <= capacity
