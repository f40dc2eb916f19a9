"""Linear-attention layers (gated delta-nets, Kimi delta attention, Mamba-2) as engines run them: a state per sequence.

Qwen3-Next and Qwen3.5 (Hugging Face ``layer_types`` ``"linear_attention"``) interleave full-attention layers
with gated delta-net layers (Yang, Kautz and Hatamizadeh, "Gated Delta Networks", ICLR 2025). Such a layer
keeps, per sequence, a fixed-size **state**: a causal depthwise convolution's last ``K - 1`` inputs
(``conv_dim = 2 key_dim + value_dim`` channels, ``K = linear_conv_kernel_dim``) and a recurrent matrix of
``dk x dv`` per value head (``linear_num_value_heads``). Its work per token does not grow with the context.
vLLM, SGLang and TensorRT-LLM run the layer with flash-linear-attention's kernels (``fla``): a fused
causal-conv1d kernel, then ``chunk_gated_delta_rule`` for a prefill chunk or ``fused_recurrent_gated_delta_rule``
for a decode step, reading and writing the state in place (vLLM's ``mamba`` cache: one state slot per running
request). transformers' torch fallbacks (a Python loop over 64-token chunks, a repeat of the grouped K heads,
fp32 copies) are what a GPU runs without ``fla``, not what an engine runs, so a serving trace
(:mod:`gpucast.graph.serving`) replaces them, while :data:`ACTIVE` is set, by two custom ops of this module:

* ``gpucast::causal_conv1d(x, state, weight, cached)``: ``2 K`` FLOPs a channel and token; it reads the new
  tokens, the weights and (``cached``: the sequence has history) the conv state, and writes its output and the
  state. One kernel.
* ``gpucast::gated_delta_rule(q, k, v, g, beta, state, cached)``: a decode step (one token) costs
  :data:`RECURRENT_FLOPS` ``dk dv`` FLOPs a value head (decay the state, ``k^T S``, the delta update, ``q^T S``)
  in one kernel; a prefill chunk of ``T`` tokens fla's chunked WY form at chunk ``c = min(T, CHUNK)``, per token
  and value head ``6 c dk + 4 c dv + 6 dk dv + c^2`` FLOPs (:func:`chunk_flops`: ``beta K K^T`` and ``W`` at
  ``2 c dk`` each, ``U`` at ``2 c dv``, the intra-chunk ``Q K^T`` and ``A V_new`` at ``2 c (dk + dv)``, the
  triangular inverse ``~c^2``, the state pass ``V_new = U - W S`` and ``S += K^T V_new`` at ``4 dk dv`` and the
  inter-chunk output ``Q S`` at ``2 dk dv``) in :data:`CHUNK_KERNELS` kernels. Both read the state when
  ``cached`` and always write it (bytes at the state's dtype).

Kimi Linear (``kimi_linear``: three Kimi delta attention layers to one MLA layer; Kimi Team, "Kimi Linear", 2025)
keeps the same two states per layer: q, k and v each through a short causal conv (``3 x linear_num_heads x
linear_head_dim`` channels) and a ``linear_head_dim`` square matrix per head. KDA is a gated delta rule whose decay
is per channel rather than per head; fla's ``chunk_kda`` / ``fused_recurrent_kda`` kernels are costed as the gated
delta rule's (the per-channel decay's extra intra-chunk work is not modelled), recorded by the same ops.

Mamba-2 layers (Dao and Gu, "Transformers are SSMs", ICML 2024; Nemotron-H, IBM Granite-4 and Bamba:
``layer_types`` ``"linear_attention"`` beside ``full_attention``, and Nemotron-H's ``mlp`` and ``moe``
blocks) keep the conv state (``conv_dim = heads x head_dim + 2 groups x d_state``) and a
``head_dim x d_state`` state per head. The engines run mamba-ssm's kernels:
``causal_conv1d`` as above, then ``mamba_chunk_scan_combined`` for a prefill chunk or ``selective_state_update``
for a decode step, recorded as ``gpucast::ssd_scan(x, dt, B, C, state, chunk, cached)``: a decode step
:data:`SSD_DECODE_FLOPS` ``P N`` FLOPs a head (decay, ``B x`` outer product, ``C`` read-out), a chunk of ``T``
tokens at ``c = min(T, chunk)`` per token ``2 c P + 4 P N`` a head (the intra-chunk ``L o (C B^T) X`` and the
chunk's state in and out) plus ``2 c N`` a group (``C B^T``), in :data:`SSD_CHUNK_KERNELS` kernels. The SSM
state takes the config's ``mamba_ssm_cache_dtype`` (Nemotron-H's configs and model cards: float32), the conv
state the model's dtype.

The ops are of the ``attention`` category (the layer's token mixer): the serving estimator keeps them beside the
attention kernels, splits them over tensor-parallel ranks (vLLM shards the value and key heads), and does not
rescale them with the context as it does attention (:mod:`gpucast.estimate.serving.iteration`).

A gated delta-net's state, and a Mamba-2 conv state, take the model's dtype (vLLM's ``mamba_cache_dtype``
and ``mamba_ssm_cache_dtype`` default to ``auto``: the model dtype). :func:`state_bytes` is a sequence's
state over the model's linear layers.

**Training and plain forwards** (:func:`patch_model`, :data:`ACTIVE` ``"stateless"`` while a meta-device trace of
such a model runs its forward: :mod:`gpucast.graph.hf`) record the same fused ops with an empty state; their
backwards are :mod:`gpucast.graph.linear_attention_backward`'s (which :mod:`gpucast.graph.hf` imports).

Not modelled: other hybrids of Mamba-2 (Falcon-H1's parallel heads, Zamba-2's shared blocks), Mamba-1
(Jamba), lightning attention (MiniMax): refused; the transformers ``hf`` engine
(its eager torch fallback) for these models; prefix caching of states; the kernels' own efficiency (their
FLOPs run at the fused attention kernels' achieved rate, :mod:`gpucast.estimate.achieved`).
"""

