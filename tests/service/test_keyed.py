"""The service's keyed cache (gpucast.service.keyed.KeyedFutures) on its own: identical keys in
flight share one computation, the LRU drops the least recently used, an exception is not cached,
``max_pending`` and the bounded wait. Computations are held open by threading events the tests
release, never by sleeps: nothing depends on this machine's speed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gpucast.service.keyed import KeyedFutures, within


class Gate:
    """A computation that says when it started and runs until the test opens the gate."""

    def __init__(self, value=None, error: BaseException | None = None):
        self.value, self.error = value, error
        self.started, self.open, self.calls = threading.Event(), threading.Event(), []

    def __call__(self, *args):
        self.calls.append(args)
        self.started.set()
        assert self.open.wait(timeout=60), "the test never opened the gate"
        if self.error is not None:
            raise self.error
        return self.value if self.value is not None else args


async def _until(event: threading.Event) -> None:
    assert await asyncio.get_running_loop().run_in_executor(None, event.wait, 60)


def _cache(size=4, **kw):
    events = []
    return KeyedFutures(size, 2, on_event=lambda name, n: events.append((name, n)), **kw), events


def test_identical_keys_in_flight_share_one_computation():
    async def main():
        cache, events = _cache()
        gate = Gate()
        try:
            first = asyncio.ensure_future(cache.get("k", gate, 1))
            second = asyncio.ensure_future(cache.get("k", gate, 2))
            await _until(gate.started)
            assert list(cache.pending) == ["k"] and not first.done() and not second.done()
            gate.open.set()
            assert await first == await second == (1,)  # the second request got the first's answer
            assert gate.calls == [(1,)]
            assert await cache.get("k", gate, 3) == (1,) and gate.calls == [(1,)]  # now from the LRU
            assert not cache.pending
            assert events == [("miss", 1), ("in_flight", 1), ("join", 1), ("in_flight", -1), ("size", 1), ("hit", 1)]
        finally:
            cache.close()

    asyncio.run(main())


def test_the_least_recently_used_value_is_dropped():
    async def main():
        cache, events = _cache(size=2)
        try:
            for k in ("a", "b"):
                assert await cache.get(k, str.upper, k) == k.upper()
            assert cache.cached("a") == "A"  # a is now more recent than b
            assert await cache.get("c", str.upper, "c") == "C"
            assert list(cache.values) == ["a", "c"] and cache.cached("b") is None
            assert [n for name, n in events if name == "size"] == [1, 2, 2]
        finally:
            cache.close()

    asyncio.run(main())


def test_an_exception_is_not_cached():
    async def main():
        cache, events = _cache()
        gate = Gate(error=RuntimeError("the computation failed"))
        try:
            a = asyncio.ensure_future(cache.get("k", gate))
            b = asyncio.ensure_future(cache.get("k", gate))
            await _until(gate.started)
            gate.open.set()
            for waiter in (a, b):
                with pytest.raises(RuntimeError, match="the computation failed"):
                    await waiter
            assert len(gate.calls) == 1 and not cache.values and not cache.pending
            assert await cache.get("k", lambda: "fine") == "fine"  # the next request computes again
            assert [name for name, _ in events].count("miss") == 2
        finally:
            cache.close()

    asyncio.run(main())


def test_max_pending_refuses_a_new_key_but_joins_a_computing_one():
    async def main():
        cache, _ = _cache(max_pending=1, busy=lambda n: ValueError(f"{n} computing"))
        gate = Gate(value="v")
        try:
            first = asyncio.ensure_future(cache.get("k", gate))
            await _until(gate.started)
            with pytest.raises(ValueError, match="1 computing"):
                await cache.get("other", gate)
            joined = asyncio.ensure_future(cache.get("k", gate))
            gate.open.set()
            assert await first == await joined == "v" and len(gate.calls) == 1
            assert await cache.get("other", lambda: "w") == "w"  # room again
        finally:
            cache.close()

    asyncio.run(main())


def test_a_bounded_wait_gives_up_but_the_value_is_still_cached():
    async def main():
        cache, _ = _cache()
        gate = Gate(value="late")
        try:
            with pytest.raises(LookupError, match="gave up"):  # a limit of 0: given up at the first wait
                await within(0, cache.get("k", gate), lambda: LookupError("gave up"))
            assert "k" in cache.pending  # the computation was not cancelled
            await _until(gate.started)
            gate.open.set()
            assert await cache.pending["k"] == "late"
            assert cache.cached("k") == "late" and len(gate.calls) == 1
            assert await within(0, cache.get("k", gate), lambda: LookupError("gave up")) == "late"  # a hit: no wait
        finally:
            cache.close()

    asyncio.run(main())
