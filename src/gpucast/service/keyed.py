"""Answers by key, each computed once: the service's one cache of predictions and of advice.

:class:`KeyedFutures` holds, for hashable keys (``(job key, GPU)`` for ``/v1/predict``, a digest
of the request for ``/v1/advise``):

* an LRU of **done values** (at most ``size``; the least recently used is dropped first);
* the **in-flight** computations, one asyncio future per key: a request for a key that is being
  computed awaits that future instead of starting another (``asyncio.shield``: a waiter that gives
  up, on a timeout or a closed connection, does not cancel the computation);
* a **thread pool** the computations run in (``workers`` threads), so the event loop keeps
  answering cached keys while they run; at most ``max_pending`` keys compute at once (``busy(n)``
  is raised beyond, a 429 in the service).

A computation that returns stores its value (errors the caller turns into values, e.g. a 422,
are cached like any value); one that raises stores nothing, so the next request computes again,
and every request waiting on it gets the exception. :func:`within` bounds a wait (a 408 in the
service): the computation itself cannot be interrupted (a thread cannot be killed), so it finishes
in the background and its value is cached.

``on_event(name, n)`` (optional) is told ``hit`` (n answers from the LRU), ``miss`` (a
computation started), ``join`` (a request awaits one already in flight), ``in_flight`` (+1 or -1)
and ``size`` (the LRU's length after a store): the service's metrics. Everything runs on one event
loop except the computations (not thread-safe otherwise, as asyncio is not).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


def _ignore(name: str, n: int) -> None:
    pass


class KeyedFutures(Generic[K, V]):
    """An LRU of done values, in-flight futures shared by identical keys, a thread pool (see the module docstring)."""

    def __init__(self, size: int, workers: int, *, name: str = "gpucast-keyed", max_pending: int | None = None,
                 busy: Callable[[int], BaseException] | None = None,
                 on_event: Callable[[str, int], None] | None = None):
        self.size = size
        self.max_pending = max_pending
        self.busy = busy or (lambda n: RuntimeError(f"{n} computations in flight, the most allowed"))
        self.on_event = on_event or _ignore
        self.values: OrderedDict[K, V] = OrderedDict()
        self.pending: dict[K, asyncio.Future] = {}
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)

    def close(self) -> None:
        """Stop the pool: computations not started are dropped, running ones finish unattended."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def cached(self, key: K) -> V | None:
        """The done value of ``key`` (now the most recently used), or None."""
        v = self.values.get(key)
        if v is not None:
            self.values.move_to_end(key)
        return v

    def _store(self, key: K, value: V) -> None:
        self.values[key] = value
        self.values.move_to_end(key)
        while len(self.values) > self.size:
            self.values.popitem(last=False)
        self.on_event("size", len(self.values))

    def future(self, key: K, fn: Callable[..., V], *args) -> asyncio.Future:
        """The in-flight future of ``key``: the one already computing (``join``), else ``fn(*args)``
        started in the pool (``miss``; ``busy`` raised when ``max_pending`` are computing)."""
        fut = self.pending.get(key)
        if fut is not None:
            self.on_event("join", 1)
            return fut
        if self.max_pending is not None and len(self.pending) >= self.max_pending:
            raise self.busy(len(self.pending))
        fut = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        self.pending[key] = fut
        self.on_event("miss", 1)
        self.on_event("in_flight", 1)

        def done(f: asyncio.Future) -> None:
            self.pending.pop(key, None)
            self.on_event("in_flight", -1)
            if not f.cancelled() and f.exception() is None:
                self._store(key, f.result())

        fut.add_done_callback(done)
        return fut

    async def get(self, key: K, fn: Callable[..., V], *args) -> V:
        """The value of ``key``: from the LRU (``hit``), else from its computation, shared with
        every request for the same key while it runs."""
        v = self.cached(key)
        if v is not None:
            self.on_event("hit", 1)
            return v
        return await asyncio.shield(self.future(key, fn, *args))


async def within(limit_s: float, aw: Awaitable[T], timeout: Callable[[], BaseException]) -> T:
    """``await aw``, raising ``timeout()`` if it takes more than ``limit_s`` seconds."""
    try:
        async with asyncio.timeout(limit_s):
            return await aw
    except TimeoutError:
        raise timeout() from None