from __future__ import annotations

import contextvars
import math
import sys

import torch
from torch.utils.flop_counter import register_flop_formula

from gpucast.graph import rules

# Model types whose "linear_attention" layers are gated delta-nets with transformers' kernel functions
# (causal_conv1d_forward, torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule in the model's module).
GATED_DELTA_NET = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
# Model types whose "linear_attention" layers are Kimi delta attention (KDA: a gated delta rule whose decay is
# per channel) with transformers' chunk_kimi_delta_attention and recurrent_kimi_delta_attention.
KIMI_DELTA = frozenset({"kimi_linear"})
# Model types whose "linear_attention" layers are Mamba-2 mixers with transformers' causal_conv1d_forward and
# mamba2_scan_forward (and whose other layers are full attention, MLP or MoE blocks).
MAMBA2 = frozenset({"nemotron_h", "granitemoehybrid", "bamba"})
LINEAR_LAYER = "linear_attention"
# Layer types that hold neither K/V nor a state (Nemotron-H's MLP and MoE blocks).
STATELESS_LAYERS = frozenset({"mlp", "moe"})
# flash-linear-attention's chunk length (fla/ops/gated_delta_rule/chunk.py: BT = 64), transformers' default too.
CHUNK = 64
# FLOPs a value head spends on one decode token per dk x dv state element: decay (1), k^T S (2), the
# outer-product update (2), q^T S (2) (fused_recurrent_gated_delta_rule's loop body).
RECURRENT_FLOPS = 7
# Kernels of fla's chunk_gated_delta_rule_fwd: l2norm of q and k (use_qk_l2norm_in_kernel), chunk_local_cumsum,
# chunk_scaled_dot_kkt_fwd, solve_tril, recompute_w_u_fwd, chunk_gated_delta_rule_fwd_h, chunk_fwd_o.
CHUNK_KERNELS = 8
# mamba-ssm's selective_state_update per head_dim x d_state element: decay (1), dt B x (2), C . state (2).
SSD_DECODE_FLOPS = 5
# mamba_chunk_scan_combined's kernels: chunk_cumsum, chunk_state, state_passing, bmm_chunk (C B^T), chunk_scan.
SSD_CHUNK_KERNELS = 5

