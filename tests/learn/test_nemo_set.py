"""NVIDIA's NeMo 24.07 H100 training rows (data/measured/nemo-24.07-h100) as gpucast reads them for
benchmarks/nemo_h100.py and the accuracy gate's nemo-h100 set: every row read with its parallel
degrees, each model's shape known, the rows gpucast cannot express yet named with their reason."""

from __future__ import annotations

import importlib.util

import pytest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("nemo_h100", REPO / "benchmarks" / "nemo_h100.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_row_is_read_and_every_model_has_a_shape():
    nm = _bench()
    rows = nm.read()
    assert len(rows) == 18 and sum(r["task"] == "pretrain" for r in rows) == 12
    assert {r["model"] for r in rows} <= set(nm.MODELS)
    for r in rows:    # the table's own arithmetic: GBS = MBS x data parallel x gradient accumulation
        dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
        assert r["gbs"] % (r["mbs"] * dp) == 0, r


def test_every_row_is_answered_context_parallel_ones_included():
    nm = _bench()
    rows = nm.read()
    assert all(nm.unanswered(r) is None for r in rows)
    llama3 = next(r for r in rows if r["model"] == "LLAMA3-70B")
    assert nm.job_of(llama3).parallel.context == 2
    interleaved = next(r for r in rows if r["model"] == "GPT3-175B")
    assert nm.job_of(interleaved).parallel.virtual_pipeline == 6


def test_a_row_becomes_the_megatron_job_a_user_would_write():
    nm = _bench()
    row = next(r for r in nm.read() if r["model"] == "LLAMA2-7B" and r["task"] == "pretrain")
    job = nm.job_of(row)
    assert job.precision == "fp8" and job.gpus == 8 and job.batch_size == 1 and job.seq_len == 4096
    assert job.parallel.grad_accum == 128 // (1 * 8) and job.parallel.tensor == 1
    lora = next(r for r in nm.read() if r["task"] == "LoRA")
    assert nm.job_of(lora).adapter is not None


def test_the_held_out_fit_recovers_a_factor_the_other_models_share():
    # Rows whose predictions scale as 1 / k (compute-bound: time proportional to kernel time), all
    # measured at k = 0.8: each model's factor fitted on the others is 0.8, and its rows come out exact.
    nm = _bench()
    recs, grid = [], []
    for model, meas in (("A", 100.0), ("A", 50.0), ("B", 80.0), ("C", 10.0)):
        recs.append({"model": model, "tokens_per_s_per_gpu": meas, "predicted": meas * 0.8, "fits": True})
        grid.append([meas * 0.8 / k for k in nm.FACTORS])
    out = nm.held_out(recs, grid)
    for r in out:
        assert r["factor"] == pytest.approx(0.8, abs=0.005)
        assert r["held_out"] == pytest.approx(r["tokens_per_s_per_gpu"], rel=0.01)
    s = nm.summary(out)
    assert s["held_out_mdape"] < 1 and s["mdape"] == pytest.approx(20)
