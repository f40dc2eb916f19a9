"""Per-op cost rules: FLOPs, bytes moved, kernels launched, and the op's category.

FLOPs come from ``torch.utils.flop_counter.flop_registry`` (matmul, conv, attention; else 0), plus formulas
gpucast registers there for ops it lacks (``_grouped_mm`` below, cuDNN RNNs, NF4 dequantize), less what the
kernels skip: a grouped convolution's weight gradient, and the share :func:`flop_share_rule` registers
(a causal attention's half, :mod:`gpucast.graph.causal`).

One module of this size because its tables (categories, FLOP shares, bytes, kernels) are the one registry every
capture consults, each open to the modules above it; split, every rule module would import the others.

Bytes: by default an op reads every tensor argument and writes every tensor output once
(``effective_bytes``: broadcast dims with stride 0 are read once). Rules registered with
:func:`bytes_rule` override that for ops that touch only part of an argument (gathers,
embedding lookups, fills). Like flop_counter's registry, the table is open: register a
rule for a custom op with the decorator.

Kernels: views, allocations and metadata launch nothing; ops on host (CPU) tensors launch
nothing on the GPU; ``_foreach_*`` ops launch ``multi_tensor_apply`` chunks
(:func:`foreach_kernels`); a few ops launch more than one kernel (``KERNELS_PER_OP``), and
ops whose count depends on their arguments have a rule registered with :func:`kernels_rule`
(cuDNN's RNN calls, by :mod:`gpucast.graph.rnn`); everything else launches one.

Categories name what kind of work an op is (matmul, conv, attention, norm, softmax,
elementwise, reduction, pool, embedding, loss, copy, memory, optimizer, rnn, view, host);
ops outside aten's names (custom ops, such as the NF4 dequantize ops of
:mod:`gpucast.graph.nf4`) get theirs with :func:`category_rule`, their FLOPs with flop_counter's
``register_flop_formula`` and, where the default does not fit, their bytes with
:func:`bytes_rule`. An op that is in neither the FLOP registry nor a category table is
*uncosted*: it keeps the default cost above and is reported, never dropped.

Not modelled: cache reuse between ops (L2 hits), tiling re-reads inside a GEMM, kernels a
library may add for workspace or split-K reduction.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch.utils.flop_counter import flop_registry, register_flop_formula

aten = torch.ops.aten

# --------------------------------------------------------------------------- categories
# Op-name prefixes (overload packet names without "aten.") -> category. Checked in order.
_CATEGORY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("_foreach_", "optimizer"), ("_fused_adam", "optimizer"), ("_fused_sgd", "optimizer"),
    ("_scaled_dot_product", "attention"), ("_flash_attention", "attention"),
    ("_efficient_attention", "attention"),
    ("convolution", "conv"), ("_convolution", "conv"), ("cudnn_convolution", "conv"),
    ("_slow_conv2d", "conv"), ("conv_", "conv"), ("_conv_depthwise", "conv"),
    ("_cudnn_rnn", "rnn"), ("_thnn_fused_lstm", "rnn"), ("_thnn_fused_gru", "rnn"),
    ("native_batch_norm", "norm"), ("_native_batch_norm", "norm"), ("cudnn_batch_norm", "norm"),
    ("batch_norm", "norm"), ("native_layer_norm", "norm"), ("native_group_norm", "norm"),
    ("_fused_rms_norm", "norm"), ("rms_norm", "norm"), ("_batch_norm", "norm"),
    ("_softmax", "softmax"), ("_log_softmax", "softmax"), ("softmax", "softmax"),
    ("nll_loss", "loss"), ("binary_cross_entropy", "loss"), ("mse_loss", "loss"),
    ("smooth_l1_loss", "loss"), ("huber_loss", "loss"), ("l1_loss", "loss"),
    ("max_pool", "pool"), ("avg_pool", "pool"), ("adaptive_avg_pool", "pool"),
    ("_adaptive_avg_pool", "pool"), ("adaptive_max_pool", "pool"), ("upsample", "pool"),
    ("embedding", "embedding"), ("_embedding_bag", "embedding"),
    ("index_select", "embedding"), ("gather", "embedding"), ("scatter", "embedding"),
    ("index_add", "embedding"), ("index_put", "embedding"), ("_index_put", "embedding"),
    ("index", "embedding"), ("_unsafe_index", "embedding"), ("masked_fill", "elementwise"),
    ("sum", "reduction"), ("mean", "reduction"), ("amax", "reduction"), ("amin", "reduction"),
    ("max", "reduction"), ("min", "reduction"), ("argmax", "reduction"), ("argmin", "reduction"),
    ("var", "reduction"), ("std", "reduction"), ("norm", "reduction"), ("linalg_vector_norm", "reduction"),
    ("prod", "reduction"), ("cumsum", "reduction"), ("logsumexp", "reduction"), ("topk", "reduction"),
    ("sort", "reduction"), ("any", "reduction"), ("all", "reduction"), ("_local_scalar_dense", "host"),
    ("histc", "reduction"), ("_record_function", "host"), ("slice_backward", "copy"), ("select_backward", "copy"),
    ("index_put", "embedding"), ("masked_scatter", "copy"), ("nonzero", "reduction"),
    ("copy_", "copy"), ("_to_copy", "copy"), ("clone", "copy"), ("cat", "copy"), ("stack", "copy"),
    ("_pin_memory", "copy"), ("constant_pad_nd", "copy"), ("roll", "copy"), ("flip", "copy"),
    ("repeat", "copy"), ("tril", "copy"), ("triu", "copy"), ("contiguous", "copy"),
    ("reflection_pad", "copy"), ("replication_pad", "copy"), ("eye", "memory"),
    ("zeros", "memory"), ("ones", "memory"), ("full", "memory"), ("fill", "memory"), ("zero_", "memory"),
    ("scalar_tensor", "memory"), ("arange", "memory"), ("new_zeros", "memory"), ("new_ones", "memory"),
    ("new_full", "memory"), ("rand", "memory"), ("normal", "memory"), ("uniform", "memory"),
    ("bernoulli", "elementwise"), ("native_dropout", "elementwise"), ("randint", "memory"),
    ("randn", "memory"), ("randperm", "memory"), ("linspace", "memory"),
)

# Elementwise (pointwise) ops by name: the operator tag covers most; these are spelled out
# because their schemas are not tagged pointwise in every torch release.
_ELEMENTWISE_NAMES = frozenset("""
add sub mul div addcmul addcdiv lerp pow sqrt rsqrt exp log log1p expm1 neg abs sign reciprocal
relu relu_ threshold threshold_backward gelu gelu_backward silu silu_backward sigmoid sigmoid_backward
tanh tanh_backward hardtanh hardtanh_backward hardswish hardswish_backward hardsigmoid hardsigmoid_backward
leaky_relu leaky_relu_backward elu elu_backward softplus softplus_backward clamp clamp_min clamp_max
where eq ne lt le gt ge logical_and logical_or logical_not bitwise_and bitwise_or bitwise_not maximum minimum
masked_fill native_dropout_backward mish mish_backward sin cos erf erfinv floor ceil round trunc frac fmod
remainder isnan isinf nan_to_num sgn square mul_ add_ div_ sub_ lerp_ addcmul_ addcdiv_ sqrt_ copysign
_masked_scale prelu _prelu_kernel _prelu_kernel_backward log_sigmoid_forward log_sigmoid_backward
glu glu_backward rsub xlogy hypot atan2 clamp_ clamp_min_ sigmoid_ tanh_ exp_ elu_ gelu_ silu_ hardswish_
floor_divide
""".split())

# Ops that launch no kernel: allocation and metadata (views are detected from the schema; the
# in-place views, ``t_`` and the like, write their self's metadata, so their schemas say "write").
_NO_KERNEL = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided resize_ set_ lift_fresh detach alias
_unsafe_view view _reshape_alias sym_size sym_stride sym_numel sym_storage_offset is_same_size
is_nonzero _has_compatible_shallow_copy_type record_stream unsafe_split unsafe_split_with_sizes
unsafe_chunk as_strided_ _unsafe_view t_ transpose_ squeeze_ unsqueeze_ swapaxes_ swapdims_
""".split())

