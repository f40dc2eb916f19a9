"""Shared helpers for the graph-capture tests.

``captured(job)`` memoises ``gpucast.graph.capture`` for zoo jobs (a zoo ``Job`` is a frozen,
hashable spec, so equal jobs give the same trace); several test files look at the same traces.
Module jobs (``Job.from_module``) compare by name only, so they are never cached.
"""

from __future__ import annotations

import functools

import pytest

from gpucast.graph import capture


@functools.lru_cache(maxsize=64)
def _capture_zoo(job):
    return capture(job)


def captured(job):
    if job.is_module:
        return capture(job)
    return _capture_zoo(job)


@pytest.fixture(scope="session")
def cap():
    """The memoised ``capture``."""
    return captured
