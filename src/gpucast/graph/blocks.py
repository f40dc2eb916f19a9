"""Which repeated block (a transformer's layer) each op of a captured step belongs to.

Tensor and pipeline parallelism act on a model's repeated blocks: TP splits each block's matmuls,
PP gives each stage a run of blocks, the first stage the embeddings and the last the head. The
capture stays one replica's graph; this module marks where each op ran so that
:mod:`gpucast.estimate.parallel` can turn the trace into per-rank work without building the
model again.

* The blocks are the children of the ``nn.ModuleList``/``nn.Sequential`` whose children are all
  of one class (at least two) and which holds the most parameters, if that is at least half of
  the model's (:data:`MIN_BLOCK_SHARE`): a transformer's layers. A model without such a list has no
  layout (TP and PP are refused for it).
* Forward: a pre-hook on block *i* marks the ops that follow as block *i*; its post-hook marks
  them :data:`POST` (after the last block: final norm, head, loss). Ops before the first block are
  :data:`PRE` (embeddings).
* Backward: the autograd engine runs the blocks in reverse. A hook on a block's output tensor
  fires when the gradient reaching that block is complete (its backward starts); a hook on its
  input fires when the block's backward is done. Ops of the backward are marked accordingly:
  the head's backward is ``POST``, the embeddings' ``PRE``.
* Parameters and buffers outside the blocks are placed where their module runs: ``PRE`` or
  ``POST`` (a tied embedding used by the head counts in both, as pipeline stages each keep a
  copy, Megatron-LM's ``shared_embedding``).
* Activations live when backward starts are summed by where they were made, and, inside the
  blocks, by whether tensor parallelism shards them (a tensor whose last dimension is the hidden
  size is the replicated residual stream; the others are split with the heads or the MLP's
  columns) and whether they belong to the attention core (the ``s x s`` scores, their softmax and
  dropout: what selective recomputation drops, Korthikanti et al. 2022).

* Recompute modules: the ops a block's forward runs inside its dense MLP (``mlp``), its
  mixture-of-experts layer (``moe``), the experts' activation (``moe_act``), its norms
  (``layernorm``: the block's own, before attention and MLP), MLA's up-projections
  (``mla_up_proj``: ``q_b_proj``, ``kv_b_proj``) and the shared experts (``shared_experts``) are
  tagged with those roles (:func:`module_tags`; ``OpRecord.module`` holds them, joined by ``|``),
  and the activations they saved are summed per role (``module:<role>:sharded`` and
  ``...:replicated``): Megatron-Core's selective recompute of named modules drops them
  (:mod:`gpucast.estimate.parallel.activations`).
* Mixture-of-experts layers: the routed experts' parameters of each block (those under a module
  named ``experts``, as transformers names the stacked experts of Mixtral, Qwen-MoE, DeepSeek and
  GPT-OSS; a shared expert is not routed and is not counted), with the experts' number and top-k
  from the model's config (:func:`experts_of`): expert parallelism places them apart from the
  rest of the block (:mod:`gpucast.estimate.parallel.experts`).

Not modelled: blocks of different sizes in one list (the layout averages them), models whose
repeated blocks are nested in several lists (encoder-decoder: the larger list is used), blocks
called more than once per step.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from functools import partial

import torch

PRE, POST = -1, -2
# Megatron-Core's selective-recompute modules (--recompute-modules; TransformerConfig.recompute_modules):
# the attention core, and the parts of a block :func:`module_tags` finds by their role.
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts")
# A list of same-class modules must hold at least this share of the parameters to be the blocks.
MIN_BLOCK_SHARE = 0.5


@dataclass
class BlockLayout:
    """The repeated blocks of a captured model and what lies outside them."""

    blocks: int
    hidden: int                      # last dimension of a block's input (the residual stream)
    tokens: int                      # positions per sample in a block's input (sequence length), 1 if none
    heads: int | None                # attention heads (None: not found)
    kv_heads: int | None
    block_param_bytes: list[int]     # parameters and buffers of each block
    block_params: list[int]          # parameter elements of each block
    block_trainable: list[int]       # trainable elements of each block
    outer_param_bytes: dict[str, int]  # "pre"/"post" -> bytes (a tied tensor counted in both), "shared": tied
    outer_params: dict[str, int]
    outer_trainable: dict[str, int]
    block_input_bytes: int = 0       # one block's input tensor (what full recomputation keeps)
    activations: dict[str, int] = field(default_factory=dict)  # live at backward start, by region
    experts: int = 0                 # routed experts of a mixture-of-experts layer (0: a dense model)
    experts_per_token: int = 0       # experts each token is routed to (top-k)
    block_expert_params: list[int] = field(default_factory=list)     # routed experts' elements of each block
    block_expert_trainable: list[int] = field(default_factory=list)
    routing_groups: tuple[int, int] = (0, 0)  # (expert groups, groups a token may use): DeepSeek's n_group, topk_group
    mtp_layers: int = 0              # the config's multi-token-prediction depths (num_nextn_predict_layers)

    @property
    def moe_blocks(self) -> list[int]:
        """Indices of the blocks with routed experts (a DeepSeek model's first layers are dense)."""
        return [i for i, n in enumerate(self.block_expert_params) if n > 0]

    @property
    def params(self) -> int:
        return sum(self.block_params)


def find_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks (module docstring), or [] when it has none."""
    total = sum(p.numel() for p in model.parameters()) or 1
    best, best_size = [], 0
    for m in model.modules():
        if not isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        kids = list(m.children())
        if len(kids) < 2 or any(type(k) is not type(kids[0]) for k in kids):
            continue
        size = sum(p.numel() for p in m.parameters())
        if size > best_size:
            best, best_size = kids, size
    return best if best_size >= MIN_BLOCK_SHARE * total else []


def _first_tensor(obj):
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (tuple, list)):
        for o in obj:
            if isinstance(o, torch.Tensor):
                return o
    if isinstance(obj, dict):
        return _first_tensor(list(obj.values()))
    return getattr(obj, "last_hidden_state", None) if obj is not None else None


class BlockWatch:
    """Hooks that keep ``recorder.block`` on the block being run (module docstring)."""

    def __init__(self, recorder, model: torch.nn.Module, blocks: list[torch.nn.Module]) -> None:
        self.rec = recorder
        self.blocks = blocks
        self.hidden = 0
        self.tokens = 1
        self.input_bytes = 0
        self._handles = []
        self._outer: dict[str, dict[int, torch.Tensor]] = {"pre": {}, "post": {}}
        in_blocks = {id(m) for b in blocks for m in b.modules()}
        for i, b in enumerate(blocks):
            self._handles.append(b.register_forward_pre_hook(partial(self._pre, i), with_kwargs=True))
            self._handles.append(b.register_forward_hook(partial(self._post, i)))
            for m, tag in module_tags(b):
                self._handles.append(m.register_forward_pre_hook(partial(self._enter, tag)))
                self._handles.append(m.register_forward_hook(partial(self._leave, tag)))
        for m in model.modules():
            if id(m) not in in_blocks and (any(True for _ in m.parameters(recurse=False))
                                           or any(True for _ in m.buffers(recurse=False))):
                self._handles.append(m.register_forward_pre_hook(self._outer_module))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()

    def _enter(self, tag, module, args):
        if self.rec.phase in ("fwd", "loss"):
            self.rec.tags.append(tag)
        return None

    def _leave(self, tag, module, args, out):
        if self.rec.phase in ("fwd", "loss") and self.rec.tags and self.rec.tags[-1] == tag:
            self.rec.tags.pop()
        return None

    def _pre(self, i, module, args, kwargs):
        if self.rec.phase not in ("fwd", "loss"):
            return None
        self.rec.block = i
        x = _first_tensor(args) if args else None
        if x is None:
            x = _first_tensor(kwargs.get("hidden_states", kwargs))
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            if not self.hidden:
                self.hidden = int(x.shape[-1])
                self.tokens = int(x.shape[-2]) if x.dim() >= 3 else 1
                self.input_bytes = x.numel() * x.element_size()
            if x.requires_grad:
                x.register_hook(partial(self._grad_in, i))
        return None

    def _post(self, i, module, args, out):
        if self.rec.phase not in ("fwd", "loss"):
            return None
        self.rec.block = POST
        y = _first_tensor(out)
        if isinstance(y, torch.Tensor) and y.requires_grad:
            y.register_hook(partial(self._grad_out, i))
        return None

    def _grad_out(self, i, grad):
        self.rec.block = i

    def _grad_in(self, i, grad):
        if self.rec.block == i:
            self.rec.block = PRE

    def _outer_module(self, module, args):
        if self.rec.phase not in ("fwd", "loss"):
            return None
        where = "pre" if self.rec.block == PRE else "post"
        for t in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            self._outer[where][id(t)] = t
        return None

    def layout(self, model: torch.nn.Module, heads: tuple[int | None, int | None]) -> BlockLayout:
        def nbytes(ts):
            return sum(t.numel() * t.element_size() for t in ts)

        in_blocks = {id(t) for b in self.blocks for t in list(b.parameters()) + list(b.buffers())}
        placed = set(self._outer["pre"]) | set(self._outer["post"])
        for t in list(model.parameters()) + list(model.buffers()):  # never run: kept with the embeddings
            if id(t) not in in_blocks and id(t) not in placed:
                self._outer["pre"][id(t)] = t
        shared = {i: t for i, t in self._outer["pre"].items() if i in self._outer["post"]}  # tied: on both ends
        outer = {**self._outer, "shared": shared}
        outer_params = {k: [t for t in v.values() if isinstance(t, torch.nn.Parameter)] for k, v in outer.items()}
        experts, top_k = experts_of(model)

        def routed(b, trainable_only: bool) -> int:
            if not experts:
                return 0
            return sum(p.numel() for name, p in b.named_parameters()
                       if "experts" in name.split(".") and (p.requires_grad or not trainable_only))

        return BlockLayout(
            experts=experts, experts_per_token=top_k, routing_groups=routing_groups_of(model) if experts else (0, 0),
            mtp_layers=mtp_layers_of(model),
            block_expert_params=[routed(b, False) for b in self.blocks],
            block_expert_trainable=[routed(b, True) for b in self.blocks],
            blocks=len(self.blocks), hidden=self.hidden, tokens=self.tokens, heads=heads[0], kv_heads=heads[1],
            block_param_bytes=[nbytes(list(b.parameters()) + list(b.buffers())) for b in self.blocks],
            block_params=[sum(p.numel() for p in b.parameters()) for b in self.blocks],
            block_trainable=[sum(p.numel() for p in b.parameters() if p.requires_grad) for b in self.blocks],
            outer_param_bytes={k: nbytes(v.values()) for k, v in outer.items()},
            outer_params={k: sum(p.numel() for p in v) for k, v in outer_params.items()},
            outer_trainable={k: sum(p.numel() for p in v if p.requires_grad) for k, v in outer_params.items()},
            block_input_bytes=self.input_bytes,
        )


def _is_norm(m: torch.nn.Module) -> bool:
    return isinstance(m, torch.nn.LayerNorm) or type(m).__name__.endswith(("RMSNorm", "LayerNorm"))


def module_tags(block: torch.nn.Module) -> list[tuple[torch.nn.Module, str]]:
    """(module, role) of the parts of ``block`` Megatron-Core's ``--recompute-modules`` names (module
    docstring): by attribute name and what the module holds, for the transformers model files."""
    out = []
    for name, m in block.named_children():
        if _is_norm(m):
            out.append((m, "layernorm"))
        elif name in ("mlp", "feed_forward", "block_sparse_moe", "ffn"):
            experts = dict(m.named_children()).get("experts")
            if experts is None:
                out.append((m, "mlp"))
                continue
            out.append((m, "moe"))
            act = getattr(experts, "act_fn", None)
            if isinstance(act, torch.nn.Module):
                out.append((act, "moe_act"))
            for shared in ("shared_experts", "shared_expert"):
                if isinstance(getattr(m, shared, None), torch.nn.Module):
                    out.append((getattr(m, shared), "shared_experts"))
    for name, m in block.named_modules():
        if name.rsplit(".", 1)[-1] in ("q_b_proj", "kv_b_proj"):
            out.append((m, "mla_up_proj"))
    return out


def _config_of(model):
    """The Hugging Face config of ``model`` (a module holding one, or the config itself), or None."""
    if not isinstance(model, torch.nn.Module):
        return model
    return next((m.config for m in model.modules() if getattr(m, "config", None) is not None), None)


def experts_of(model) -> tuple[int, int]:
    """(routed experts, experts per token) of a mixture-of-experts model from its Hugging Face
    config (``num_local_experts``: Mixtral, GPT-OSS; ``num_experts``: Qwen-MoE; ``n_routed_experts``:
    DeepSeek), or (0, 0) for a dense model. ``model``: a module or a config."""
    cfg = _config_of(model)
    experts = 0
    for n in ("num_local_experts", "num_experts", "n_routed_experts"):
        v = getattr(cfg, n, None) if cfg is not None else None
        if isinstance(v, int) and v > 0:
            experts = v
            break
    top_k = getattr(cfg, "num_experts_per_tok", None) if experts else None
    return experts, int(top_k) if isinstance(top_k, int) and top_k > 0 else (1 if experts else 0)


def mtp_layers_of(model) -> int:
    """The multi-token-prediction depths a config declares (DeepSeek-V3's ``num_nextn_predict_layers``); 0 if none.
    transformers' model files do not build them; a Megatron-Core plan runs them (``parallel.mtp_layers``)."""
    cfg = _config_of(model)
    n = getattr(cfg, "num_nextn_predict_layers", None) if cfg is not None else None
    return n if isinstance(n, int) and n > 0 else 0


def routing_groups_of(model) -> tuple[int, int]:
    """DeepSeek's group-limited routing from the config: (``n_group``, ``topk_group``), the experts
    cut into groups and each token's experts drawn from that many of them; (0, 0) when unlimited."""
    cfg = _config_of(model)
    n, k = getattr(cfg, "n_group", None), getattr(cfg, "topk_group", None)
    ok = isinstance(n, int) and isinstance(k, int) and 0 < k < n
    return (n, k) if ok else (0, 0)


def heads_of(model: torch.nn.Module) -> tuple[int | None, int | None]:
    """Attention heads and key/value heads from a Hugging Face config or the attention modules."""
    cfg = _config_of(model)
    for n in ("num_attention_heads", "n_head", "n_heads", "num_heads"):
        v = getattr(cfg, n, None) if cfg is not None else None
        if isinstance(v, int) and v > 0:
            kv = getattr(cfg, "num_key_value_heads", None)
            return v, kv if isinstance(kv, int) and kv > 0 else v
    for m in model.modules():
        for n in ("num_heads", "num_attention_heads", "n_heads"):
            v = getattr(m, n, None)
            if isinstance(v, int) and v > 0:
                return v, v
    return None, None


def is_sharded(op, hidden: int) -> bool:
    """Whether tensor parallelism splits this op's work: matmuls and attention always (column- and
    row-parallel layers, heads); other ops unless their output is the replicated residual stream
    (last dimension = the hidden size: norms, residual adds, dropout after a row-parallel layer).
    The attention core's ``s x s`` tensors are split with the heads whatever ``s`` is."""
    if op.category in ("matmul", "attention") or is_attention_core(op):
        return True
    out = op.out_shapes[0] if op.out_shapes else ()
    return not (out and out[-1] == hidden)


def is_attention_core(op) -> bool:
    """The attention core (what selective recomputation recomputes): fused attention kernels, or
    ops on ``s x s`` score tensors (4-D, last two dimensions equal and > 1)."""
    if op.category == "attention":
        return True
    out = op.out_shapes[0] if op.out_shapes else ()
    return len(out) == 4 and out[-1] == out[-2] and out[-1] > 1


def activation_regions(live: list[tuple[int, int]], ops, hidden: int) -> dict[str, int]:
    """Bytes of activations live at backward start, by region: ``pre``, ``post``, and inside the
    blocks ``sharded`` / ``replicated`` (``attention_core`` is the part of ``sharded`` that
    selective recomputation drops). ``live``: (rounded bytes, index of the op that made it)."""
    out = dict.fromkeys(("pre", "post", "sharded", "replicated", "attention_core"), 0)
    for size, start in live:
        if start < 0 or start >= len(ops):
            out["pre"] += size
            continue
        op = ops[start]
        if op.block == PRE:
            out["pre"] += size
        elif op.block == POST:
            out["post"] += size
        else:
            part = "sharded" if is_sharded(op, hidden) else "replicated"
            out[part] += size
            if part == "sharded" and is_attention_core(op):
                out["attention_core"] += size
            for tag in set(op.module.split("|")) if op.module else ():
                key = f"module:{tag}:{part}"
                out[key] = out.get(key, 0) + size
    return out


@contextlib.contextmanager
def tagged(rec, tag: str):
    """The ops ``rec`` (the tracer's recorder) records inside carry ``tag`` among their roles
    (``OpRecord.module``), as a block's modules tag theirs (:class:`BlockWatch`)."""
    rec.tags.append(tag)
    try:
        yield
    finally:
        if rec.tags and rec.tags[-1] == tag:
            rec.tags.pop()
