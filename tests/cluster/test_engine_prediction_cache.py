"""The disk cache of predictions the engine's truth reads (``truth.predict_cached``): reused
across processes, keyed by job, GPU and model version, ignored when unreadable, optional."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import gpucast
from gpucast.cluster import truth
from gpucast.cluster.traces import gavel_job_types
from gpucast.cluster.truth import Estimate, Profile, predict_cached


@pytest.fixture
def fake_predict(monkeypatch, tmp_path):
    """A counting stand-in for gpucast.predict, a fresh in-process cache and disk cache."""
    calls = []

    def predict(job, gpu, env=None):
        calls.append((job.key, gpu))
        return SimpleNamespace(gpu_util_pct=61.5, gpu_util_interval=(50.0, 70.25), memory_peak_bytes=3_000_000_001,
                               memory_interval=(2.5e9, 3.5e9), step_time_s=0.1234567890123,
                               step_time_interval=(0.1, 1 / 7), gpu_busy_s=0.075, gpu_idle_gaps=3,
                               gpu_held_pct=40.25, gpu_syncs=2,
                               bytes=10**9, gpu=gpu)

    monkeypatch.setattr(gpucast, "predict", predict)
    monkeypatch.setattr(truth, "_PRED_CACHE", {})
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(tmp_path))
    return calls


PROF = Profile.from_gavel(gavel_job_types()[0])


def _forget():
    truth._PRED_CACHE.clear()   # as a new process would start


def test_a_second_run_reads_the_prediction_from_disk(fake_predict, tmp_path):
    first = predict_cached(PROF, "v100-16gb")
    files = list((tmp_path / "predictions").glob("*.json"))
    assert len(fake_predict) == 1 and len(files) == 1
    _forget()
    again = predict_cached(PROF, "v100-16gb")
    assert len(fake_predict) == 1
    assert again == first and repr(again) == repr(first)       # the same floats, bit for bit
    from dataclasses import replace

    assert replace(again, mem_bound=0.5) == Estimate(61.5, (50.0, 70.25), 3_000_000_001.0, (2.5e9, 3.5e9),
                                                     0.1234567890123, (0.1, 1 / 7), 0.075, 3.0, 0.5, 40.25, 2.0)
    assert 0 < again.mem_bound <= 1
    predict_cached(PROF, "k80")                                  # another GPU: another entry
    assert len(fake_predict) == 2 and len(list((tmp_path / "predictions").glob("*.json"))) == 2


def test_the_key_holds_the_job_the_gpu_and_the_model_version(fake_predict, tmp_path):
    path, key = truth._disk_entry(PROF.job(), "v100-16gb")
    from gpucast.api import MODEL_VERSION

    assert key.startswith(f"{PROF.job().key}|v100-16gb|{MODEL_VERSION}|") and path.parent == tmp_path / "predictions"


@pytest.mark.parametrize("junk", ["", "{not json", '{"key": "someone else", "estimate": {}}', '{"key": null}'])
def test_an_unreadable_entry_is_recomputed_and_replaced(fake_predict, tmp_path, junk):
    first = predict_cached(PROF, "v100-16gb")
    (path,) = (tmp_path / "predictions").glob("*.json")
    path.write_text(junk)
    _forget()
    assert predict_cached(PROF, "v100-16gb") == first and len(fake_predict) == 2
    _forget()
    assert predict_cached(PROF, "v100-16gb") == first and len(fake_predict) == 2   # rewritten


def test_off_and_unwritable_caches_change_nothing_but_speed(fake_predict, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCAST_CACHE_DIR", "off")
    assert truth.prediction_cache_dir() is None
    a = predict_cached(PROF, "v100-16gb")
    _forget()
    assert predict_cached(PROF, "v100-16gb") == a and len(fake_predict) == 2
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(blocker))
    _forget()
    assert predict_cached(PROF, "v100-16gb") == a and len(fake_predict) == 3
    assert not list(tmp_path.glob(".*.tmp"))
