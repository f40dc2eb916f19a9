"""How ``trtllm-bench throughput`` sizes TensorRT-LLM's batch for an offline maximum-throughput run.

An all-at-once load (``serve`` with neither ``concurrency`` nor ``request_rate``: every request queued
at time 0) on TensorRT-LLM 1.0 is what ``trtllm-bench throughput`` runs, and the tool does not leave
the engine at its defaults: without ``--max_batch_size``/``--max_num_tokens`` it derives both from the
model, the GPUs and the dataset's lengths (``tensorrt_llm/bench/build/tuning.py``,
``calc_engine_setting`` and ``finetune_setting``), then pads CUDA graphs up to that batch. Restated
(GiB units as the tool's):

* KV bytes of a token over the deployment: ``2 x layers x max(tp, kv_heads) x head_dim x kv_bytes``
  (each tensor rank holds at least one KV head); weights ``parameters x bytes per weight`` (2, FP8 1,
  NVFP4 0.5);
* cache ``= 0.95 x (tp x pp x GPU memory - weights)``; requests that fit ``= cache / (KV bytes x
  (input + output))``;
* batch ``= min(requests, 4096) / pp``, rounded up to a multiple of 32 (at least 64) below 256, of 128
  below 1,024, of 256 above; tokens ``= min(batch x (1 + input / output), 32768)`` (the raw batch's),
  rounded up to 256 (at least 2,048) below 4,096, to 512 below 8,192, to 1,024 above.

The runs chunk their context: NVIDIA's published table has 5,000- and 20,000-token prompts finishing
under the token caps this sizing gives (2,048-3,072), which only context chunking admits (without it a
prompt longer than ``max_num_tokens`` is refused and one as long waits for an empty batch), so an engine
sized here chunks its prefills.

What the engine then admits is still bounded by the KV cache it really gets
(:mod:`gpucast.estimate.serving.memory`); the tool's estimate only sets the caps. Not modelled: the
hybrid Mamba models' extra state in the tool's estimate.
"""

from __future__ import annotations

import math
from dataclasses import replace

CACHE_SHARE = 0.95          # calc_engine_setting's kv_cache_gpu_mem_fraction default
MAX_REQUESTS = 4096         # finetune_setting: total batch cap (decoder buffers)
MAX_TOKENS = 32768          # finetune_setting: num-tokens cap (activation buffers)
# finetune_setting's rounding: (below this, round up to a multiple of this) rungs, then the floor
BATCH_RUNGS, BATCH_FLOOR = ((256, 32), (1024, 128), (math.inf, 256)), 64
TOKEN_RUNGS, TOKEN_FLOOR = ((4096, 256), (8192, 512), (math.inf, 1024)), 2048
# Bytes a weight as the tool counts them (its BYTES_PER_ELEM: NVFP4's block scales left out)
WEIGHT_BYTES = {"fp8": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}


def _round_up(raw: float, rungs, floor: int) -> int:
    step = next(m for below, m in rungs if raw < below)
    return max(floor, step * math.ceil(raw / step))


def trtllm_bench_sizes(parameters: float, weight_bytes: float, kv_token_bytes: float, gpu_memory_bytes: float,
                       tensor: int, pipeline: int, input_len: float, output_len: float) -> tuple[int, int]:
    """(max batch size, max num tokens) ``trtllm-bench throughput`` sets (module docstring).
    ``kv_token_bytes``: one token's K/V bytes over the whole model with each tensor rank's at least one
    head; ``weight_bytes``: bytes per weight."""
    engine = parameters * weight_bytes
    available = max(0.0, gpu_memory_bytes * tensor * pipeline - engine)
    requests = CACHE_SHARE * available / max(kv_token_bytes * (input_len + output_len), 1.0)
    raw_bs = min(requests, MAX_REQUESTS) / pipeline
    raw_tokens = min(raw_bs * (1 + input_len / max(output_len, 1.0)), MAX_TOKENS)
    return _round_up(raw_bs, BATCH_RUNGS, BATCH_FLOOR), _round_up(raw_tokens, TOKEN_RUNGS, TOKEN_FLOOR)


def sized(engine, serve, precision: str, parameters: float, kv_token_bytes: float, gpu_memory_bytes: float,
          tensor: int, pipeline: int, input_len: float, output_len: float):
    """(the engine as ``trtllm-bench throughput`` runs it, a note), or ``(engine, None)`` where the tool's
    sizing does not apply: another engine or release than TensorRT-LLM 1.0's, a load that is not all at
    once, or caps the job sets itself (module docstring)."""
    from gpucast.estimate.serving.memory import WEIGHT_BITS

    if (engine.name != "trtllm" or engine.release in ("", "0.11") or serve.load != "static"
            or serve.max_num_seqs is not None or serve.max_num_batched_tokens is not None):
        return engine, None
    weights = serve.weights or "auto"
    per_weight = WEIGHT_BITS[weights] / 8 if weights != "auto" else WEIGHT_BYTES.get(precision, 2.0)
    batch, tokens = trtllm_bench_sizes(parameters, per_weight, kv_token_bytes, gpu_memory_bytes, tensor, pipeline,
                                       input_len, output_len)
    note = (f"TensorRT-LLM {engine.release} sized as trtllm-bench throughput does: max batch {batch}, "
            f"max tokens {tokens}")
    return replace(engine, max_num_seqs=batch, max_num_batched_tokens=tokens, graph_max_batch=batch,
                   chunked_prefill=True), note
