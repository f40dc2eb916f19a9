"""GPU memory of a serving deployment, per tensor-parallel rank: what the KV cache gets.

Closed forms, each from the engine's own accounting:

* **weights**: the model's parameter bytes (traced on the meta device; an ``fp8`` job's linear layers
  one byte a weight, its embedding and head two) over the tensor-parallel degree ``t`` (every engine shards attention, MLP, embedding and head over ``t``; the norms'
  few weights are counted as sharded too), times ``weight_bits / 16`` for weight-only int8/int4
  (AWQ/GPTQ: packed weights, plus the fp16 scales of one group of 128 per output channel); ``mxfp4``
  keeps the routed experts in MXFP4 (4.25 bits a weight: E2M1 in blocks of 32 with an E8M0 scale, as
  GPT-OSS ships them) and everything else 16-bit.
* **KV cache per token** (per rank): layers x KV heads x head dim x 2 (K and V) x the cache dtype's
  bytes, the KV heads split over ``t``; with fewer KV heads than ranks each rank keeps one head (vLLM
  replicates them), so a rank holds ``max(kv_heads / t, 1)`` heads.
* **linear-attention state** (gated delta-net layers: :mod:`gpucast.graph.linear_attention`): a fixed
  number of bytes per running sequence (its layers' conv and recurrent state, their heads split over
  ``t``), taken from the same pool as the KV blocks, in whole blocks (``state_blocks``).
* **sliding-window layers** under an engine that frees what their window has passed (``windowed_kv``: vLLM
  V1's hybrid KV cache manager): the per-token bytes count the full-attention layers only, and each running
  sequence's sliding layers hold its tokens up to their window plus a block (:func:`window_groups`: a
  sequence shorter than the window holds only its own tokens), from the same pool.
* **activations**: the peak of the largest iteration's forward (``max_num_batched_tokens`` tokens:
  what vLLM profiles at start-up before sizing the cache), from the traced forward's memory timeline.
* **non-torch memory**: the CUDA context (gpucast.estimate.memory's, as for any job) and the CUDA
  graphs' pools (``CUDA_GRAPH_BYTES``).
* **KV budget**: ``gpu_memory_utilization x GPU memory`` minus the above (paged engines); the KV
  tokens that fit are the budget over the per-token bytes, in whole blocks. ``hf`` preallocates
  nothing: its cache is the live tokens' bytes, up to what the GPU has left.

Not modelled: vLLM's cross-layer cache sharing, its page size unified across layer groups (bytes are charged), MLA's compressed cache (DeepSeek),
the sampler's temporary logits beyond the activation peak, NCCL's buffers (tens of MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.formats import ELEMENT_BYTES

# CUDA graphs' memory pools in a graph-capturing engine: vLLM logs "Graph capturing finished in N secs,
# took 0.2-1.5 GiB" for 7B-70B models at its default capture sizes; we take 0.5 GiB (an assumption
# from those logs, not a measurement of ours).
CUDA_GRAPH_BYTES = 512 * 2**20
WEIGHT_BITS = {"auto": 16, "int8": 8, "int4": 4, "mxfp4": 4}
MXFP4_SHARE = ELEMENT_BYTES["mxfp4"] / 2   # an MXFP4 expert weight's bytes per 16-bit byte
# Weight-only int8/int4: every linear weight's bytes per 16-bit byte (the GEMMs read them so).
WEIGHT_ONLY_SHARE = {w: WEIGHT_BITS[w] / 16 for w in ("int8", "int4")}
QUANT_GROUP = 128  # AWQ/GPTQ group size: one fp16 scale (and zero) per 128 weights of a row


@dataclass(frozen=True)
class ServingMemory:
    weights_bytes: int           # per rank
    kv_bytes_per_token: int      # per rank
    activation_bytes: int        # the largest iteration's peak, per rank
    non_torch_bytes: int         # CUDA context + graph pools
    budget_bytes: int            # what the engine may take on each GPU (paged engines)
    kv_cache_bytes: int          # per rank
    kv_cache_tokens: int         # tokens whose K/V fit (per sequence-independent pool)
    block_size: int
    state_bytes_per_sequence: int = 0   # per rank: a running sequence's linear-attention state
    state_blocks: int = 0               # the pool's blocks that state takes
    window_bytes_per_sequence: int = 0  # per rank: the most a running sequence's sliding windows hold
    draft_weight_bytes: int = 0         # per rank: a separate draft model's weights (speculative decoding)

    @property
    def fits(self) -> bool:
        return self.kv_cache_tokens > 0

    def to_dict(self) -> dict:
        return {"weights_bytes": self.weights_bytes, "kv_bytes_per_token": self.kv_bytes_per_token,
                "activation_bytes": self.activation_bytes, "non_torch_bytes": self.non_torch_bytes,
                "budget_bytes": self.budget_bytes, "kv_cache_bytes": self.kv_cache_bytes,
                "kv_cache_tokens": self.kv_cache_tokens, "state_bytes_per_sequence": self.state_bytes_per_sequence,
                **({"draft_weight_bytes": self.draft_weight_bytes} if self.draft_weight_bytes else {}),
                **({"window_bytes_per_sequence": self.window_bytes_per_sequence}
                   if self.window_bytes_per_sequence else {})}


def weight_bytes(parameter_bytes: int, parameters: int, tensor: int, weights: str, fp8_bytes: int = 0,
                 share: float = 0.5, expert_parameters: int = 0) -> int:
    """Per-rank weight bytes (module docstring); ``fp8_bytes``: the traced (16-bit) bytes of the weights an
    ``fp8`` or ``nvfp4`` job keeps quantised, ``share`` of a traced byte each (FP8 one byte a weight, NVFP4
    4.5 bits; all but the embedding and the head: the engines quantise the linear layers)."""
    bits = WEIGHT_BITS.get(weights or "auto", 16)
    if weights == "mxfp4":   # the experts only; the traced bytes per weight as they are for the rest
        per = parameter_bytes / max(1, parameters)
        return int((parameter_bytes - expert_parameters * per * (1 - MXFP4_SHARE)) / tensor)
    if bits == 16:
        return int((parameter_bytes - fp8_bytes * (1 - share)) / tensor)
    packed = parameters * bits / 8 + parameters / QUANT_GROUP * 2 * 2  # weights + fp16 scale and zero per group
    return int(packed / tensor)


def expert_bytes(parameter_bytes: int, parameters: int, expert_parameters: int, weights: str, share: float) -> float:
    """Bytes of the routed experts' weights as the checkpoint keeps them (``share``: a quantised
    precision's bytes per traced byte, 1 for none)."""
    scale = {**WEIGHT_ONLY_SHARE, "mxfp4": MXFP4_SHARE}.get(weights or "auto", share)
    return expert_parameters * parameter_bytes / max(1, parameters) * scale


