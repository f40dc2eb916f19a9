"""LLM serving deployments in ``gpucast pack``: the memory share each engine is given, and the
latencies each keeps under an arrangement.

A serving engine that preallocates (vLLM, SGLang, TensorRT-LLM: :mod:`gpucast.estimate.serving.engines`)
takes ``gpu_memory_utilization`` of the whole GPU at start (vLLM's default 0.9), so two of them on one
GPU only start when each is told a share (vLLM's docs on running several instances on one GPU).
:func:`memory_shares` gives each serving job the bytes its load needs (its weights, activations, the
memory outside PyTorch's allocator and the KV cache its run held at its peak, with a block per running
sequence of slack) and shares out the rest of the engines' total in proportion to those needs; the
jobs that are not serving keep their predicted peaks. Each serving job is then predicted again at its
share (``serve.gpu_memory_utilization``), so a share too small for its load shows as preemptions or as
not fitting. :func:`figures` gives a serving job's TTFT and TPOT under an arrangement: on a
MIG slice its prediction there; sharing the whole GPU, its prediction at its share with every
iteration stretched by its slowdown (:mod:`gpucast.cluster.timeshare`: the same slowdown of its
kernels and host work that a training job's steps get).

Not modelled: an engine that grows its cache as it goes (Hugging Face's generate keeps its predicted
peak), the latency tail under sharing (percentiles stretch with the mean), KV-cache offload to the host.
"""

from __future__ import annotations

# The engines' total across instances: vLLM's default gpu_memory_utilization for one instance, the
# fraction the docs keep below 1 for the CUDA context and fragmentation (docs.vllm.ai, Engine Arguments).
TOTAL_UTILIZATION = 0.9


def is_preallocating(pred) -> bool:
    s = pred.serving
    return bool(s) and s.get("memory", {}).get("budget_bytes") is not None and s["engine"] != "hf"


def need_bytes(pred) -> int:
    """The bytes a job needs on the GPU: a preallocating serving job's load (module docstring), any
    other job's predicted peak."""
    if not is_preallocating(pred):
        return int(pred.memory_peak_bytes)
    from gpucast.estimate.serving.engines import ENGINES

    s, m = pred.serving, pred.serving["memory"]
    block = ENGINES[s["engine"]].block_size
    kv_tokens = int(s.get("peak_kv_tokens") or 0) + int(s.get("max_batch") or 1) * block
    return int(m["weights_bytes"] + m["activation_bytes"] + m["non_torch_bytes"] + kv_tokens * m["kv_bytes_per_token"])


def memory_shares(preds, gpu_memory_bytes: int) -> list[float | None]:
    """Each preallocating serving job's ``gpu_memory_utilization`` when the jobs share the whole GPU
    (None for the others): its need plus its part of what is left of :data:`TOTAL_UTILIZATION`, in
    proportion to its need. Shares may add to more than the total when the needs do not fit."""
    serving = [i for i, p in enumerate(preds) if is_preallocating(p)]
    if not serving:
        return [None] * len(preds)
    needs = [need_bytes(p) for p in preds]
    others = sum(n for i, n in enumerate(needs) if i not in serving)
    budget = TOTAL_UTILIZATION * gpu_memory_bytes - others
    served = sum(needs[i] for i in serving)
    scale = max(1.0, budget / served) if served > 0 else 1.0
    return [round(min(TOTAL_UTILIZATION, needs[i] * scale / gpu_memory_bytes), 4) if i in serving else None
            for i in range(len(preds))]


def figures(pred, slowdown: float = 1.0) -> dict | None:
    """A serving job's mean TTFT and TPOT with every iteration ``slowdown`` times longer, and its
    preemptions (None for a job that is not serving)."""
    s = pred.serving
    if not s:
        return None
    return {"ttft_s": s["ttft_s"] * slowdown, "tpot_s": s["tpot_s"] * slowdown,
            "preemptions": int(s.get("preemptions", 0))}


__all__ = ["TOTAL_UTILIZATION", "is_preallocating", "need_bytes", "memory_shares", "figures"]