# Ops known to launch more than one kernel on CUDA, per call. Source: kernel lists seen in
# PyTorch profiler traces of these ops on A100/H100 (cuDNN conv backward runs one kernel
# per requested gradient; flash/mem-efficient attention backward runs a preprocessing
# kernel, the main kernel and a dq conversion; dense embedding backward sorts indices).
KERNELS_PER_OP: dict[str, int] = {
    "embedding_dense_backward": 6,
    "_flash_attention_backward": 3,
    "_scaled_dot_product_flash_attention_backward": 3,
    "_efficient_attention_backward": 2,
    "_scaled_dot_product_efficient_attention_backward": 2,
    "native_layer_norm_backward": 2,
    "native_group_norm_backward": 3,
    "nll_loss_forward": 1,
    "_log_softmax_backward_data": 1,
    "topk": 2,
    "sort": 3,
}

# multi_tensor_apply limits, from aten/src/ATen/native/cuda/MultiTensorApply.cuh (the 4 KB
# kernel-argument configuration): tensors per launch by list depth (the number of tensor lists,
# outputs included), a smaller table when the op takes a list of scalars, and chunks per launch.
MTA_DEPTH_TO_MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}
MTA_DEPTH_TO_MAX_TENSORS_SCALARLIST = {1: 96, 2: 64, 3: 48, 4: 36, 5: 30}
MTA_MAX_BLOCKS = 320
MTA_CHUNK_ELEMS = 65536


