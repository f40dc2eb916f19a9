"""Make a meta-device trace dispatch what CUDA would: autocast, SDPA backends, cuDNN RNNs, dropout.

Tracing runs on the meta device, where four things differ from a CUDA run:

* **Autocast.** ``torch.autocast("cuda")`` does not apply to meta tensors. :class:`CudaMirror`
  (a ``TorchFunctionMode``) applies CUDA autocast's op lists itself: functions on the
  lower-precision list get their floating inputs cast to the AMP dtype, functions on the
  fp32 list get them cast to fp32, and "promote" functions run in the widest input dtype.
  Casts of leaf tensors (parameters) are cached for the region, as autocast caches them when
  autograd records (``cached_cast`` in ``aten/src/ATen/autocast_mode.cpp``: fp32 leaves that
  require grad); ``cache_casts=False`` casts them at every use and frees the copy after it, as
  autocast does under ``torch.inference_mode()`` (the weights' half copies are not held: our H200
  inference rows allocate fp32 Llama weights plus the activations, torch 2.11; a CPU autocast check
  in torch 2.14 shows one ``to`` per use there, one per region under ``no_grad``).
  The casts are real ``aten._to_copy`` ops, so the trace records them and autograd records
  their backward; grouped GEMMs (a mixture-of-experts layer's experts) at the autocast dtype too
  (:data:`GROUPED`: not on CUDA's list). Lists: PyTorch's autocast documentation ("CUDA Ops that can autocast to
  float16 / to float32", ``aten/src/ATen/autocast_mode.cpp``). A function the mode cannot
  see (one called from inside another Python-level torch function) keeps its input dtype;
  ``multi_head_attention_forward`` is handled whole for that reason.
* **SDPA backend.** On meta, ``scaled_dot_product_attention`` falls back to the math path
  (explicit matmuls and softmax). On a CUDA GPU it picks a fused kernel: flash attention for
  fp16/bf16 inputs without an explicit mask, memory-efficient attention otherwise (fp32, or a
  mask). :func:`sdpa` calls those fused ops directly (their meta kernels and autograd
  formulas exist), which gives the fused kernels' FLOPs, memory (no materialised attention
  matrix) and launches. Flash needs sm80+; on older GPUs CUDA would choose memory-efficient
  attention, whose FLOPs and memory are the same to first order (not modelled separately).
  Grouped-query attention (``enable_gqa``, fewer K/V heads than query heads): the flash kernel
  reads the grouped heads as they are (PyTorch >= 2.5; our H200 decode timings,
  ``data/measurements/kernels/2026-12-04-h200-2.csv``, read the K/V cache once at 3.5-4.4 TB/s);
  the memory-efficient kernel does not take them, so there the K/V heads are repeated first.
* **cuDNN RNNs.** ``nn.LSTM``/``nn.GRU``/``nn.RNN`` run as one ``_cudnn_rnn`` call on CUDA;
  :class:`CudaMirror` routes them to ``gpucast.graph.rnn.cudnn_rnn``, which makes the same
  call on meta. Where that does not apply (packed sequences, projections), the decomposed
  recurrence is kept, its ops marked as dispatched from C++ (``dispatch='cpp'``: no Python
  overhead per op), and each run of pointwise ops after a GEMM gets one fused kernel.

* **Dropout.** ``F.dropout`` in training runs one fused ``native_dropout`` kernel on CUDA
  (``is_fused_kernel_acceptable`` in ``aten/src/ATen/native/Dropout.cpp``), which keeps a
  one-byte bool mask for backward; on the meta device (and CPU) ATen takes the unfused path
  (``bernoulli_``, ``div_``, ``mul``) and keeps a mask in the input's dtype. :func:`dropout`
  calls ``native_dropout`` directly. In-place dropout is unfused on CUDA too and is left alone.

Foreach optimizers (CUDA's default) are chosen in ``gpucast.graph.tracer``.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from gpucast.graph import causal  # noqa: F401  (registers the causal attention FLOP share)
from gpucast.graph.rnn import cudnn_rnn

# CUDA autocast lower-precision list (functions as Python sees them).
LOWER_PRECISION = frozenset("""
linear conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc
matmul __matmul__ __rmatmul__ mm bmm addmm addbmm baddbmm addmv addr mv chain_matmul multi_dot
prelu lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
scaled_dot_product_attention multi_head_attention_forward einsum _convolution convolution
""".split())
# CUDA autocast fp32 list and fp32_set_opt_dtype list.
FP32 = frozenset("""
acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow __pow__ __rpow__
softplus layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity poisson_nll_loss
cosine_embedding_loss nll_loss hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss
margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
binary_cross_entropy_with_logits cross_entropy dist pdist cdist renorm logsumexp interpolate
prod cumprod cumsum softmax log_softmax sum norm linalg_vector_norm linalg_matrix_norm
""".split())
PROMOTE = frozenset("""
addcdiv addcmul atan2 bilinear cross dot grid_sample index_copy index_put scatter_add tensordot cat stack
""".split())
RNN_FUNCTIONS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})
# Grouped GEMMs (a mixture-of-experts layer's experts: transformers' grouped_mm experts). Not on CUDA
# autocast's list (pytorch#174763): on a GPU, transformers 5's fp32-weight grouped GEMM under autocast fails
# (the kernel takes bf16 operands). Taken at the autocast dtype here, as the frameworks that train
# mixture-of-experts models in mixed precision run their experts (Megatron-Core, DeepSpeed, TorchTitan);
# under fp16 autocast in bf16 (PyTorch's grouped GEMM takes no fp16 operands on meta; the same FLOPs and
# bytes, and fp16 and bf16 peaks are equal on the GPUs that run grouped GEMMs).
GROUPED = frozenset({"grouped_mm", "_grouped_mm"})
_CASTABLE = (torch.float32, torch.float16, torch.bfloat16)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` as a CUDA GPU would run it (see module docstring)."""
    if query.dim() != 4 or key.dim() != 4 or query.device.type != "meta":
        return _ORIGINAL_SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                              is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    half = query.dtype in (torch.float16, torch.bfloat16)
    # flash needs equal head dims for q, k and v (aten sdp_utils' check_head_dim_size_flash); MLA's values
    # are narrower than its keys and run the memory-efficient kernel, which takes them
    if half and attn_mask is None and query.shape[-1] <= 256 and value.shape[-1] == query.shape[-1]:
        # the flash kernel reads grouped K/V heads as they are (enable_gqa: no copies)
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if enable_gqa and key.shape[1] != query.shape[1]:
        rep = query.shape[1] // key.shape[1]
        key = key.repeat_interleave(rep, dim=1)
        value = value.repeat_interleave(rep, dim=1)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
    if attn_mask is not None:
        attn_mask = attn_mask.to(query.dtype).expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    needs_lse = query.requires_grad or key.requires_grad or value.requires_grad
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, needs_lse and torch.is_grad_enabled(), dropout_p, is_causal,
        scale=scale)[0]


