"""The SDK's pooling: the size-class rule and the keyed free lists every backend uses."""

from __future__ import annotations

from bitnet_core.sdk.pool import MIN_CLASS, FreeLists, size_class


def test_size_classes_bound_the_waste_and_are_stable():
    for n in [0, 1, 255, 256, 257, 1000, 4097, 123457, 10**7, 3 * 10**8]:
        c = size_class(n)
        assert c >= max(n, MIN_CLASS) and (c == MIN_CLASS or c <= n * 1.125 + 1)
        assert size_class(c) == c  # a class is its own class


class Buf:
    def __init__(self, n: int) -> None:
        self.n = n


def test_free_lists_reuse_by_key_and_count():
    lists = FreeLists()
    assert lists.take(256) is None and lists.misses == 1
    a = Buf(256)
    assert lists.give(256, a, 256) == []
    assert lists.take(512) is None
    assert lists.take(256) is a and lists.hits == 1 and lists.cached_bytes == 0


def test_free_lists_drop_oldest_over_the_limit_and_refuse_big_items():
    lists = FreeLists(limit=1000, max_item=600)
    a, b, c = Buf(400), Buf(400), Buf(400)
    assert lists.give("k", a, 400) == []
    assert lists.give("k", b, 400) == []
    assert lists.give("k", c, 400) == [a]  # the oldest goes to make room
    assert lists.cached_bytes == 800 and lists.evicted == 1
    big = Buf(700)
    assert lists.give("k", big, 700) == [big]  # never kept
    assert set(map(id, lists.drain())) == {id(b), id(c)} and lists.cached_bytes == 0


def test_give_later_queues_until_settled_and_keeps_the_limit():
    lists = FreeLists(limit=1000)
    a, b, c = Buf(400), Buf(400), Buf(400)
    lists.give_later("k", a, 400)
    assert lists.cached_bytes == 0 and lists.take("k") is None  # queued, not kept yet
    lists.give_later("k", b, 400)
    assert lists.give("k", c, 400) == [a]  # give settles the queue first, oldest dropped
    assert lists.cached_bytes == 800
    lists.give_later("j", Buf(100), 100)
    assert len(lists.trim(0)) == 3 and lists.cached_bytes == 0