def kv_per_rank(kv_bytes_per_token: int, kv_heads: int, tensor: int) -> int:
    """Per-rank KV bytes of one token: the KV heads split over the ranks, at least one head each."""
    per_head = kv_bytes_per_token / max(kv_heads, 1)
    return int(per_head * max(kv_heads / tensor, 1.0))


def windowed(kv_token_bytes: int, windows: list[int], attention_layers: int, block: int) -> tuple[int, int]:
    """(bytes per token of the full-attention layers, bytes a sequence's sliding-window layers hold) for a
    model whose attention layers' K/V take ``kv_token_bytes`` a token and whose layers have the windows
    ``windows`` (0: full attention or no attention): each sliding layer keeps ``window + block`` tokens at
    most. A model without full-attention layers, or without windows, keeps every token: ``(kv_token_bytes, 0)``."""
    sliding = [w for w in windows if w > 0]
    full = attention_layers - len(sliding)
    if not sliding or full <= 0:
        return kv_token_bytes, 0
    per_layer = kv_token_bytes / attention_layers
    return int(per_layer * full), int(per_layer * sum(w + block for w in sliding))


def window_groups(kv_token_bytes: int, windows: list[int], attention_layers: int,
                  block: int) -> list[tuple[int, float]]:
    """``(tokens held at most, bytes a token)`` of each window size's sliding layers (:func:`windowed`'s
    terms, a sequence at a time): the layers of a ``w``-token window hold ``min(tokens, w + block)`` of a
    sequence's tokens. Empty where :func:`windowed` keeps every token."""
    if not windowed(kv_token_bytes, windows, attention_layers, block)[1]:
        return []
    per_layer = kv_token_bytes / attention_layers
    sizes = sorted({w for w in windows if w > 0})
    return [(w + block, per_layer * sum(1 for x in windows if x == w)) for w in sizes]


def plan(memory_bytes: int, weights: int, kv_token: int, activations: int, context: int, engine,
         cuda_graphs: bool, state: int = 0, draft_weights: int = 0, windows: int = 0) -> ServingMemory:
    """The KV cache a rank of ``memory_bytes`` gets (module docstring); ``state``: a running sequence's
    linear-attention bytes; ``draft_weights``: a separate draft model's weights on the rank; ``windows``: the
    most a running sequence's sliding windows hold (reported; the run charges them by length)."""
    non_torch = context + (CUDA_GRAPH_BYTES if cuda_graphs else 0)
    if engine.gpu_memory_utilization is not None:
        budget = int(engine.gpu_memory_utilization * memory_bytes)
    else:
        budget = int(memory_bytes)
    free = budget - weights - draft_weights - activations - non_torch
    tokens = max(0, free // kv_token) if kv_token > 0 else 0
    tokens -= tokens % max(engine.block_size, 1)
    block = max(engine.block_size, 1) * kv_token
    state_blocks = -(-state // block) if state and block > 0 else 0
    return ServingMemory(weights, kv_token, activations, non_torch, budget, tokens * kv_token, int(tokens),
                         engine.block_size, state, state_blocks, window_bytes_per_sequence=windows,
                         draft_weight_bytes=draft_weights)
