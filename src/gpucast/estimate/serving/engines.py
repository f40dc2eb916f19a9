"""LLM inference engines as the serving model sees them: how each batches, caches and launches.

One :class:`Engine` per ``serve.engine`` with the defaults a user gets without flags, each cited, and
the job's ``serve`` fields over them (:func:`resolve`). What is modelled of an engine:

* ``paged``: the KV cache is preallocated in blocks of ``block_size`` tokens under
  ``gpu_memory_utilization`` of the GPU's memory, and an iteration writes only its new tokens into it
  (vLLM's PagedAttention, SGLang's token pool, TensorRT-LLM's paged KV cache). ``hf`` keeps Hugging
  Face's ``DynamicCache``: every decode step concatenates the whole cache anew, and nothing is
  preallocated.
* ``continuous``: iteration-level scheduling (a finished sequence's slot is refilled at the next
  iteration, prefills join running decodes; Orca, OSDI'22) up to ``max_num_seqs`` sequences and
  ``max_num_batched_tokens`` tokens an iteration (``chunked_prefill``: a long prompt is cut into
  chunks of what is left of that budget). ``hf``'s ``generate`` runs one static batch to its end.
* ``cuda_graphs``: decode iterations replay CUDA graphs captured for batch sizes up to
  ``graph_max_batch``: the GPU runs the kernels back to back and the host's per-op launch cost is
  gone; larger batches and prefills run eagerly (their kernels are long enough to hide launches).
* ``host_per_iteration_s``: the engine's own CPU work per iteration that the GPU waits for
  (scheduling, preparing inputs, sampling, detokenising): fitted on measured runs where the data
  identify it (``data/serving_fit.json``, written by ``benchmarks/llm_inference_a100.py --write-fit``:
  vLLM and TensorRT-LLM on A100s), the prior below otherwise; a cluster's own, fitted by ``gpucast
  calibrate`` on its measured serving rows, comes with its environment (``Environment.serving_host_s``).

* ``release`` (``serve.engine_version``, any release: the modelled one of its line, gpucast.serving.RELEASE_LINES):
  vLLM's 0.6 (2024's: the A100 set's), 0.11 (the V1 engine: its batch caps by GPU memory and entry point,
  :func:`vllm_batch_defaults`) and 0.14 (the default: 0.11's with async scheduling, ``overlap_host``); TensorRT-LLM's
  0.11 (TensorRT engines and the C++ runtime, as
  the 2024 sets ran) and 1.0 (the PyTorch backend, the default: larger batches, the overlap scheduler
  hiding the host's work behind the GPU's, ``overlap_host``); :data:`RELEASES`. Under an all-at-once load
  TensorRT-LLM 1.0 sizes its batch as ``trtllm-bench throughput`` does (:mod:`.bench`). SGLang has its
  0.4 defaults (the entry above) and 0.5's by GPU memory and plan (:func:`sglang_defaults`, the default;
  its running-request cap from the KV cache, :func:`sglang_max_requests`).

* ``attention_kernels``: the engine's own attention kernels per architecture (FlashAttention-3 class ones on
  Hopper in vLLM 0.11, SGLang 0.5 and TensorRT-LLM 1.0; elsewhere, and in the 2024 releases, the kernel
  model's FlashAttention-2 share), unless the job's ``stack.attention`` names one.
* ``no_evict``: TensorRT-LLM's capacity scheduler (``GUARANTEED_NO_EVICT``) starts a request only when the KV
  cache holds it to its last token, and never preempts (:func:`.run.simulate`); vLLM and SGLang preempt.
* ``micro_batch_loop``: under pipeline parallelism TensorRT-LLM caps each micro-batch at ``max_batch_size``
  and every stage prepares each micro-batch on the host before its kernels (:mod:`.stages`).

Not modelled: prefix-cache eviction policies (a hit rate is an input), LoRA adapters, multi-step scheduling,
the engines' attention kernels on Blackwell (FlashAttention-2's share there), disaggregated prefill.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Engine:
    name: str
    paged: bool
    continuous: bool
    cuda_graphs: bool
    chunked_prefill: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float | None  # share of the GPU's memory it takes up front (None: as it goes)
    block_size: int
    graph_max_batch: int
    host_per_iteration_s: float
    source: str
    overlap_host: bool = False   # the host's work for iteration i+1 runs while the GPU runs iteration i
    release: str = ""            # the release whose defaults these are (serve.engine_version)
    # a sliding-window layer keeps only its window's blocks (vLLM V1's hybrid KV cache manager), else every token's
    windowed_kv: bool = False
    # under pipeline stages every rank loops over the micro-batches, its host work once per micro-batch it steps, and
    # max_num_seqs caps each micro-batch (TensorRT-LLM) rather than all of them (vLLM's one scheduler, SGLang)
    micro_batch_loop: bool = False
    # micro_batch_loop's host work per sequence of a micro-batch at each pipeline stage, before its kernels
    pp_host_per_sequence_s: float = 0.0
    # the engine's own fused attention kernels, ((architecture, achieved.yaml's kernel), ...); elsewhere, or where
    # the job's stack names one, the stack's (gpucast.estimate.achieved.attention_kernel)
    attention_kernels: tuple = ()
    # admits a request only when the cache holds all it will reach, and never preempts (run.simulate's no_evict)
    no_evict: bool = False


ENGINES: dict[str, Engine] = {
    "vllm": Engine(
        "vllm", paged=True, continuous=True, cuda_graphs=True, chunked_prefill=True, max_num_seqs=256,
        max_num_batched_tokens=8192, gpu_memory_utilization=0.9, block_size=16, graph_max_batch=512,
        host_per_iteration_s=3e-3,
        source="vLLM engine arguments (docs.vllm.ai, 'Engine Arguments'): gpu_memory_utilization 0.9, block_size "
               "16, max_num_seqs 256, enforce_eager off (CUDA graphs captured for decode batches up to 512), "
               "chunked prefill with a token budget of 8,192 in the V1 engine's offline defaults. Host time per "
               "iteration: a prior of 3 ms (vLLM's 2024 scheduler and sampler, Python; fitted where measured)."),
    "sglang": Engine(
        "sglang", paged=True, continuous=True, cuda_graphs=True, chunked_prefill=True, max_num_seqs=1024,
        max_num_batched_tokens=8192, gpu_memory_utilization=0.88, block_size=1, graph_max_batch=160,
        host_per_iteration_s=1e-3,
        source="SGLang server arguments (docs.sglang.ai, 'Server Arguments'): mem_fraction_static ~0.88 on "
               "large GPUs, a token-granular pool (page size 1), chunked_prefill_size 8,192, CUDA graphs up to "
               "cuda_graph_max_bs 160; its overlap scheduler hides most host work (a 1 ms prior)."),
    "trtllm": Engine(
        "trtllm", paged=True, continuous=True, cuda_graphs=True, chunked_prefill=False, max_num_seqs=256,
        max_num_batched_tokens=8192, gpu_memory_utilization=0.9, block_size=64, graph_max_batch=256,
        host_per_iteration_s=0.5e-3, micro_batch_loop=True, no_evict=True,
        source="TensorRT-LLM (nvidia.github.io/TensorRT-LLM, 'Useful build-time flags' and KV cache docs): "
               "kv_cache_free_gpu_mem_fraction 0.9, tokens_per_block 64, max_num_tokens 8,192, max_batch_size "
               "256, in-flight batching in a C++ runtime (0.5 ms prior per iteration); its engines have no "
               "per-op Python dispatch, as CUDA graphs would give. Under pipeline parallelism max_batch_size caps "
               "each of the pp micro-batches in flight: the capacity scheduler admits max_batch_size x pp_size "
               "sequences (tensorrt_llm/_torch/pyexecutor/_util.py, max_num_sequences = max_batch_size * "
               "mapping.pp_size; the C++ runtime's getMaxNumSequences beside getMaxBatchSize), the micro-batch "
               "scheduler max_batch_size of them an iteration. Its capacity scheduler's default policy is "
               "GUARANTEED_NO_EVICT (executor SchedulerConfig, docs 'Scheduler'): a request starts only when the "
               "KV cache can hold it to its last token, so nothing is preempted."),
    "hf": Engine(
        "hf", paged=False, continuous=False, cuda_graphs=False, chunked_prefill=False, max_num_seqs=1 << 20,
        max_num_batched_tokens=1 << 30, gpu_memory_utilization=None, block_size=1, graph_max_batch=0,
        host_per_iteration_s=0.0,
        source="Hugging Face transformers' model.generate: eager PyTorch (each op dispatched from Python: "
               "gpucast.estimate.host), DynamicCache, one static batch run to its end."),
}


# TensorRT-LLM 1.0's pipeline loop: host seconds a stage spends per sequence of the micro-batch it steps (input
# preparation, sampling state, responses: Python per request), on the pipeline's critical path. Fitted on NVIDIA's
# Llama-3.3-70B rows at pp 2/4/8 on RTX PRO 6000 (data/measured/trtllm-perf-overview-v1.0, 30 rows; a scan of 0,
# 35 and 50 us: their MdAPE 36 / 6 / 9 % at pp 8); held out, the set's other pipelines: Llama-3.1-405B pp 8 1.03x,
# Qwen3-235B pp 4 1.02x, Llama-4 Maverick pp 2 0.97x (benchmarks/trtllm_v1.py).
PP_HOST_PER_SEQUENCE_S = 35e-6

# Serving engines' attention on Hopper: FlashAttention-3 class kernels (achieved.yaml's flash3), not PyTorch SDPA's
HOPPER_FA3 = (("hopper", "flash3"),)

# Releases whose defaults differ (gpucast.serving.ENGINE_VERSIONS): TensorRT-LLM 0.11 is the entry above
# (TensorRT engines, the C++ runtime: the 2024 sets were measured on it); 1.0 runs the PyTorch backend.
# vLLM 0.6 is the entry above (the 2024 A100 set's vLLM); 0.11 is the V1 engine, whose batch defaults
# depend on the GPU and the entry point (vllm_batch_defaults).
RELEASES: dict[tuple[str, str], Engine] = {
    ("vllm", "0.6"): replace(ENGINES["vllm"], release="0.6"),
    ("sglang", "0.4"): replace(ENGINES["sglang"], release="0.4"),
    ("sglang", "0.5"): replace(
        ENGINES["sglang"], release="0.5", attention_kernels=HOPPER_FA3,
        source="SGLang 0.5 (python/sglang/srt/server_args.py, _handle_gpu_memory_settings): chunked_prefill_size, "
               "cuda_graph_max_bs and mem_fraction_static by the GPU's memory (sglang_defaults); max running "
               "requests the request pool's size, min(max(KV tokens / context length x 512, 2048), 4096) "
               "(model_runner.init_memory_pool; sglang_max_requests); a token-granular pool; the overlap "
               "scheduler hides most host work (a 1 ms prior). Its attention backend on Hopper is fa3, "
               "FlashAttention-3 (server_args.py, _handle_attention_backend_compatibility: the default on sm90)."),
    ("vllm", "0.11"): replace(
        ENGINES["vllm"], release="0.11", host_per_iteration_s=2e-3, windowed_kv=True, attention_kernels=HOPPER_FA3,
        source="vLLM 0.11, the V1 engine (vllm/engine/arg_utils.py, EngineArgs._set_default_args and "
               "get_batch_defaults): chunked prefill always on; max_num_seqs / max_num_batched_tokens 1024 / "
               "16384 for the offline LLM class and 1024 / 8192 for the OpenAI server on GPUs of 70 GiB or more "
               "other than the A100, else 256 / 8192 and 256 / 2048; gpu_memory_utilization 0.9, blocks of 16, "
               "CUDA graphs for decode batches up to 512; async scheduling off (its default), so the host's work "
               "per iteration adds to the GPU's: a 2 ms prior (the 2024 fit was 2.5 ms; V1's persistent batch "
               "and separate API process cut it). Its hybrid KV cache manager (vllm/v1/core/"
               "single_type_kv_cache_manager.py, SlidingWindowManager.remove_skipped_blocks) frees a sliding-window "
               "layer's blocks once the window has passed them. Its FLASH_ATTN backend runs FlashAttention-3 on "
               "Hopper (vllm/attention/utils/fa_utils.py, get_flash_attn_version: 3 on compute capability 9.0)."),
    ("vllm", "0.14"): replace(
        ENGINES["vllm"], release="0.14", host_per_iteration_s=2e-3, windowed_kv=True, attention_kernels=HOPPER_FA3,
        overlap_host=True,
        source="vLLM 0.14 (released January 2026): 0.11's V1 defaults (above) with async scheduling on by default "
               "(vllm-project/vllm#27614; vllm/config/scheduler.py: async_scheduling None, which VllmConfig turns on "
               "unless an option is incompatible): the scheduler prepares iteration i+1 while the GPU runs "
               "iteration i, so the 2 ms of host work hides behind the GPU's unless the iteration is shorter, as "
               "TensorRT-LLM 1.0's overlap scheduler. Off (the host's work adds) for speculative decoding other "
               "than EAGLE or MTP drafts (#31998) and under pipeline parallelism (its stages add their host work "
               "here whatever the release). A new request waits one more scheduling step for its first token: "
               "not modelled."),
    ("trtllm", "0.11"): replace(ENGINES["trtllm"], release="0.11"),
    ("trtllm", "1.0"): replace(
        ENGINES["trtllm"], release="1.0", max_num_seqs=2048, max_num_batched_tokens=8192, block_size=32,
        graph_max_batch=128, overlap_host=True, host_per_iteration_s=2e-3, attention_kernels=HOPPER_FA3,
        pp_host_per_sequence_s=PP_HOST_PER_SEQUENCE_S,
        source="TensorRT-LLM 1.0, PyTorch backend (tensorrt_llm/llmapi/llm_args.py): max_batch_size 2048, "
               "max_num_tokens 8192, enable_chunked_prefill off, KV blocks of 32 tokens, CUDA graphs for "
               "decode batches up to 128 (CudaGraphConfig's default), the overlap scheduler on "
               "(disable_overlap_scheduler False: the Python executor prepares iteration i+1 while the GPU "
               "runs iteration i; a 2 ms prior of that host work, hidden unless the GPU's iteration is shorter). "
               "Under pipeline parallelism the PyTorch executor runs _executor_loop_pp, which has no overlap "
               "scheduler (py_executor.py: the event loop is _executor_loop_pp whenever pp_size > 1): each stage "
               "prepares a micro-batch on the host (the 2 ms and 35 us a sequence, PP_HOST_PER_SEQUENCE_S) before "
               "its kernels run. Its "
               "context attention on Hopper is its own warp-specialised FMHA (TMA loads, WGMMA: the "
               "FlashAttention-3 design), taken at FlashAttention-3's share."),
}


# TensorRT-LLM 1.x serving a stream of requests (a closed loop or a request rate): its prompts are chunked into
# the token budget beside the running decodes. llm_args.py's enable_chunked_prefill is False, and without it the
# C++ micro-batch scheduler (cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp) stops at the first
# prompt that does not fit beside the decodes already taken: an 8k-token prompt at max_num_tokens 8192 waits
# for the batch to drain (72 s TTFT where the measured deployments of issue 54 took 0.4 s). Measured serving
# deployments run it chunked (as trtllm-bench does, PR #6582); serve.chunked_prefill false says otherwise.
TRTLLM_CHUNKED_LOADS = ("closed", "poisson")


# vLLM's V1 releases (its batch defaults by GPU and entry point), and the speculative methods under which vLLM
# 0.14+ keeps its scheduler synchronous (#31998: async scheduling with EAGLE/MTP drafts only)
VLLM_V1 = ("0.11", "0.14")
VLLM_SYNC_SPEC = ("ngram", "draft")


@lru_cache(maxsize=1)
def fitted_host() -> dict[str, float]:
    """Engine -> host seconds per iteration fitted on measured runs (``data/serving_fit.json``; empty if absent)."""
    path = resources.files("gpucast").joinpath("data/serving_fit.json")
    if not path.is_file():
        return {}
    return {k: float(v) for k, v in json.loads(path.read_text())["host_per_iteration_s"].items() if v is not None}


# The release the packaged host-time fit was measured on (data/serving_fit.json's source).
FITTED_RELEASE = {"trtllm": "0.11", "vllm": "0.6"}
# vLLM V1's batch defaults (vllm/engine/arg_utils.py, get_batch_defaults): (max_num_seqs,
# max_num_batched_tokens) by entry point, on a GPU of at least LARGE_GPU_GIB that is not an A100 ("setting
# large max_num_batched_tokens for A100 reduces throughput", PR #17885) and on the others.
VLLM_V1_LARGE_GPU_GIB = 70
VLLM_V1_BATCH = {True: {"offline": (1024, 16384), "server": (1024, 8192)},
                 False: {"offline": (256, 8192), "server": (256, 2048)}}


# SGLang 0.5's defaults by GPU memory (server_args.py, _handle_gpu_memory_settings): (below this many GiB,
# chunked_prefill_size, cuda_graph_max_bs below tensor 4, at tensor 4 or more); and its memory reservation
# in MiB: 512 + 1.5 x max(chunk, 2048) + 2 x graph batch + tp x pp / 8 x 1024 (+ 3 x graph batch x dp under
# DP attention), at least 10 GiB on GPUs over 60 GiB.
SGLANG_BY_MEMORY = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
                    (160, 8192, 256, 512), (float("inf"), 16384, 512, 512))
SGLANG_POOL = (2048, 4096, 512)   # request pool: at least, at most, and slots per context length of KV tokens


def sglang_defaults(gpu, tensor: int = 1, pipeline: int = 1, dp_attention: int = 0) -> tuple[int, int, float]:
    """(chunked_prefill_size, cuda_graph_max_bs, mem_fraction_static) SGLang 0.5 sets on ``gpu`` (None: its
    fallback, 4096, 160 and 0.88) for a deployment of ``tensor`` x ``pipeline`` ranks (``dp_attention``: the
    attention data-parallel ranks, 0 without)."""
    if gpu is None:
        return 4096, 160, 0.88
    mib = gpu.memory_bytes / 2**20
    _, chunk, small, large = next(row for row in SGLANG_BY_MEMORY if mib < row[0] * 1024)
    graph = small if tensor < 4 else large
    reserved = 512 + max(chunk, 2048) * 1.5 + graph * 2 + tensor * pipeline / 8 * 1024
    if dp_attention:
        reserved += graph * dp_attention * 3 + (graph * dp_attention * 1.5 if graph > 300 else 0)
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return chunk, graph, round((mib - reserved) / mib, 3)


def sglang_max_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's running-request cap: its request pool, sized from the KV tokens per context length."""
    low, high, per = SGLANG_POOL
    return int(min(max(kv_tokens / max(1, context_len) * per, low), high))


