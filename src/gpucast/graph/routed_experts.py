"""Mixture-of-experts layers that transformers runs over every expert, traced as serving engines route them.

Most of transformers' MoE models (Qwen3-MoE, DeepSeek-V3, GPT-OSS, Mixtral...) run their experts through
its experts interface: tokens sorted by expert, two ``_grouped_mm`` GEMMs of ``tokens x top_k`` rows
(``transformers.integrations.moe.grouped_mm_experts_forward``), which is what the engines' fused MoE
kernels compute. Llama-4's ``Llama4TextMoe`` does not: it repeats every token for every expert, scales
it by the router's score (zero for experts not chosen) and runs two ``bmm`` over all ``E`` experts
(``modeling_llama4.Llama4TextExperts``): ``E / top_k`` times the routed FLOPs and activation bytes
(16x for Scout, 128x for Maverick), none of which vLLM's, SGLang's or TensorRT-LLM's fused MoE kernels
run (they gather each expert's routed tokens, as the grouped form does).

:func:`route` rebinds every such layer of a model gpucast builds (:func:`gpucast.graph.hf._build`, for
training and serving traces alike) to the routed form: the
router's top-k, the chosen experts' sigmoid scores applied to their tokens' inputs (Llama-4 scales the
input, not the output), the experts through transformers' own ``grouped_mm_experts_forward`` (the
weights as stored, ``(E, in, out)``), the shared expert added. Same parameters, same output shape.

Training frameworks route the same way (Megatron-Core's grouped GEMMs, TorchTitan's), so a training
trace's experts take the routed tokens only, and their backward is the grouped GEMMs'.

Not modelled: Llama-4 scales the routed tokens' inputs by the router's sigmoid score before the experts,
here after (the same kernels and bytes).
"""

from __future__ import annotations

import types

import torch

from gpucast import imports

# Layer classes whose forward runs every expert on every token, by class name (transformers' modeling).
DENSE_OVER_EXPERTS = ("Llama4TextMoe",)


def _routed_forward(self, hidden_states: torch.Tensor):
    moe = imports.load("transformers.integrations.moe")
    flat = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.Linear.forward(self.router, flat)   # Llama4Router is a Linear with its own forward
    top_value, top_index = torch.topk(logits, self.top_k, dim=1)
    scores = torch.sigmoid(top_value.float()).to(flat.dtype)
    experts = self.experts
    shim = types.SimpleNamespace(
        num_experts=self.num_experts, has_gate=True, has_bias=False, is_transposed=True,
        has_post_expert_norm=False, _is_expert_parallel=False, gate_up_proj=experts.gate_up_proj,
        down_proj=experts.down_proj, act_fn=experts.act_fn,
        _apply_gate=lambda x: moe._default_apply_gate(types.SimpleNamespace(act_fn=experts.act_fn), x))
    # Llama-4 scales each routed token's input by its score; the kernels' cost is the same either side
    routed = moe.grouped_mm_experts_forward(shim, flat, top_index, scores)
    out = self.shared_expert(flat)
    out.add_(routed)
    return out, logits


def route(model: torch.nn.Module) -> int:
    """Rebind the dense-over-experts MoE layers of ``model`` to the routed form (module docstring);
    returns how many were rebound."""
    n = 0
    for module in model.modules():
        if type(module).__name__ in DENSE_OVER_EXPERTS:
            module.forward = types.MethodType(_routed_forward, module)
            n += 1
    return n
