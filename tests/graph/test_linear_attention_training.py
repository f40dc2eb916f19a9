"""Gated delta-nets, Kimi delta attention and Mamba-2 layers in training traces: the fused kernels and their backwards.

The independent reasons behind the assertions: Megatron-Core and transformers with the hub's kernels train these
layers with fla's and mamba-ssm's fused kernels, one forward and one backward op a layer, not transformers' torch
fallbacks, which materialise chunk-by-chunk intermediates the fused kernels keep in registers (so the fallback's
trace must move more bytes and keep more activations); a backward takes the gradients of every product of the
forward (twice its FLOPs) on top of what it recomputes; and a real device (not the meta device) still runs
transformers' own code, since the fused ops have no kernels there."""

from __future__ import annotations

import collections

import pytest
import torch

from gpucast.api import trace
from gpucast.graph import linear_attention, linear_attention_backward
from gpucast.job import Job

GDN = {"model_type": "qwen3_next", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
       "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "linear_conv_kernel_dim": 4,
       "linear_key_head_dim": 32, "linear_value_head_dim": 48, "linear_num_key_heads": 4,
       "linear_num_value_heads": 8, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64,
       "num_experts_per_tok": 2, "num_experts": 4, "vocab_size": 1024, "max_position_embeddings": 4096,
       "full_attention_interval": 4}
MAMBA2 = {"model_type": "nemotron_h", "hidden_size": 256, "num_hidden_layers": 4, "hybrid_override_pattern": "M-M*",
          "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "mamba_num_heads": 8,
          "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2, "chunk_size": 64, "vocab_size": 1024,
          "max_position_embeddings": 4096}


def _trace(cfg, seq=512):
    return trace(Job.from_hf_config(cfg, batch_size=2, seq_len=seq, precision="bf16", optimizer="adamw"))


KDA = {"model_type": "kimi_linear", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
       "num_key_value_heads": 4, "kv_lora_rank": 64, "q_lora_rank": None, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
       "v_head_dim": 32, "intermediate_size": 512, "linear_num_heads": 4, "linear_head_dim": 32,
       "linear_conv_kernel_dim": 4, "vocab_size": 1024, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
       "layer_types": ["linear_attention"] * 3 + ["full_attention"], "mlp_layer_types": ["dense"] * 4}


@pytest.mark.parametrize("cfg, forward_op", [(GDN, "gated_delta_rule"), (KDA, "gated_delta_rule"),
                                             (MAMBA2, "ssd_scan")])
def test_each_mixer_trains_as_one_fused_op_and_its_backward(cfg, forward_op):
    t = _trace(cfg)
    ops = collections.Counter((o.op, o.phase) for o in t.ops)
    layers = ops[(forward_op, "fwd")]
    assert layers == (2 if cfg is MAMBA2 else 3)
    assert ops[(f"{forward_op}_backward", "bwd")] == layers
    assert ops[("causal_conv1d", "fwd")] == ops[("causal_conv1d_backward", "bwd")] == layers
    fwd = sum(o.flops for o in t.ops if o.op == forward_op)
    bwd = sum(o.flops for o in t.ops if o.op == f"{forward_op}_backward")
    assert bwd > 2 * fwd


def test_the_fused_kernels_keep_fewer_activations_and_move_fewer_bytes_than_the_torch_fallback(monkeypatch):
    from gpucast import api

    fused = _trace(MAMBA2, seq=1024)
    monkeypatch.setattr(linear_attention, "patch_model", lambda model, kind=None: False)
    monkeypatch.setattr(api, "_traces", collections.OrderedDict())   # capture again, not the cached trace
    fallback = _trace(MAMBA2, seq=1024)
    assert not any(o.op == "ssd_scan" for o in fallback.ops)
    assert fused.memory.at_backward_start["activations"] < fallback.memory.at_backward_start["activations"]
    assert sum(o.bytes for o in fused.ops) < sum(o.bytes for o in fallback.ops)
    assert len(fused.ops) < len(fallback.ops)


def test_the_backward_formulas_add_the_recompute_to_twice_the_forward():
    from torch.utils.flop_counter import FlopCounterMode

    def counted(fn, *args):
        with FlopCounterMode(display=False) as fc:
            fn(*args)
        return fc.get_total_flops()

    b, t, h, p, g, n, chunk = 1, 256, 4, 16, 2, 8, 64
    x, dt = torch.empty(b, t, h, p, device="meta"), torch.empty(b, t, h, device="meta")
    bb, cc = torch.empty(b, t, g, n, device="meta"), torch.empty(b, t, g, n, device="meta")
    fwd = counted(linear_attention.ssd_scan, x, dt, bb, cc, x.new_empty(0), chunk, False)
    bwd = counted(linear_attention_backward.ssd_scan_backward, x, dt, bb, cc, x, x, chunk)
    # forward: b t (h (2 c p + 4 p n) + g 2 c n); recompute: b t (g 2 c n + h 2 p n)
    assert fwd == b * t * (h * (2 * chunk * p + 4 * p * n) + g * 2 * chunk * n)
    assert bwd == 2 * fwd + b * t * (g * 2 * chunk * n + h * 2 * p * n)


def test_a_real_device_runs_transformers_own_kernels():
    from gpucast.zoo import factories

    job = Job.from_hf_config(dict(GDN, num_hidden_layers=1, layer_types=["linear_attention"]), batch_size=1,
                             seq_len=16, precision="fp32")
    built = factories(job)
    model = built.model_fn()
    assert model.fused   # patched, yet a CPU forward has no fused kernel to call and must not ask for one
    out = model(*built.input_fn(1))
    assert torch.isfinite(out.logits).all()


def test_a_hybrids_model_flops_count_attention_scores_in_its_attention_blocks_only():
    from gpucast.estimate.parallel.flops import attention_blocks, model_flops_per_sample

    t = _trace(MAMBA2)   # "M-M*": two Mamba-2 blocks, an MLP block and one attention block
    assert t.layout.blocks == 4 and attention_blocks(t) == 1
    s, h = t.layout.tokens, t.layout.hidden
    # PaLM's 6N + 12 L h s a token, L the one attention block (no experts: every parameter is active)
    assert model_flops_per_sample(t, t.trainable_parameters, False) == (6 * t.parameters + 12 * 1 * h * s) * s
