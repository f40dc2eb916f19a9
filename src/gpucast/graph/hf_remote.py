"""Hugging Face architectures that need the hub's remote code, described as the transformers one they run as.

A ``config.json`` whose ``model_type`` transformers does not know, because its modelling code lives
beside the weights on the hub (``trust_remote_code``), cannot be built here: gpucast never downloads.
Some of them are a transformers architecture with a twist that the serving engines remove; those are
rewritten into that architecture's config, as the engines run them (:data:`RUNS_AS`):

* ``deci`` (DeciLM-7B/-instruct: Llama layers with a number of K/V heads per layer,
  ``num_key_value_heads_per_layer``): vLLM's ``DeciLMForCausalLM`` "normalizes the weights upon loading,
  and uses uniform GQA with the max value" (vllm/model_executor/models/decilm.py): a Llama with
  ``num_key_value_heads = max(num_key_value_heads_per_layer)``, the smaller layers' K/V heads repeated,
  so the compute and the KV cache are those of the largest layer's heads in every layer.
* ``kimi_k2`` (Moonshot's Kimi-K2: its ``config.json`` names ``DeepseekV3ForCausalLM`` and remote code for
  its config and tokenizer only): DeepSeek-V3's architecture (MLA, shared and routed experts, dense first
  layers) at its own sizes, as vLLM and SGLang load it (their ``DeepseekV3ForCausalLM``).

Not modelled: the architecture as its own remote code runs it (DeciLM's transformers code keeps each
layer's heads: a smaller cache than vLLM's), other remote-code architectures (an unknown-architecture
error, as before).
"""

from __future__ import annotations


def _deci(data: dict) -> dict:
    per_layer = data.get("num_key_value_heads_per_layer")
    out = {k: v for k, v in data.items() if k not in ("num_key_value_heads_per_layer", "auto_map")}
    if isinstance(per_layer, list) and per_layer and all(isinstance(h, int) and h > 0 for h in per_layer):
        out["num_key_value_heads"] = max(per_layer)
    out["model_type"] = "llama"
    out["architectures"] = ["LlamaForCausalLM"]
    return out


def _kimi_k2(data: dict) -> dict:
    out = {k: v for k, v in data.items() if k != "auto_map"}
    out["model_type"] = "deepseek_v3"
    out["architectures"] = ["DeepseekV3ForCausalLM"]
    return out


RUNS_AS = {"deci": _deci, "kimi_k2": _kimi_k2}


def runs_as(data: dict) -> dict:
    """``data`` rewritten as the transformers architecture it runs as, or unchanged (module docstring)."""
    rewrite = RUNS_AS.get(data.get("model_type"))
    return rewrite(data) if rewrite is not None else data