def vllm_batch_defaults(gpu, entry: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM V1 sets on ``gpu`` (a GpuSpec, or None: the smaller
    defaults, as vLLM's own fallback when it cannot query the device) for ``entry`` (offline | server)."""
    large = (gpu is not None and gpu.memory_bytes >= VLLM_V1_LARGE_GPU_GIB * 2**30
             and "a100" not in gpu.name.lower())
    return VLLM_V1_BATCH[large][entry]


def resolve(serve, env=None, gpu=None, parallel=None) -> Engine:
    """The job's engine (default ``vllm``) at its release (``serve.engine_version``: the modelled release whose
    line it is in, :func:`gpucast.serving.modelled_release`; default the newest modelled: :data:`RELEASES`; vLLM V1's batch defaults for ``gpu`` and the entry point,
    :func:`vllm_batch_defaults`; SGLang 0.5's by ``gpu`` and the ``parallel`` plan, :func:`sglang_defaults`)
    with the ``serve`` group's settings over its defaults; its host time per
    iteration the cluster's (``env.serving_host_s``, fitted by ``gpucast calibrate`` on serving rows),
    else the packaged fit where it was fitted on that release, else the prior."""
    from gpucast.serving import ENGINE_VERSIONS, modelled_release

    name = (serve.engine if serve is not None and serve.engine else "vllm")
    version = (modelled_release(name, serve.engine_version) if serve is not None and serve.engine_version
               and name in ENGINE_VERSIONS else ENGINE_VERSIONS.get(name, ("",))[-1])
    e = RELEASES.get((name, version), ENGINES[name])
    if name == "vllm" and e.release in VLLM_V1:
        seqs, tokens = vllm_batch_defaults(gpu, serve.entry_point if serve is not None else "offline")
        e = replace(e, max_num_seqs=seqs, max_num_batched_tokens=tokens)
        if e.overlap_host and serve is not None and serve.spec_method in VLLM_SYNC_SPEC:
            e = replace(e, overlap_host=False)
    if (name, e.release) == ("sglang", "0.5"):
        t, p = ((parallel.tensor or 1), (parallel.pipeline or 1)) if parallel is not None else (1, 1)
        dp = t if parallel is not None and parallel.attention_dp else 0
        chunk, graph, fraction = sglang_defaults(gpu, t, p, dp)
        e = replace(e, max_num_batched_tokens=chunk, graph_max_batch=graph, gpu_memory_utilization=fraction)
    own = env.serving_host(name) if env is not None else None
    if own is not None:
        e = replace(e, host_per_iteration_s=own)
    elif name in fitted_host() and version in ("", FITTED_RELEASE.get(name, "")):
        e = replace(e, host_per_iteration_s=fitted_host()[name])
    if serve is None:
        return e
    if (name, e.release) == ("trtllm", "1.0") and serve.load in TRTLLM_CHUNKED_LOADS:
        e = replace(e, chunked_prefill=True)   # a serving deployment's prompts chunked (TRTLLM_CHUNKED_LOADS)
    changes = {k: getattr(serve, k) for k in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
                                               "block_size", "cuda_graphs", "chunked_prefill")
               if getattr(serve, k) is not None}
    if name == "hf":
        changes.pop("gpu_memory_utilization", None)
    return replace(e, **changes)
