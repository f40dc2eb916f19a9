"""cuDNN RNNs on the meta device: ``nn.LSTM``/``nn.GRU``/``nn.RNN`` as one ``_cudnn_rnn`` call.

On a CUDA GPU, PyTorch runs a dense (unpacked) LSTM/GRU/RNN as a single ``aten._cudnn_rnn``
op: per layer and direction, one GEMM for the input projections of all time steps, then per
time step a recurrent GEMM and one fused pointwise kernel; backward is one
``_cudnn_rnn_backward``. The meta device would instead decompose the recurrence into per-step
aten ops. :func:`cudnn_rnn` reproduces the CUDA call through :class:`_CudnnRNN`, an autograd
function whose backward calls ``_cudnn_rnn_backward`` (given a meta kernel here, which PyTorch
lacks), and which keeps a reserve tensor of the size cuDNN keeps for backward.

Cost rules registered into ``torch.utils.flop_counter``'s registry (built on its ``mm_flop``):
forward FLOPs are the GEMMs over all time steps of every ``w_ih`` and ``w_hh``; backward adds a
weight-gradient GEMM for each and an input-gradient GEMM for each except, when the input needs
no gradient, layer 0's ``w_ih``.

Modelled: FLOPs, kernels (:func:`rnn_kernels`, registered with
:func:`gpucast.graph.rules.kernels_rule`), bytes (the recurrent weights read every time step,
registered with :func:`~gpucast.graph.rules.bytes_rule`), the reserve space (``RESERVE_PER_STEP``).
The kernel model (:mod:`gpucast.estimate.kernels`, :func:`gpucast.estimate.tiles.gemm_problems`) runs
the call's GEMMs one after another as cuDNN does: each time step's recurrent GEMM over the batch's rows
with its own ramp, its pointwise kernel's floor added, in TF32 for float32 where cuDNN's TF32 is on.

Not modelled: packed sequences and projections (they keep the decomposed path), cuDNN's
persistent kernels for small hidden sizes, the layers' wavefront overlap (cuDNN may run layer l's
step t beside layer l-1's step t+1).
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import mm_flop, register_flop_formula

aten = torch.ops.aten
MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
GATES = {0: 1, 1: 1, 2: 4, 3: 3}
# Values cuDNN keeps per layer, direction, time step and sample for backward, in units of the
# hidden size: the gate pre-activations plus the cell and hidden states (cuDNN's reserve space
# is opaque; this matches what the decomposed recurrence saves).
RESERVE_PER_STEP = {0: 2, 1: 2, 2: 6, 3: 5}


def _steps_batch(input_shape, batch_first: bool) -> tuple[int, int]:
    if len(input_shape) == 2:
        return input_shape[0], 1
    return (input_shape[1], input_shape[0]) if batch_first else (input_shape[0], input_shape[1])


def _weight_mats(weight_shapes, weight_stride0: int):
    """(rows, cols, is_input_weight, layer_index) for each w_ih / w_hh matrix."""
    mats = []
    for i in range(0, len(weight_shapes), weight_stride0):
        group = i // weight_stride0
        w_ih, w_hh = weight_shapes[i], weight_shapes[i + 1]
        mats.append((w_ih[0], w_ih[1], True, group))
        mats.append((w_hh[0], w_hh[1], False, group))
    return mats


def _forward_flops(input_shape, weight_shapes, weight_stride0, batch_first) -> int:
    t, b = _steps_batch(input_shape, batch_first)
    return sum(mm_flop((t * b, cols), (cols, rows)) for rows, cols, _, _ in _weight_mats(weight_shapes, weight_stride0))


@register_flop_formula(aten._cudnn_rnn)
def _cudnn_rnn_flop(input_shape, weight_shapes, weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size,
                    num_layers, batch_first, *args, out_shape=None, **kwargs) -> int:
    return _forward_flops(input_shape, weight_shapes, weight_stride0, batch_first)


@register_flop_formula(aten._cudnn_rnn_backward)
def _cudnn_rnn_backward_flop(input_shape, weight_shapes, weight_stride0, weight_buf, hx, cx, output, grad_output,
                             grad_hy, grad_cy, mode, hidden_size, proj_size, num_layers, batch_first, dropout, train,
                             bidirectional, batch_sizes, dropout_state, reserve, output_mask,
                             out_shape=None, **kwargs) -> int:
    t, b = _steps_batch(input_shape, batch_first)
    dirs = 2 if bidirectional else 1
    total = 0
    for rows, cols, is_input, group in _weight_mats(weight_shapes, weight_stride0):
        gemm = mm_flop((t * b, cols), (cols, rows))
        total += gemm  # weight gradient
        if not (is_input and group < dirs and not output_mask[0]):
            total += gemm  # gradient w.r.t. this GEMM's input
    return total


def rnn_kernels(phase_backward: bool, num_layers: int, bidirectional: bool, steps: int) -> int:
    """Kernels cuDNN launches: per layer and direction, an input GEMM plus a recurrent GEMM and a
    pointwise kernel per step; backward adds a pointwise-backward kernel per step and two
    weight-gradient GEMMs."""
    groups = num_layers * (2 if bidirectional else 1)
    per_group = 3 * steps + 3 if phase_backward else 2 * steps + 1
    return groups * per_group


def _install_backward_meta() -> None:
    name = "aten::_cudnn_rnn_backward"
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"):
        return

    def meta(input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy, grad_cy, mode,
             hidden_size, proj_size, num_layers, batch_first, dropout, train, bidirectional, batch_sizes,
             dropout_state, reserve, output_mask):
        return (torch.empty_like(input), torch.empty_like(hx),
                torch.empty_like(cx) if cx is not None else torch.empty_like(hx),
                [torch.empty_like(w) for w in weight])

    _LIB.impl("_cudnn_rnn_backward", meta, "Meta")


_LIB = torch.library.Library("aten", "IMPL")
_install_backward_meta()


class _CudnnRNN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, h0, c0, cfg, *weights):
        mode, hidden, layers, batch_first, dropout, train, bidirectional, stride0 = cfg
        buf = torch.empty(1, dtype=input.dtype, device=input.device)
        out = aten._cudnn_rnn(input, list(weights), stride0, buf, h0, c0, mode, hidden, 0, layers, batch_first,
                              dropout, train, bidirectional, [], None)
        t, b = _steps_batch(tuple(input.shape), batch_first)
        groups = layers * (2 if bidirectional else 1)
        reserve = torch.empty(groups * t * b * hidden * RESERVE_PER_STEP[mode], dtype=input.dtype,
                              device=input.device)
        ctx.cfg = cfg
        ctx.has_c = c0 is not None
        ctx.needs_input_grad_0 = ctx.needs_input_grad[0]
        ctx.save_for_backward(input, h0, c0 if c0 is not None else h0, out[0], reserve, buf, *weights)
        return out[0], out[1], out[2] if c0 is not None else out[1]

    @staticmethod
    def backward(ctx, grad_out, grad_hy, grad_cy):
        mode, hidden, layers, batch_first, dropout, train, bidirectional, stride0 = ctx.cfg
        input, h0, c0, output, reserve, buf, *weights = ctx.saved_tensors
        c0 = c0 if ctx.has_c else None
        grad_cy = grad_cy if ctx.has_c else None
        if grad_out is None:
            grad_out = torch.zeros_like(output)
        mask = [ctx.needs_input_grad_0, True, ctx.has_c, True]
        d_in, d_h, d_c, d_w = aten._cudnn_rnn_backward(
            input, weights, stride0, buf, h0, c0, output, grad_out, grad_hy, grad_cy, mode, hidden, 0, layers,
            batch_first, dropout, train, bidirectional, [], None, reserve, mask)
        return (d_in if ctx.needs_input_grad_0 else None, d_h, d_c if ctx.has_c else None, None, *d_w)


def cudnn_rnn(name: str, args: tuple, kwargs: dict):
    """``_VF.lstm/gru/rnn_*`` as CUDA runs it, or None when the call is not a dense meta RNN."""
    if kwargs or len(args) != 9 or not isinstance(args[0], torch.Tensor) or args[0].device.type != "meta":
        return None
    input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args
    if isinstance(hx, torch.Tensor) and name == "lstm":
        return None
    stride0 = 4 if has_biases else 2
    if len(params) != stride0 * num_layers * (2 if bidirectional else 1):
        return None  # projections or an unexpected layout: keep the decomposed path
    mode = MODES[name]
    h0, c0 = (hx[0], hx[1]) if name == "lstm" else (hx, None)
    hidden = h0.shape[-1]
    cfg = (mode, hidden, num_layers, bool(batch_first), float(dropout), bool(train), bool(bidirectional), stride0)
    out, hy, cy = _CudnnRNN.apply(input, h0, c0, cfg, *params)
    return (out, hy, cy) if name == "lstm" else (out, hy)


def kernels_of_call(name: str, args: tuple) -> int:
    """Kernel launches of one ``_cudnn_rnn`` / ``_cudnn_rnn_backward`` call (see :func:`rnn_kernels`)."""
    if name == "_cudnn_rnn":
        layers, batch_first, bidirectional = args[9], args[10], args[13]
    else:
        layers, batch_first, bidirectional = args[13], args[14], args[17]
    steps, _ = _steps_batch(tuple(args[0].shape), batch_first)
    return rnn_kernels(name != "_cudnn_rnn", layers, bidirectional, steps)


def _recurrent_weight_bytes(args, batch_first) -> int:
    """Bytes of the recurrent weights read once per time step (they do not stay on chip)."""
    steps, _ = _steps_batch(tuple(args[0].shape), batch_first)
    stride0 = args[2]
    weights = args[1]
    return steps * sum(weights[i + 1].numel() * weights[i + 1].element_size() for i in range(0, len(weights), stride0))


def _register_rules() -> None:
    from gpucast.graph import rules

    rules.kernels_rule("_cudnn_rnn", "_cudnn_rnn_backward")(kernels_of_call)

    @rules.bytes_rule(aten._cudnn_rnn)
    def _rnn_bytes(args, kwargs, out):
        read, written = rules.default_bytes(args, kwargs, out)
        return read + _recurrent_weight_bytes(args, args[10]), written

    @rules.bytes_rule(aten._cudnn_rnn_backward)
    def _rnn_backward_bytes(args, kwargs, out):
        read, written = rules.default_bytes(args, kwargs, out)
        return read + 2 * _recurrent_weight_bytes(args, args[14]), written


_register_rules()
