"""llm-foundry's MPT table as jobs (gpucast.learn.llm_foundry): the reader, the job mapping and the
fit's pieces, on the measured table (data/measured/llm-foundry-a100-40gb in the repository)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gpucast.learn import llm_foundry as lf

from tests.measured_data import MEASURED

SET = MEASURED / lf.SET_NAME


@pytest.fixture(scope="module")
def rows():
    return lf.read(SET)


def test_reads_78_rows_with_consistent_batches(rows):
    assert len(rows) == 78
    assert {r.model for r in rows} == set(lf.SIZES)
    assert all(r.tokens_per_s_per_gpu > 0 and 0 < r.mfu < 1 and r.hfu >= r.mfu for r in rows)
    assert not [r.label for r in rows if r.batch_mismatch]  # GradAccum is used as given
    assert sum(r.checkpointing for r in rows) == 27


def test_job_mapping_reproduces_num_params(rows):
    """The job's HF config, built on the meta device by transformers itself, has the table's
    NumParams (an independent column) for every distinct (model, sequence) of the table."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    seen = {}
    for r in rows:
        if r.model in ("30b", "70b") and r.seq_len != 2048:
            continue
        seen.setdefault((r.model, r.seq_len), r)
    assert len(seen) >= 40
    for r in seen.values():
        job = r.job()
        cfg = json.loads(job.hf_config)
        model_type = cfg.pop("model_type")
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg))
        assert sum(p.numel() for p in model.parameters()) == r.num_params, r.label
        assert lf.gpt2_params(r.shape, r.seq_len) == r.num_params


def test_job_is_an_fsdp_plan(rows):
    r = next(r for r in rows if r.model == "13b" and r.gpus == 8 and r.seq_len == 2048)
    job = r.job()
    assert job.gpus == 8 and job.batch_size == 4 and job.precision == "bf16"
    assert job.stack.loss == "fused"  # ComposerMPTCausalLM's default loss_fn: fused_crossentropy
    par = job.parallel
    assert (par.sharding, par.recompute, par.grad_accum, par.gpus_per_node, par.network) == \
        ("fsdp-full", "full", 16, 8, "roce-1600")


def test_objective_and_priors():
    meas = np.array([100.0, 200.0])
    prior = {k: v[0] for k, v in lf.PRIORS.items()}
    assert lf.objective(meas, meas, prior) == 0.0
    off = lf.objective(meas * math.e ** 0.1, meas, prior)
    assert off == pytest.approx(2 * (0.1 / lf.ROW_SIGMA) ** 2)
    # Huber: linear beyond HUBER_K sigmas, so one far row weighs less than under squares
    far = np.array([100.0 * math.e, 200.0])
    assert lf.objective(far, meas, prior, "huber") < lf.objective(far, meas, prior)
    # an errored row (NaN) counts as a residual of log(e)
    assert lf.objective(np.array([math.nan, 200.0]), meas, prior) == pytest.approx((1 / lf.ROW_SIGMA) ** 2)
    assert lf.prior_penalty({"gather_overlap": 0.8 + 0.15}) == pytest.approx(1.0)
    assert lf.prior_penalty({"kernel_time_factor": math.exp(0.15)}) == pytest.approx(1.0)


def test_start_grid_covers_each_constant():
    pts = lf.start_grid(["gather_overlap", "net_efficiency"])
    assert len(pts) == len(lf.GRID["gather_overlap"]) * len(lf.GRID["net_efficiency"])
    assert all(set(p) == {"gather_overlap", "net_efficiency"} for p in pts)


class _FakeEvaluator:
    """A synthetic stand-in for :class:`lf.Evaluator` (no capture): throughput falls with the
    exposed share ``(1 - gather_overlap)`` of a fixed communication time."""

    def __init__(self, true_overlap: float) -> None:
        self.rows = [lf.Row("x", 2048, 8, 1, 1, 8, False, 0.0, 0.5, 0.5, 1, lf.Shape(1, 1, 1, 4, 1))] * 4
        self.comm = np.array([2.0, 4.0, 8.0, 16.0])
        self.meas = self._tok(true_overlap)
        self.rows = [lf.Row("x", 2048, 8, 1, 1, 8, False, float(m), 0.5, 0.5, 1, lf.Shape(1, 1, 1, 4, 1))
                     for m in self.meas]

    def _tok(self, go: float) -> np.ndarray:
        return 1000.0 / (10.0 + (1.0 - go) * self.comm)

    def tokens(self, values: dict) -> np.ndarray:
        return self._tok(values.get("gather_overlap", 0.8))


def test_fit_recovers_a_synthetic_overlap():
    ev = _FakeEvaluator(true_overlap=0.5)
    f = lf.fit(ev, np.ones(4, bool), ["gather_overlap"])
    assert 0.48 <= f.values["gather_overlap"] <= 0.55  # the prior (0.8 +- 0.15) pulls a little