def foreach_kernels(lists: list[list[torch.Tensor]], depth: int | None = None, scalar_list: bool = False) -> int:
    """Kernel launches of one ``_foreach_*`` call on CUDA.

    ``multi_tensor_apply``'s loop: tensors are packed in order, one block per 64Ki-element
    chunk; a launch happens when the blocks are full (a tensor whose chunks remain is carried
    into the next launch) or when the tensor slots are full at a tensor's last chunk, and once
    more for what is left. ``depth`` is the number of tensor lists the kernel sees (default
    ``len(lists)``; an out-of-place op adds its output list); ``scalar_list`` selects the
    scalar-list table. Empty tensors are skipped."""
    if not lists or not lists[0]:
        return 0
    depth = min(depth or len(lists), 5)
    max_tensors = (MTA_DEPTH_TO_MAX_TENSORS_SCALARLIST if scalar_list else MTA_DEPTH_TO_MAX_TENSORS)[depth]
    launches = blocks = tensors = 0
    for t in lists[0]:
        n = t.numel()
        if n == 0:
            continue
        tensors += 1
        left = math.ceil(n / MTA_CHUNK_ELEMS)
        while left >= MTA_MAX_BLOCKS - blocks:  # the blocks fill up within this tensor
            launches += 1
            left -= MTA_MAX_BLOCKS - blocks
            blocks = 0
            if left == 0:  # ...at its last chunk
                tensors = 0
                break
            tensors = 1  # chunks remain: the tensor is carried into the next launch
        else:
            blocks += left
            if tensors == max_tensors:
                launches += 1
                blocks = tensors = 0
    return launches + (blocks > 0)


