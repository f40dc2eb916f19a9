"""Fixtures for the whole suite."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _prediction_caches_in_a_tmp_dir(tmp_path_factory):
    """gpucast's disk caches of predictions (the CLI's, :mod:`gpucast.disk_cache`, and the
    simulator's, :mod:`gpucast.cluster.truth`) start empty in a temporary directory of this run: no
    test, nor any process a test starts, reads a warm cache from the user's home or writes to it. Session-scoped,
    so it is in place before any module fixture starts a CLI run."""
    old = os.environ.get("GPUCAST_CACHE_DIR")
    # One directory for the whole run: pytest-xdist's workers (their base temps share a parent) and
    # the processes they start fill and read one cache, as concurrent `gpucast` processes do
    # (entries are written atomically, gpucast.disk_cache).
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "gpucast-cache"
    shared.mkdir(exist_ok=True)
    os.environ["GPUCAST_CACHE_DIR"] = str(shared)
    yield
    if old is None:
        os.environ.pop("GPUCAST_CACHE_DIR", None)
    else:
        os.environ["GPUCAST_CACHE_DIR"] = old