_ORIGINAL_SDPA = F.scaled_dot_product_attention

# Calls through ``F.scaled_dot_product_attention`` never reach a TorchFunctionMode, so while any
# capture runs, ``F.scaled_dot_product_attention`` is ``_sdpa_dispatch``: it sends the call to the
# CudaMirror active in the calling thread, or to PyTorch's function in threads with none (the
# original is put back when the last capture ends). Mode stacks are per thread in PyTorch, and
# so is this, so captures in several threads (the prediction service) do not see each other.
_local = threading.local()
_install_lock = threading.Lock()
_installed = 0


def _sdpa_dispatch(*args, **kwargs):
    stack = getattr(_local, "mirrors", None)
    if not stack:
        return _ORIGINAL_SDPA(*args, **kwargs)
    return stack[-1]._autocast_sdpa(*args, **kwargs)


def _enter_sdpa(mirror: "CudaMirror") -> None:
    global _installed
    stack = getattr(_local, "mirrors", None)
    if stack is None:
        stack = _local.mirrors = []
    stack.append(mirror)
    with _install_lock:
        _installed += 1
        F.scaled_dot_product_attention = _sdpa_dispatch


def _exit_sdpa() -> None:
    global _installed
    _local.mirrors.pop()
    with _install_lock:
        _installed -= 1
        if _installed == 0:
            F.scaled_dot_product_attention = _ORIGINAL_SDPA


