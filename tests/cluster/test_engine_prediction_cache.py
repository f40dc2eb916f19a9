"""The predictions the engine's truth reads (``truth.predict_cached``): kept in
:mod:`gpucast.disk_cache` (the cache ``gpucast predict`` keeps), reused across processes, keyed by
job, GPU and environment, ignored when unreadable, optional."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpucast import api, disk_cache
from gpucast.cluster import truth
from gpucast.cluster.traces import gavel_job_types
from gpucast.cluster.truth import Estimate, Profile, predict_cached
from gpucast.hardware import get_gpu
from tests.test_disk_cache import _synthetic_prediction


@pytest.fixture
def fake_predict(monkeypatch, tmp_path):
    """A counting stand-in for gpucast.api.predict (a made-up Prediction), a fresh in-process cache
    and disk cache."""
    calls = []

    def predict(job, gpu, env=None):
        calls.append((job.key, gpu))
        return _synthetic_prediction(
            job=job.to_dict(), job_key=job.key, gpu=get_gpu(gpu).name, gpu_util_pct=61.5,
            gpu_util_interval=(50.0, 70.25), memory_peak_bytes=3_000_000_001, memory_interval=(2_500_000_000, 3.5e9),
            step_time_s=0.1234567890123, step_time_interval=(0.1, 1 / 7), gpu_busy_s=0.075, gpu_idle_gaps=3,
            gpu_held_pct=40.25, gpu_syncs=2, bytes=10**9)

    monkeypatch.setattr(api, "predict", predict)
    monkeypatch.setattr(truth, "_PRED_CACHE", {})
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GPUCAST_NO_CACHE", raising=False)
    return calls


PROF = Profile.from_gavel(gavel_job_types()[0])


def _forget():
    truth._PRED_CACHE.clear()   # as a new process would start


def _entries(tmp_path):
    return list((tmp_path / disk_cache.SUBDIR).glob("*.json"))


def test_a_second_run_reads_the_prediction_from_disk(fake_predict, tmp_path):
    first = predict_cached(PROF, "v100-16gb")
    assert len(fake_predict) == 1 and len(_entries(tmp_path)) == 1
    _forget()
    again = predict_cached(PROF, "v100-16gb")
    assert len(fake_predict) == 1
    assert again == first and repr(again) == repr(first)       # the same floats, bit for bit
    assert replace(again, mem_bound=0.5) == Estimate(61.5, (50.0, 70.25), 3_000_000_001.0, (2.5e9, 3.5e9),
                                                     0.1234567890123, (0.1, 1 / 7), 0.075, 3.0, 0.5, 40.25, 2.0)
    assert 0 < again.mem_bound <= 1
    predict_cached(PROF, "k80")                                  # another GPU: another entry
    assert len(fake_predict) == 2 and len(_entries(tmp_path)) == 2


def test_the_entry_is_the_one_gpucast_predict_keeps(fake_predict, tmp_path):
    est = predict_cached(PROF, "v100-16gb")
    job, spec = PROF.job(), get_gpu("v100-16gb")
    stored = disk_cache.load(disk_cache.key(job, spec))  # the CLI's key for this job, GPU and no --env
    assert stored is not None and stored.job_key == job.key and stored.step_time_s == est.step_time_s
    assert [e.stem for e in _entries(tmp_path)] == [disk_cache.key(job, spec)]
    assert truth.prediction_cache_dir() == disk_cache.directory() == tmp_path / disk_cache.SUBDIR


def test_another_environment_is_another_entry(fake_predict, tmp_path):
    from gpucast.estimate.environment import Environment

    predict_cached(PROF, "v100-16gb")
    try:
        truth.set_environment(Environment.default().replace(label="other", memory_sample_s=1e-5))
        predict_cached(PROF, "v100-16gb")
    finally:
        truth.set_environment(None)
    assert len(fake_predict) == 2 and len(_entries(tmp_path)) == 2


@pytest.mark.parametrize("junk", ["", "{not json", '{"format": 1, "key": "someone else", "prediction": {}}',
                                  '{"key": null}'])
def test_an_unreadable_entry_is_recomputed_and_replaced(fake_predict, tmp_path, junk):
    first = predict_cached(PROF, "v100-16gb")
    (path,) = _entries(tmp_path)
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