# Set (to "fresh": no history, or "cached") while a serving trace runs its paged forward, and to STATELESS while
# a meta-device training (or plain) trace runs its forward: the patched kernel functions record this module's ops
# instead of transformers' fallbacks.
ACTIVE: contextvars.ContextVar[str | None] = contextvars.ContextVar("gpucast_linear_attention", default=None)
STATELESS = "stateless"   # a training (or plain) forward: the fused kernels with no cache (module docstring)

_LIB = torch.library.Library("gpucast", "FRAGMENT")
_LIB.define("causal_conv1d(Tensor x, Tensor state, Tensor weight, bool cached) -> Tensor")
_LIB.define("gated_delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor state, bool cached) "
            "-> Tensor")
_LIB.define("ssd_scan(Tensor x, Tensor dt, Tensor B, Tensor C, Tensor state, int chunk, bool cached) -> Tensor")


@torch.library.register_fake("gpucast::causal_conv1d")
def _conv_fake(x, state, weight, cached):
    return x.new_empty(x.shape)


@torch.library.register_fake("gpucast::gated_delta_rule")
def _rule_fake(q, k, v, g, beta, state, cached):
    return v.new_empty(v.shape)


@torch.library.register_fake("gpucast::ssd_scan")
def _ssd_fake(x, dt, B, C, state, chunk, cached):
    return x.new_empty(x.shape)


causal_conv1d = torch.ops.gpucast.causal_conv1d
gated_delta_rule = torch.ops.gpucast.gated_delta_rule
ssd_scan = torch.ops.gpucast.ssd_scan
OPS = frozenset({"causal_conv1d", "gated_delta_rule", "ssd_scan"})   # the forwards a serving iteration runs


def chunk_flops(tokens: int, dk: int, dv: int) -> int:
    """FLOPs per token and value head of fla's chunked gated delta rule over ``tokens`` tokens (module docstring)."""
    c = min(tokens, CHUNK)
    return 6 * c * dk + 4 * c * dv + 6 * dk * dv + c * c


@register_flop_formula(causal_conv1d)
def conv_flops(x_shape, state_shape, weight_shape, cached, out_shape=None, **kwargs) -> int:
    return 2 * math.prod(x_shape) * weight_shape[-1]


@register_flop_formula(gated_delta_rule)
def _rule_flop(q_shape, k_shape, v_shape, g_shape, beta_shape, state_shape, cached, out_shape=None, **kwargs) -> int:
    batch, tokens, heads, dv = v_shape
    dk = q_shape[-1]
    if tokens == 1:
        return RECURRENT_FLOPS * batch * heads * dk * dv
    return batch * tokens * heads * chunk_flops(tokens, dk, dv)


@register_flop_formula(ssd_scan)
def ssd_flops(x_shape, dt_shape, b_shape, c_shape, state_shape, chunk, cached, out_shape=None, **kwargs) -> int:
    batch, tokens, heads, p = x_shape
    groups, n = b_shape[-2], b_shape[-1]
    if tokens == 1:
        return SSD_DECODE_FLOPS * batch * heads * p * n
    c = min(tokens, chunk)
    return batch * tokens * (heads * (2 * c * p + 4 * p * n) + groups * 2 * c * n)


rules.category_rule("attention", causal_conv1d, gated_delta_rule, ssd_scan)


@rules.bytes_rule(causal_conv1d, gated_delta_rule, ssd_scan)
def _state_bytes(args, kwargs, out):
    """Reads every input but the state unless ``cached``; writes the output and the state (in place)."""
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    state, cached = tensors[-1], args[-1]
    inputs = tensors[:-1] + ([state] if cached else [])
    return sum(map(rules.effective_bytes, inputs)), rules.effective_bytes(out) + rules.effective_bytes(state)


@rules.kernels_rule("gated_delta_rule", "ssd_scan")
def _rule_kernels(name, args) -> int:
    if args[0].shape[1] == 1:
        return 1
    return CHUNK_KERNELS if name == "gated_delta_rule" else SSD_CHUNK_KERNELS



