"""Transformer Engine's layers as Megatron-Core builds them (``stack.kernels: transformer-engine``,
gpucast.graph.te), checked on a real transformers Llama traced on the meta device.

Independent reasons for each expectation: fusing kernels changes no GEMM's math (the matmul FLOPs
equal the eager trace's, counted by torch's flop_counter formulas); each fused layer is one kernel
each way (one norm op per norm, no ``silu`` and no ``rotate_half`` concatenation left); under FP8
the weights are bf16 (two bytes a parameter, counted on a model built apart from gpucast); a tensor
feeding the query, key and value projections (or the gate and up projections) is cast to FP8 once,
as TE's fused QKV/FC1 GEMMs need it once; the FP8 weight copies saved for the backward (one byte a
parameter of the FP8 layers: every linear but the head) are filed apart from the activations.
"""

from __future__ import annotations

import pytest
import torch

import gpucast
from gpucast import Job
from gpucast.api import capture_job, trace
from gpucast.surroundings import Stack

LAYERS = 2
CONFIG = dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=LAYERS,
              num_attention_heads=8, num_key_value_heads=8, vocab_size=1000)
LINEARS_PER_LAYER = 7   # q, k, v, o, gate, up, down


def _job(precision="bf16", kernels="transformer-engine", **kw):
    return Job.from_hf_config(CONFIG, batch_size=2, seq_len=384, precision=precision, optimizer="adamw",
                              stack=Stack(kernels=kernels) if kernels else None, **kw)


def _linear_params() -> tuple[int, int]:
    """(parameters of the layers' linear weights, all parameters), from a model built apart from gpucast."""
    import transformers

    conf = transformers.AutoConfig.for_model(**CONFIG)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    linear = sum(m.weight.numel() for n, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head"))
    return linear, sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def bf16():
    return trace(_job(kernels="eager")), trace(_job())


@pytest.fixture(scope="module")
def fp8():
    return trace(_job("fp8", kernels="eager")), trace(_job("fp8"))


def test_fusion_changes_no_gemm_math_and_runs_fewer_kernels(bf16):
    eager, te = bf16
    gemm = lambda t: sum(o.flops for o in t.ops if o.category in ("matmul", "attention"))  # noqa: E731
    kernels = lambda t: sum(o.kernels for o in t.ops if o.phase != "optim")  # noqa: E731
    assert gemm(te) == gemm(eager)
    assert kernels(te) < 0.8 * kernels(eager)
    assert any("Transformer Engine's fused layers" in n for n in te.notes)


def test_each_fused_layer_is_one_op_each_way(bf16):
    _, te = bf16
    fwd = [o for o in te.ops if o.phase == "fwd"]
    norms = 2 * LAYERS + 1   # two a layer and the final one
    assert sum(o.op == "native_layer_norm" for o in fwd) == norms
    assert sum(o.op == "native_layer_norm_backward" for o in te.ops if o.phase == "bwd") == norms
    assert not any(o.op in ("pow", "rsqrt", "silu") for o in fwd)
    assert not any(o.op == "cat" and o.block >= 0 for o in fwd)   # rotate_half's concatenation


def test_fp8_runs_over_bf16_weights_and_casts_a_shared_input_once(fp8):
    eager, te = fp8
    linear, total = _linear_params()
    assert te.parameter_bytes == 2 * total and eager.parameter_bytes == 4 * total
    act_casts = lambda t: [o for o in t.ops if o.phase == "fwd" and o.op == "_to_copy" and o.block == 1  # noqa: E731
                           and o.dtype.startswith("float8") and o.shapes[0][0] == 2 * 384]
    # eager: every linear casts its input; TE: q/k/v share one, gate/up share one, o and down their own
    assert len(act_casts(eager)) == LINEARS_PER_LAYER
    assert len(act_casts(te)) == 4


def test_fp8_weight_copies_are_filed_apart_from_the_activations(fp8):
    eager, te = fp8
    linear, _ = _linear_params()
    assert te.memory.at_backward_start["weight_copies"] == pytest.approx(linear, rel=0.01)   # 1 byte each
    assert "weight_copies" not in eager.memory.at_backward_start


def test_a_megatron_plan_captures_te_layers_unless_told_eager():
    plan = dict(tensor=2, grad_accum=2)
    job = Job.from_hf_config(CONFIG, batch_size=2, seq_len=384, precision="fp8", optimizer="adamw", gpus=2,
                             parallel=plan)
    assert capture_job(job).stack.kernels == "transformer-engine"
    assert capture_job(job.with_(parallel=dict(plan, framework="torch"))).stack is None
    eager = job.with_(stack=Stack(kernels="eager"))
    assert capture_job(eager).stack.kernels == "eager"
    te, ea = gpucast.explain(job, "h100"), gpucast.explain(eager, "h100")
    assert te.prediction.step_time_s < ea.prediction.step_time_s
    linear, total = _linear_params()
    # the FP8 weight and its transpose, once a step, split over t = 2 (the share of the rank's parameters
    # that are FP8 linear weights, the embedding and head on the rank included)
    assert te.estimate.memory.breakdown["fp8_weight_cache"] == pytest.approx(2 * linear / 2, rel=0.05)
    assert "fp8_weight_cache" not in ea.estimate.memory.breakdown


def test_the_rotary_wrapper_runs_the_original_outside_a_te_capture():
    from transformers.models.llama import modeling_llama as ml

    trace(_job())   # installs the wrapper
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    cos, sin = torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    qe, ke = ml.apply_rotary_pos_emb(q, k, cos, sin)
    rot = lambda x: torch.cat((-x[..., 4:], x[..., :4]), dim=-1)  # noqa: E731  (Su et al. 2021's rotate_half)
    assert torch.allclose(qe, q * cos.unsqueeze(1) + rot(q) * sin.unsqueeze(1))
    assert torch.allclose(ke, k * cos.unsqueeze(1) + rot(k) * sin.unsqueeze(1))


def test_a_frozen_fp8_weight_runs_no_weight_gradient_gemm():
    lora = dict(kind="lora", rank=8, targets=["q_proj", "v_proj"])
    tokens = 2 * 384
    weight_grads = lambda t: [o for o in t.ops if o.phase == "bwd" and o.op == "_scaled_mm"  # noqa: E731
                              and o.out_shapes[0][0] != tokens]     # a data gradient has a row per token
    assert len(weight_grads(trace(_job("fp8")))) == LINEARS_PER_LAYER * LAYERS
    assert weight_grads(trace(_job("fp8", adapter=lora))) == []    # the base weights are frozen
