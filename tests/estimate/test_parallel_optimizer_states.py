"""The training state's dtypes (``parallel.optimizer_moments``, ``parallel.master_weights``, ``parallel.grad_dtype``).

Independent reasons: Adam keeps two moments a parameter, 4 bytes each in fp32, 2 in bf16 or fp16, 1 in
FP8; ZeRO's mixed-precision layout keeps a 4-byte fp32 master copy (the ZeRO paper's 12 bytes of
optimizer state a parameter), 2 bytes in fp16, and 2 bytes as the remainders that complete a bf16 weight
to fp32 (its high 16 bits are the bf16 weight: Megatron-Core's ``store_param_remainders``). So the
optimizer state of a rank is ``(master + moments) / (4 + 8)`` of the fp32 one, sharded the same way,
and nothing else on the rank moves. A pure-bf16 model under plain DDP keeps torch's moments in the
parameters' dtype (2 + 2 bytes), so asking for fp32 moments doubles them. Gradients kept in fp32 beside
bf16 weights (Megatron's ``grad_reduce_in_fp32``) take 4 bytes a parameter instead of 2 and their
reduce-scatter moves twice the bytes (Megatron-LM's table: bf16 params with fp32 grads are 6 + 12/d bytes
under its distributed optimizer, against 4 + 12/d with bf16 grads).
"""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.estimate.parallel.sharding import GRAD_BYTES, HALF, MASTER_WEIGHT_BYTES, MOMENT_BYTES
from gpucast.job import JobError
from gpucast.plan import GRAD_DTYPES, HALF_WEIGHTS, MASTER_WEIGHTS, OPTIMIZER_MOMENTS

CONFIG = dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=8, vocab_size=1000)


def _plan(precision="amp-bf16", mode="train", **par):
    plan = dict(sharding="zero1", grad_accum=2) | par
    job = Job.from_hf_config(CONFIG, batch_size=2, seq_len=256, precision=precision, optimizer="adamw", gpus=4,
                             mode=mode, parallel=plan)
    return gpucast.explain(job, "h100").estimate


@pytest.mark.parametrize("moments,master,bytes_per_param", [
    ("bf16", "remainders", 2 + 2 * 2),     # Megatron-Bridge's DeepSeek-V3 recipe
    ("fp8", "fp16", 2 + 2 * 1),
    ("fp32", "remainders", 2 + 2 * 4),     # Apex's DistributedFusedAdam under NeMo 1.x, bf16 models
    ("bf16", "fp32", 4 + 2 * 2),
])
def test_the_optimizer_state_shrinks_with_its_dtypes(moments, master, bytes_per_param):
    base = _plan()
    small = _plan(optimizer_moments=moments, master_weights=master)
    b, s = base.memory.breakdown, small.memory.breakdown
    assert s["optimizer_state"] == pytest.approx(b["optimizer_state"] * bytes_per_param / 12, rel=1e-6)
    for term in ("weights", "gradients", "activations"):
        assert s[term] == b[term]
    assert small.plan["optimizer_moments"] == moments and small.plan["master_weights"] == master
    assert base.plan["optimizer_moments"] == "fp32" and base.plan["master_weights"] == "fp32"


def test_a_pure_bf16_model_under_ddp_keeps_torch_s_moments_in_bf16_unless_told():
    ddp = dict(sharding="ddp")
    default, fp32 = _plan("bf16", **ddp), _plan("bf16", optimizer_moments="fp32", **ddp)
    assert fp32.memory.breakdown["optimizer_state"] == pytest.approx(2 * default.memory.breakdown["optimizer_state"])


def test_fp32_gradients_double_the_rank_s_gradients_and_their_reduction():
    kw = dict(framework="megatron", dp_overlap=False)   # the reduce-scatter exposed
    half, fp32 = _plan(**kw), _plan(grad_dtype="fp32", **kw)
    b, s = half.memory.breakdown, fp32.memory.breakdown
    assert s["gradients"] == pytest.approx(2 * b["gradients"])
    assert s["optimizer_state"] == b["optimizer_state"] and s["weights"] == b["weights"]
    dp_half, dp_fp32 = (e.plan["step_breakdown_s"]["data_parallel_comm_s"] for e in (half, fp32))
    assert dp_fp32 > dp_half > 0
    assert half.plan["grad_dtype"] == "half" and fp32.plan["grad_dtype"] == "fp32"
    assert _plan("amp-bf16", sharding="ddp").plan["grad_dtype"] == "fp32"   # PyTorch DDP under autocast


def test_the_bytes_cover_every_choice_the_spec_accepts():
    assert set(MOMENT_BYTES) == set(OPTIMIZER_MOMENTS) and set(MASTER_WEIGHT_BYTES) == set(MASTER_WEIGHTS)
    assert set(GRAD_BYTES) == set(GRAD_DTYPES)
    assert set(HALF_WEIGHTS) == set(HALF)   # the spec's check and the byte layout agree on what keeps a master


@pytest.mark.parametrize("precision,mode,par,words", [
    ("amp-bf16", "train", dict(optimizer_moments="int8"), "one of fp32, bf16, fp16, fp8"),
    ("amp-bf16", "train", dict(master_weights="bf16"), "one of fp32, fp16, remainders"),
    ("amp-bf16", "infer", dict(sharding="ddp", grad_accum=1, optimizer_moments="bf16"), "applies to mode 'train'"),
    ("amp-bf16", "train", dict(sharding="ddp", master_weights="remainders"), "zero1, zero2 or zero3"),
    ("amp-bf16", "train", dict(sharding="fsdp-full", master_weights="fp16"), "zero1, zero2 or zero3"),
    ("fp32", "train", dict(master_weights="fp16"), "half or Transformer Engine precision"),
    ("amp-fp16", "train", dict(master_weights="remainders"), "keeps no bf16 weights"),
    ("amp-bf16", "train", dict(sharding="fsdp-full", grad_dtype="fp32"), "zero1, zero2 or zero3"),
    ("amp-bf16", "train", dict(grad_dtype="bf16"), "one of fp32, half"),
])
def test_each_bad_setting_is_one_error_line(precision, mode, par, words):
    with pytest.raises(JobError, match="parallel.(optimizer_moments|master_weights|grad_dtype)") as err:
        _plan(precision, mode, **par)
    assert words in str(err.value) and "\n" not in str(err.value)