# --------------------------------------------------------------------------- the model's shapes
def dims(cfg) -> dict | None:
    """The linear layers of a transformers config: ``{'layers': [indices], 'conv': (channels, K - 1),
    'state': (value heads, dk, dv)}``; None when it has none. Raises ValueError for linear layers of a kind
    not modelled."""
    types = list(getattr(cfg, "layer_types", None) or ())
    layers = [i for i, t in enumerate(types) if t == LINEAR_LAYER]
    if not layers:
        return None
    if cfg.model_type in MAMBA2:   # Nemotron-H's field names, else Granite-4's and Bamba's
        heads, p, n, groups, kernel = (int(_field(cfg, *names)) for names in (
            ("mamba_num_heads", "mamba_n_heads"), ("mamba_head_dim", "mamba_d_head"),
            ("ssm_state_size", "mamba_d_state"),
            ("n_groups", "mamba_n_groups"), ("conv_kernel", "mamba_d_conv")))
        return {"kind": "mamba2", "layers": layers, "conv": (heads * p + 2 * groups * n, kernel - 1),
                "state": (heads, p, n), "state_bytes": _ssm_bytes(cfg)}
    if cfg.model_type in KIMI_DELTA:   # q, k and v of linear_head_dim per head, each through its own short conv
        heads, d = int(cfg.linear_num_heads), int(cfg.linear_head_dim)
        return {"kind": "kimi_delta", "layers": layers, "conv": (3 * heads * d, int(cfg.linear_conv_kernel_dim) - 1),
                "state": (heads, d, d), "state_bytes": _ssm_bytes(cfg)}
    if cfg.model_type not in GATED_DELTA_NET:
        raise ValueError(f"the linear-attention layers of {cfg.model_type!r} are not modelled (gated delta-nets, "
                         f"Kimi delta attention and Mamba-2 only: "
                         f"{', '.join(sorted(GATED_DELTA_NET | KIMI_DELTA | MAMBA2))})")
    dk, dv = int(cfg.linear_key_head_dim), int(cfg.linear_value_head_dim)
    hk, hv = int(cfg.linear_num_key_heads), int(cfg.linear_num_value_heads)
    return {"kind": "gated_delta_net", "layers": layers,
            "conv": (2 * hk * dk + hv * dv, int(cfg.linear_conv_kernel_dim) - 1), "state": (hv, dk, dv),
            "state_bytes": None}


def _ssm_bytes(cfg) -> int | None:
    """Bytes an element of the recurrent state as the config's ``mamba_ssm_cache_dtype`` names it; None: the cache's."""
    return {"float32": 4, "float16": 2, "bfloat16": 2}.get(str(getattr(cfg, "mamba_ssm_cache_dtype", "")))


def _field(cfg, *names):
    return next(getattr(cfg, n) for n in names if getattr(cfg, n, None) is not None)


def state_bytes(linear: dict | None, element_bytes: float) -> int:
    """Bytes of one sequence's state over every linear layer: the conv state at ``element_bytes``, the
    recurrent one at its own dtype where the config names one (Mamba-2's ``mamba_ssm_cache_dtype``)."""
    if not linear:
        return 0
    per_layer = (math.prod(linear["conv"]) * element_bytes
                 + math.prod(linear["state"]) * (linear.get("state_bytes") or element_bytes))
    return int(len(linear["layers"]) * per_layer)


def state_dtype(linear: dict, dtype: torch.dtype) -> torch.dtype:
    """The recurrent state's dtype in a trace (the cache's, or the config's ``mamba_ssm_cache_dtype``)."""
    return torch.float32 if linear.get("state_bytes") == 4 else dtype


# --------------------------------------------------------------------------- the kernels a trace records
_FUNCTIONS = {"kimi_delta": ("causal_conv1d_forward", "chunk_kimi_delta_attention", "recurrent_kimi_delta_attention"),
              "gated_delta_net": ("causal_conv1d_forward", "torch_chunk_gated_delta_rule",
                                   "torch_recurrent_gated_delta_rule"),
              "mamba2": ("causal_conv1d_forward", "mamba2_scan_forward")}


def kind_of(cfg) -> str | None:
    """``gated_delta_net``, ``kimi_delta`` or ``mamba2`` for a config whose linear-attention layers this module
    runs; None otherwise."""
    t = getattr(cfg, "model_type", None)
    return ("gated_delta_net" if t in GATED_DELTA_NET else "kimi_delta" if t in KIMI_DELTA
            else "mamba2" if t in MAMBA2 else None)


