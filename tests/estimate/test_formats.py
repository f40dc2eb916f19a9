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


# ------------------------------------------------------------------ the recipe's layers kept in bf16
LAYERS4 = dict(CONFIG, num_hidden_layers=4)


def _ops(job, gpu="b200"):
    ex = gpucast.explain(job, gpu)
    count = lambda *names: sum(1 for o in ex.trace.ops if o.op in names)   # noqa: E731
    return ex, count


@pytest.mark.parametrize("precision", ["fp8", "nvfp4"])
def test_the_first_and_last_blocks_kept_in_bf16_run_bf16_gemms(precision):
    # Independent reason: a Llama block has seven linear layers (q, k, v, o, gate, up, down), each three
    # GEMMs in a training step (forward, data gradient, weight gradient); keeping 1 + 1 of 4 blocks in
    # bf16 (Megatron-Core's --first-last-layers-bf16) leaves half of them in FP8 and halves the FP8 copies.
    def job(bf16_layers=None):
        return Job.from_hf_config(LAYERS4, batch_size=2, seq_len=1024, precision=precision, optimizer="adamw",
                                  gpus=2, parallel=dict(tensor=2, grad_accum=2),
                                  **({"stack": {"bf16_layers": bf16_layers}} if bf16_layers else {}))
    (all_fp8, c_all), (kept, c_kept) = _ops(job()), _ops(job("1,1"))
    assert c_all("_scaled_mm") == 4 * 7 * 3 and c_kept("_scaled_mm") == 2 * 7 * 3
    assert c_kept("mm", "addmm") - c_all("mm", "addmm") == 2 * 7 * 3
    cache = [e.estimate.memory.breakdown["fp8_weight_cache"] for e in (all_fp8, kept)]
    assert cache[1] == pytest.approx(cache[0] / 2, rel=1e-6)
    assert any("2 blocks kept in bf16" in n for n in kept.trace.notes)
    assert job([1, 1]).stack.bf16_layers == (1, 1)


def test_a_moe_block_kept_in_bf16_runs_its_experts_in_bf16():
    moe = dict(model_type="qwen3_moe", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
               num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=8,
               num_experts_per_tok=2, vocab_size=4096)

    def grouped(bf16_layers=None):
        job = Job.from_hf_config(moe, batch_size=1, seq_len=1024, precision="fp8", optimizer="adamw", gpus=2,
                                 parallel=dict(tensor=2, framework="megatron"),
                                 **({"stack": {"bf16_layers": bf16_layers}} if bf16_layers else {}))
        return _ops(job, "h100")[1]("_scaled_grouped_mm")
    assert grouped() > 0 and grouped("1,0") == grouped() * 3 // 4


@pytest.mark.parametrize("precision,stack,words", [
    ("bf16", {"bf16_layers": "1,1"}, "field 'stack.bf16_layers' keeps layers of an FP8 or FP4 recipe in bf16"),
    ("fp8", {"bf16_layers": "one"}, "field 'stack.bf16_layers' must be two layer counts"),
    ("fp8", {"bf16_layers": [1, 2, 3]}, "field 'stack.bf16_layers' must be two layer counts"),
])
def test_bad_bf16_layers_are_one_error_line(precision, stack, words):
    with pytest.raises(JobError, match=words) as err:
        gpucast.predict(Job.from_hf_config(CONFIG, batch_size=2, seq_len=256, precision=precision, stack=stack), "b200")
    assert "\n" not in str(err.value)