# --------------------------------------------------------------------------- bytes
def effective_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches to read or write ``t`` once (stride-0 dims count once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size()


BytesRule = Callable[..., tuple[int, int]]  # (args, kwargs, out) -> (read, written)
_BYTES_RULES: dict[object, BytesRule] = {}


def _registering(table: dict, keys: tuple) -> Callable:
    """A decorator that enters the function it decorates in ``table`` under each of ``keys``."""

    def deco(fn):
        for key in keys:
            table[key] = fn
        return fn

    return deco


def bytes_rule(*targets) -> Callable[[BytesRule], BytesRule]:
    """Register a bytes rule for ops (OpOverloadPackets), like flop_counter's decorator."""
    return _registering(_BYTES_RULES, targets)


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def _sum_bytes(ts) -> int:
    return sum(effective_bytes(t) for t in ts)


def default_bytes(args, kwargs, out) -> tuple[int, int]:
    return _sum_bytes(_tensors(args) + _tensors(kwargs)), _sum_bytes(_tensors(out))


@bytes_rule(aten.embedding, aten.index_select, aten.gather, aten.index, aten._unsafe_index)
def _gather_bytes(args, kwargs, out):
    # Reads the indices and only the gathered rows (as many bytes as it writes).
    indices = [t for t in _tensors(args[1:]) if not t.is_floating_point()]
    written = _sum_bytes(_tensors(out))
    return _sum_bytes(indices) + written, written


@bytes_rule(aten.embedding_dense_backward)
def _embedding_backward_bytes(args, kwargs, out):
    grad, indices = args[0], args[1]
    written = _sum_bytes(_tensors(out))  # the whole weight gradient is zeroed and scattered
    return effective_bytes(grad) + effective_bytes(indices), written


@bytes_rule(aten.zeros, aten.ones, aten.full, aten.fill_, aten.zero_, aten.zeros_like, aten.ones_like,
            aten.full_like, aten.new_zeros, aten.new_ones, aten.new_full, aten.scalar_tensor, aten.arange,
            aten.normal_, aten.uniform_, aten.rand, aten.randn, aten.randint, aten.rand_like, aten.randn_like)
def _fill_bytes(args, kwargs, out):
    return 0, _sum_bytes(_tensors(out)) or _sum_bytes(_tensors(args[:1]))


@bytes_rule(aten.copy_)
def _copy_bytes(args, kwargs, out):
    # Reads the source, writes the destination; the destination is not read.
    return effective_bytes(args[1]), effective_bytes(args[0])


@bytes_rule(aten.nll_loss_forward, aten.nll_loss2d_forward)
def _nll_bytes(args, kwargs, out):
    # Reads one logit per target row, plus the targets.
    logits, target = args[0], args[1]
    return effective_bytes(target) * (1 + logits.element_size() // max(1, target.element_size())), \
        _sum_bytes(_tensors(out))


# --------------------------------------------------------------------------- grouped GEMMs
# ``_grouped_mm`` (transformers' MoE experts, ``grouped_mm``): one GEMM per group of rows, the
# groups given by ``offs`` (cumulative row counts). flop_counter has no formula for it (a torch
# release that brings one keeps its own); releases without the op skip these rules.
def _grouped_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """2 x M x K x N summed over the groups: ``(M_total, K) x (G, K, N)`` (MoE forward),
    ``(G, M, K) x (K, N_total)`` and ``(G, M, K) x (G, K, N)`` contract ``a``'s last dimension into
    every output element; ``(M, K_total) x (K_total, N)`` (ragged K, a weight gradient) does
    ``2 M K_total N`` in all."""
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    return 2 * math.prod(out_shape) * a_shape[-1]


def _grouped_mm_bytes(args, kwargs, out):
    # (rows, K) x (experts, K, N): groups with no rows are skipped, so at most min(experts, rows)
    # experts' weights are read (an upper bound: exact when every expert gets a row or each row
    # its own expert). Other layouts: the default.
    a, b = args[0], args[1]
    if a.dim() != 2 or b.dim() != 3:
        return default_bytes(args, kwargs, out)
    per_group = effective_bytes(b) // max(1, b.shape[0])
    rest = _sum_bytes(_tensors(args[2:]) + _tensors(kwargs))
    return effective_bytes(a) + min(b.shape[0], a.shape[0]) * per_group + rest, _sum_bytes(_tensors(out))


for _name in ("_grouped_mm", "_scaled_grouped_mm"):   # the FP8 one: Transformer Engine's experts (graph.fp8)
    if hasattr(aten, _name):
        if getattr(aten, _name) not in flop_registry:
            register_flop_formula(getattr(aten, _name))(_grouped_mm_flop)
        bytes_rule(getattr(aten, _name))(_grouped_mm_bytes)


# --------------------------------------------------------------------------- classification
def op_name(func) -> str:
    """``aten.mm.default`` -> ``mm``."""
    return func._overloadpacket.__name__


def is_view(func) -> bool:
    """True when every output aliases an input without writing it (a view: no kernel)."""
    schema = func._schema
    if not schema.returns:
        return False
    for ret in schema.returns:
        info = ret.alias_info
        if info is None or info.is_write:
            return False
    return True


# Categories of custom ops (OpOverloadPackets), entered with :func:`category_rule`; checked
# before the name tables, which know aten's names only.
_CATEGORY_RULES: dict[object, str] = {}


def category_rule(cat: str, *targets) -> None:
    """Give custom ops (OpOverloadPackets, ``torch.ops.NS.name``) the category ``cat``, which
    makes them costed; like :func:`bytes_rule`, the module that defines an op registers it."""
    for target in targets:
        _CATEGORY_RULES[target] = cat


def category(func) -> str | None:
    """The op's category, or None when no rule knows it (an uncosted op)."""
    name = op_name(func)
    if is_view(func) or name in _NO_KERNEL:
        return "view"
    registered = _CATEGORY_RULES.get(func._overloadpacket)
    if registered is not None:
        return registered
    if func._overloadpacket in flop_registry:
        if name in ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm"):
            return "matmul"
    base = name.rstrip("_")
    if name in _ELEMENTWISE_NAMES or base in _ELEMENTWISE_NAMES or torch.Tag.pointwise in func.tags:
        return "elementwise"
    for prefix, cat in _CATEGORY_PREFIXES:
        if name.startswith(prefix):
            return cat
    if func._overloadpacket in flop_registry:
        return "matmul"
    if torch.Tag.reduction in getattr(func, "tags", ()):
        return "reduction"
    return None


def _grouped_conv_backward_flops(rule, args, out) -> int:
    """FLOPs of a grouped convolution's backward: flop_counter's own formulas, with the weight
    gradient counted as the forward's multiply-adds (``conv_flop``, which the weight's per-group
    shape makes right for groups). ``conv_backward_flop`` counts that gradient on the transposed
    shapes, which lose the group division: ``groups`` times too many (pytorch/pytorch PR #183405
    divides it by ``groups``; releases without it overcount a depthwise layer's backward ~70x)."""
    grad, x, w, _bias, stride, padding, dilation, transposed, out_pad, groups, mask = args[:11]
    total = int(rule(*args[:10], [mask[0], False, False], out_val=out)) if mask[0] else 0
    if mask[1]:
        total += int(flop_registry[aten.convolution](x, w, None, stride, padding, dilation, transposed, out_pad,
                                                     groups, out_val=grad))
    return total


def flops(func, args, kwargs, out) -> int:
    rule = flop_registry.get(func._overloadpacket)
    if rule is None:
        return 0
    if (func._overloadpacket is aten.convolution_backward and not kwargs and len(args) >= 11
            and isinstance(args[9], int) and args[9] > 1):
        return _grouped_conv_backward_flops(rule, args, out)
    share = _FLOP_SHARES.get(op_name(func))
    return int(rule(*args, **kwargs, out_val=out) * (share(func, args, kwargs) if share else 1.0))


FlopShare = Callable[[object, tuple, dict], float]  # (func, args, kwargs) -> share of the count the kernel computes
_FLOP_SHARES: dict[str, FlopShare] = {}


def flop_share_rule(*names: str) -> Callable[[FlopShare], FlopShare]:
    """Register the share of flop_counter's count an op's kernel computes, by op name (gpucast.graph.causal)."""
    return _registering(_FLOP_SHARES, names)


def bytes_moved(func, args, kwargs, out) -> tuple[int, int]:
    rule = _BYTES_RULES.get(func._overloadpacket, default_bytes)
    read, written = rule(args, kwargs, out)
    return int(read), int(written)


KernelsRule = Callable[[str, tuple], int]  # (op name, args) -> kernel launches
_KERNELS_RULES: dict[str, KernelsRule] = {}


def kernels_rule(*names: str) -> Callable[[KernelsRule], KernelsRule]:
    """Register a kernel-count rule for ops by name (``"_cudnn_rnn"``), like :func:`bytes_rule`."""
    return _registering(_KERNELS_RULES, names)


# Foreach reductions write one value per tensor, not a tensor list.
_FOREACH_REDUCTIONS = frozenset({"_foreach_norm", "_foreach_max"})


def kernels(func, cat: str, args, on_host: bool) -> int:
    if on_host or cat in ("view", "host"):
        return 0
    name = op_name(func)
    if name.startswith("_foreach_"):
        lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        scalars = any(isinstance(a, (list, tuple)) and a and isinstance(a[0], (int, float, complex))
                      for a in args)
        # An out-of-place op writes a new list, which multi_tensor_apply also walks.
        out_list = not name.endswith("_") and name not in _FOREACH_REDUCTIONS
        return foreach_kernels(lists, depth=len(lists) + out_list, scalar_list=scalars)
    rule = _KERNELS_RULES.get(name)
    if rule is not None:
        return rule(name, args)
    if name == "convolution_backward":
        mask = args[-1] if isinstance(args[-1], (list, tuple)) else (True, True, True)
        return max(1, sum(bool(m) for m in mask))
    return KERNELS_PER_OP.get(name, 1)