def dropout(input, p=0.5, training=True, inplace=False, train=None):
    """``F.dropout`` / ``torch.dropout`` as CUDA runs it (see module docstring), or
    NotImplemented where CUDA would not use the fused kernel either."""
    if train is not None:  # torch.dropout(input, p, train)
        training = train
    if (not training or inplace or not isinstance(input, torch.Tensor) or input.device.type != "meta"
            or not 0 < p < 1 or input.numel() == 0):
        return NotImplemented
    return torch.native_dropout(input, p, True)[0]


class CudaMirror(TorchFunctionMode):
    """Autocast emulation, SDPA mirroring and RNN marking during a captured forward.

    ``amp_dtype`` is ``torch.float16``/``torch.bfloat16`` for AMP, or None (no autocast).
    ``on_rnn(entering: bool)`` is called around RNN calls (the recorder marks their ops).
    ``cache_casts``: keep the parameters' casts for the region (autocast with autograd recording).
    """

    def __init__(self, amp_dtype: torch.dtype | None = None, on_rnn=None, cache_casts: bool = True) -> None:
        super().__init__()
        self.amp_dtype = amp_dtype
        self.on_rnn = on_rnn
        self.cache_casts = cache_casts
        self._cache: dict[int, torch.Tensor] = {}

    def __enter__(self):
        _enter_sdpa(self)
        return super().__enter__()

    def _autocast_sdpa(self, *args, **kwargs):
        """What ``F.scaled_dot_product_attention`` is during the region. Calls through ``F`` reach
        this function, not ``__torch_function__``, so autocast's cast (SDPA is on the
        lower-precision list) is applied here: without it, inputs of mixed dtypes (a RoPE model's
        fp32 q/k and bf16 v) would reach the fused kernels uncast."""
        if self.amp_dtype is not None:
            args, kwargs = self._cast((args, kwargs), self.amp_dtype)
        return sdpa(*args, **kwargs)

    def __exit__(self, *exc):
        _exit_sdpa()
        self._cache.clear()
        return super().__exit__(*exc)

    def autocast_off(self) -> None:
        """End the autocast region (as leaving ``with torch.autocast(...)`` does)."""
        self.amp_dtype = None
        self._cache.clear()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "scaled_dot_product_attention" and func is not sdpa:
            func = sdpa
        if self.amp_dtype is not None:
            target = None
            if name in LOWER_PRECISION:
                target = self.amp_dtype
            elif name in GROUPED:   # fp16 grouped GEMMs do not trace on meta: bf16's FLOPs and bytes
                target = torch.bfloat16
            elif name in FP32:
                target = torch.float32
            elif name in PROMOTE:
                target = _widest(args, kwargs)
            if target is not None:
                args, kwargs = self._cast((args, kwargs), target)
        if name in RNN_FUNCTIONS:
            mirrored = cudnn_rnn(name, args, kwargs)
            if mirrored is not None:
                return mirrored
        if name == "dropout" and func in (F.dropout, torch.dropout):
            out = dropout(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if name in RNN_FUNCTIONS and self.on_rnn is not None:
            self.on_rnn(True)
            try:
                return func(*args, **kwargs)
            finally:
                self.on_rnn(False)
        return func(*args, **kwargs)

    def _cast(self, obj, target):
        if isinstance(obj, torch.Tensor):
            if obj.dtype in _CASTABLE and obj.dtype != target and obj.device.type == "meta":
                if self.cache_casts and obj.is_leaf and obj.requires_grad:
                    cached = self._cache.get(id(obj))
                    if cached is None:
                        cached = self._cache[id(obj)] = obj.to(target)
                    return cached
                return obj.to(target)
            return obj
        if isinstance(obj, tuple):
            return tuple(self._cast(o, target) for o in obj)
        if isinstance(obj, list):
            return [self._cast(o, target) for o in obj]
        if isinstance(obj, dict):
            return {k: self._cast(v, target) for k, v in obj.items()}
        return obj


def _widest(args, kwargs):
    found = []

    def visit(o):
        if isinstance(o, torch.Tensor) and o.dtype in _CASTABLE:
            found.append(o.dtype)
        elif isinstance(o, (list, tuple)):
            for x in o:
                visit(x)

    visit(args)
    visit(list(kwargs.values()))
    if len(set(found)) <= 1:
        return None
    return torch.float32 if torch.float32 in found else found[0]
