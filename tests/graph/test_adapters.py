"""LoRA and QLoRA captures (gpucast.graph.adapters, gpucast.graph.nf4) against closed forms.

Every expected number is counted here from the model config, not read back from gpucast: the
adapters' parameters (r x (in + out) per targeted Linear), AdamW's two fp32 moments per
adapter parameter, and QLoRA's storage (half a byte per 4-bit value, one 8-bit scale per 64
values and one fp32 scale per 256 scales, QLoRA paper sec. 3; dense bf16 embeddings, output
layer and norms).
"""

from __future__ import annotations

import pytest
import torch

from gpucast.graph import capture
from gpucast.graph.adapters import LoraLinear, apply_adapter, parameter_count
from gpucast.graph.nf4 import Linear4bit
from gpucast.graph.tracer import CaptureError, resolve
from gpucast.job import Job

LLAMA = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4, vocab_size=1000)
RANK = 8


def _job(cfg=LLAMA, kind="lora", rank=RANK, precision="amp-bf16", **adapter):
    return Job.from_hf_config(cfg, batch_size=2, seq_len=64, precision=precision, optimizer="adamw",
                              adapter={"kind": kind, "rank": rank, **adapter})


def _llama_linears(cfg) -> dict[str, tuple[int, int]]:
    """(in, out) of one decoder layer's Linear layers, from the config."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def _attention_adapter_params(cfg, rank=RANK) -> int:
    per_layer = sum(rank * (i + o) for name, (i, o) in _llama_linears(cfg).items()
                    if name in ("q_proj", "k_proj", "v_proj", "o_proj"))
    return cfg["num_hidden_layers"] * per_layer


def test_lora_trains_only_the_adapters(cap):
    trace = cap(_job())
    n = _attention_adapter_params(LLAMA)
    assert trace.memory.totals["gradients"] == 4 * n
    assert trace.gradient_bytes == 4 * n
    assert trace.memory.totals["optimizer_state"] == 8 * n  # AdamW: exp_avg and exp_avg_sq, fp32
    assert trace.param_tensors == 2 * 4 * LLAMA["num_hidden_layers"]  # A and B per projection
    # The frozen base in bf16 (2 bytes a parameter) plus the fp32 adapters.
    h, v, layers = LLAMA["hidden_size"], LLAMA["vocab_size"], LLAMA["num_hidden_layers"]
    base = 2 * v * h + layers * (sum(i * o for i, o in _llama_linears(LLAMA).values()) + 2 * h) + h
    assert trace.parameters == base + n
    assert trace.memory.totals["parameters"] == pytest.approx(2 * base + 4 * n, rel=0.005)


def test_default_targets_are_the_attention_projections():
    cfg = dict(LLAMA, num_key_value_heads=2)  # k/v projections narrower than q
    job = _job(cfg)
    with torch.device("meta"):
        model = resolve(job).model_fn()
        model = apply_adapter(model.to("meta"), job.adapter.resolved(), job.precision)
    wrapped = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, LoraLinear)}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj"}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == _attention_adapter_params(cfg) == 2 * 4 * RANK * (256 + 256) - 2 * 2 * RANK * 128
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters() if not p.requires_grad)


def test_target_patterns_match_last_name_or_dotted_path():
    job = _job(targets=["*_proj"])
    with torch.device("meta"):
        model = resolve(job).model_fn().to("meta")
        model = apply_adapter(model, job.adapter.resolved(), job.precision)
    names = [name for name, m in model.named_modules() if isinstance(m, LoraLinear)]
    assert len(names) == 7 * LLAMA["num_hidden_layers"]  # attention and MLP projections, not lm_head
    job = _job(targets=["*.layers.1.mlp.down_proj"])
    with torch.device("meta"):
        model = apply_adapter(resolve(job).model_fn().to("meta"), job.adapter.resolved(), job.precision)
    assert [n for n, m in model.named_modules() if isinstance(m, LoraLinear)] == ["model.model.layers.1.mlp.down_proj"]


def test_qlora_storage_is_four_bit_plus_constants(cap):
    cfg = dict(LLAMA, hidden_size=1024, intermediate_size=2048, num_attention_heads=8, num_key_value_heads=8)
    trace = cap(_job(cfg, kind="qlora"))
    h, v, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    quantised = layers * sum(i * o for i, o in _llama_linears(cfg).values())
    # Per 4-bit value: 4 bits, an 8-bit scale per 64 values, an fp32 scale per 64 x 256 values.
    bits = 4 + 8 / 64 + 32 / (64 * 256)
    dense_bf16 = 2 * v * h + (2 * layers + 1) * h  # embed_tokens, lm_head, the RMSNorms
    adapters = _attention_adapter_params(cfg)
    expected = quantised * bits / 8 + 2 * dense_bf16 + 4 * adapters
    assert trace.memory.totals["parameters"] == pytest.approx(expected, rel=0.01)
    assert trace.memory.totals["gradients"] == 4 * adapters
    assert trace.memory.totals["optimizer_state"] == 8 * adapters


def test_qlora_dequantises_each_weight_in_forward_and_again_in_backward(cap):
    trace = cap(_job(kind="qlora"))
    layers = LLAMA["num_hidden_layers"]
    shapes = [(o, i) for i, o in _llama_linears(LLAMA).values()] * layers
    fwd = [o for o in trace.ops if o.op == "dequantize_nf4" and o.phase == "fwd"]
    bwd = [o for o in trace.ops if o.op == "dequantize_nf4" and o.phase == "bwd"]
    assert sorted(o.out_shapes[0] for o in fwd) == sorted(shapes)  # lm_head (1000 x 256) stays dense
    # The input gradient needs the weight again, except in layer 0's q/k/v projections: their input
    # (the frozen embedding through a frozen norm) needs no gradient.
    assert len(bwd) == len(fwd) - 3
    for o in fwd + bwd:
        n = o.out_shapes[0][0] * o.out_shapes[0][1]
        assert o.costed and o.category == "elementwise" and o.kernels == 1
        assert o.bytes_read == n // 2 + 4 * n // 64  # the 4-bit codes and the fp32 scales
        assert o.bytes_written == 2 * n  # the dense bf16 weight
        assert o.flops == 2 * n
    # Double quantisation: the 8-bit scales are dequantised first, once per 4-bit dequantisation.
    assert sum(o.op == "dequantize_blockwise" for o in trace.ops) == len(fwd) + len(bwd)
    assert not trace.uncosted


def test_qlora_frees_the_dense_weights(cap):
    # The dequantised weights are temporaries: what autograd keeps for backward is no more than
    # LoRA's (which keeps no weights either), so none of the 14 dense weights is held.
    lora, qlora = cap(_job()), cap(_job(kind="qlora"))
    assert qlora.memory.at_backward_start["activations"] <= lora.memory.at_backward_start["activations"]
    assert qlora.memory.totals["parameters"] < lora.memory.totals["parameters"]


def test_gpt2_conv1d_and_tied_output_layer(cap):
    cfg = dict(model_type="gpt2", n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=128)
    trace = cap(_job(cfg, kind="qlora"))
    h = cfg["n_embd"]
    assert trace.gradient_bytes == 4 * cfg["n_layer"] * RANK * (h + 3 * h)  # c_attn: in h, out 3h
    fwd = [o.out_shapes[0] for o in trace.ops if o.op == "dequantize_nf4" and o.phase == "fwd"]
    # c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj are 4-bit; lm_head, tied to wte, is not.
    assert sorted(fwd) == sorted([(3 * h, h), (h, h), (4 * h, h), (h, 4 * h)] * cfg["n_layer"])


def test_parameter_count_counts_four_bit_values():
    job = _job(kind="qlora")
    with torch.device("meta"):
        model = apply_adapter(resolve(job).model_fn().to("meta"), job.adapter.resolved(), job.precision)
    dense = sum(p.numel() for p in model.parameters())
    packed = sum(m.weight.numel() for m in model.modules() if isinstance(m, Linear4bit))
    assert parameter_count(model) == dense + packed  # each byte holds two values


def test_unmatched_targets_fail_in_one_line():
    with pytest.raises(CaptureError) as err:
        capture(_job(targets=["nope*"]))
    msg = str(err.value)
    assert msg.startswith("adding the adapters failed: ValueError: adapter targets nope* match no Linear layer")
    assert "q_proj" in msg and "\n" not in msg