def patch_model(model, kind: str | None = None) -> bool:
    """Route the linear-attention kernel functions of a built transformers ``model`` (``kind``, else its config's:
    :func:`kind_of`) through this module's ops (:func:`patch`); False when it has no mixer of that kind."""
    kind = kind or kind_of(getattr(model, "config", None))
    if kind is None:
        return False
    mixer = {"gated_delta_net": lambda x: type(x).__name__.endswith("GatedDeltaNet"),
             "kimi_delta": lambda x: type(x).__name__.endswith("DeltaAttention"),
             "mamba2": lambda x: hasattr(x, "ssm_state_size") and hasattr(x, "conv1d")}[kind]   # Mamba-2: any model
    module = next((type(x).__module__ for x in model.modules() if mixer(x)), None)
    if module is None:
        return False
    patch(module, kind)
    return True


def patch(module_name: str, kind: str) -> None:
    """Route a transformers modeling module's linear-attention kernel functions (``kind``: gated_delta_net or
    mamba2) through this module's ops while :data:`ACTIVE` is set (the originals otherwise). Idempotent."""
    mod = sys.modules[module_name]
    if getattr(mod, "_gpucast_linear_attention", False):
        return
    for name in _FUNCTIONS[kind]:
        if not callable(getattr(mod, name, None)):
            raise ValueError(f"{module_name} has no {name}: this transformers release's {kind} layer is not "
                             f"modelled")
    wrappers = {"causal_conv1d_forward": _conv, "torch_chunk_gated_delta_rule": _rule,
                "torch_recurrent_gated_delta_rule": _rule, "chunk_kimi_delta_attention": _rule,
                "recurrent_kimi_delta_attention": _rule, "mamba2_scan_forward": _scan}
    for name in _FUNCTIONS[kind]:
        setattr(mod, name, wrappers[name](getattr(mod, name)))
    mod._gpucast_linear_attention = True


def _conv(orig):
    """``causal_conv1d_forward`` as :data:`ACTIVE` asks: the conv state read from the layer's cache (none when
    ``"stateless"``)."""
    def forward(conv1d, hidden_states, cache, layer_idx, *args, **kwargs):
        mode = ACTIVE.get()
        if mode is None:
            return orig(conv1d, hidden_states, cache, layer_idx, *args, **kwargs)
        state = hidden_states.new_empty(0) if mode == STATELESS else cache.layers[layer_idx].conv_states[0]
        return causal_conv1d(hidden_states, state, conv1d.weight.squeeze(1), mode == "cached")
    return forward


def _rule(orig):
    """A chunked or recurrent gated delta rule as :data:`ACTIVE` asks (the state updated in place, as fla's
    kernels update an initial state; none when ``"stateless"``)."""
    def run(query, key, value, g, beta, *args, initial_state=None, **kwargs):
        mode = ACTIVE.get()
        if mode == STATELESS:   # the kernel writes a final state only when asked (a forward that keeps a cache)
            b, _, h, dv = value.shape
            final = value.new_empty(b, h, query.shape[-1], dv) if kwargs.get("output_final_state") else None
            return gated_delta_rule(query, key, value, g, beta, value.new_empty(0), False), final
        if mode is None or initial_state is None:
            return orig(query, key, value, g, beta, *args, initial_state=initial_state, **kwargs)
        return gated_delta_rule(query, key, value, g, beta, initial_state, mode == "cached"), initial_state
    return run


def _scan(orig):
    """``mamba2_scan_forward`` as :data:`ACTIVE` asks: the SSM state read from the layer's cache (none when
    ``"stateless"``)."""
    def forward(module, hidden_states, B, C, dt, cache, **kwargs):
        mode = ACTIVE.get()
        if mode is None or (cache is None and mode != STATELESS):
            return orig(module, hidden_states, B, C, dt, cache, **kwargs)
        b, t = hidden_states.shape[:2]
        state = (hidden_states.new_empty(0) if mode == STATELESS
                 else cache.layers[module.layer_idx].recurrent_states[0])
        y = ssd_scan(hidden_states.view(b, t, module.num_heads, module.head_dim), dt,
                     B.view(b, t, module.n_groups, module.ssm_state_size),
                     C.view(b, t, module.n_groups, module.ssm_state_size), state, int(module.chunk_size),
                     mode == "cached")
        return y.view(b, t, -1)
    return forward
