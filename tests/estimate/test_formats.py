"""Blackwell's block-scaled training recipes, precisions ``mxfp8`` and ``nvfp4`` (gpucast.formats).

Independent reasons: a GEMM's math is the same in every format, so its time at compute bound goes
as the tensor-core rate the datasheet gives the format (B200: FP8 4.5 PF, FP4 9 PF dense: half the
time); MXFP8's block-scaled MMA runs at the FP8 rate (the same time as fp8); the formats need
Blackwell's tensor cores (TE refuses them elsewhere: one error line); an NVFP4 element is half a
byte and a sixteenth of a scale byte (the OCP/NVIDIA format definitions), so the FP8 weight cache
of a plan shrinks by that ratio.
"""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.job import JobError

CONFIG = dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=2,
              num_attention_heads=16, num_key_value_heads=16, vocab_size=1000)


def _job(precision, **kw):
    return Job.from_hf_config(CONFIG, batch_size=4, seq_len=2048, precision=precision, optimizer="adamw", **kw)


def _gemm_s(precision, gpu="b200") -> float:
    ex = gpucast.explain(_job(precision), gpu)
    return sum(float(t) for o, t in zip(ex.trace.ops, ex.estimate.kernel_times.time) if o.op == "_scaled_mm")


def test_nvfp4_gemms_run_at_the_fp4_rate_and_mxfp8_at_the_fp8_rate():
    fp8, mx, nv = (_gemm_s(p) for p in ("fp8", "mxfp8", "nvfp4"))
    assert mx == pytest.approx(fp8, rel=1e-9)
    assert nv / fp8 == pytest.approx(4500 / 9000, rel=0.15)   # B200's dense FP8 and FP4 peaks


@pytest.mark.parametrize("precision,gpu,message", [
    ("mxfp8", "h100", "mxfp8 needs block-scaled FP8 tensor cores"),
    ("nvfp4", "h100", "nvfp4 needs FP4 tensor cores"),
    ("nvfp4", "a100-80gb", "nvfp4 needs FP4 tensor cores"),
])
def test_a_format_the_gpu_lacks_is_one_error_line(precision, gpu, message):
    with pytest.raises(JobError, match=f"field 'precision': {message}") as err:
        gpucast.predict(_job(precision), gpu)
    assert "\n" not in str(err.value)


def test_a_deployment_serves_block_scaled_checkpoints_on_blackwell_only():
    mx = Job.from_hf_config(CONFIG, batch_size=1, precision="mxfp8", mode="serve", serve={"input_len": 64,
                                                                                          "output_len": 8})
    with pytest.raises(JobError, match="mxfp8 needs block-scaled FP8 tensor cores") as err:
        gpucast.predict(mx, "h100")
    assert "\n" not in str(err.value)
    served = Job.from_hf_config(CONFIG, batch_size=1, precision="nvfp4", mode="serve",
                                serve={"input_len": 64, "output_len": 8})
    with pytest.raises(JobError, match="nvfp4 needs FP4 tensor cores") as err:   # Hopper has none
        gpucast.predict(served, "h100")
    assert "\n" not in str(err.value)


def test_the_plan_s_weight_cache_is_in_the_recipe_s_bytes():
    plan = dict(tensor=2, grad_accum=2)
    cache = {p: gpucast.explain(_job(p, gpus=2, parallel=plan), "b200").estimate.memory.breakdown["fp8_weight_cache"]
             for p in ("fp8", "nvfp4", "mxfp8")}
    assert cache["nvfp4"] / cache["fp8"] == pytest.approx(0.5 + 1 / 16, rel=1e-6)
    assert cache["mxfp8"] / cache["fp8"] == pytest.approx(1 + 1 / 32, rel=1e-6)
