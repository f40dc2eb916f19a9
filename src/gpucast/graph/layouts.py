"""The layout transposes cuDNN runs around a half-precision convolution on NCHW tensors.

Tensor-core convolutions run in NHWC (channels last). PyTorch's tensors are NCHW unless a job asks
for ``torch.channels_last``, so for an FP16/BF16 convolution on an NCHW input cuDNN transposes the
input to NHWC before its kernel and the output back after it, each a kernel of its own that reads
and writes the whole tensor (MosaicML Composer's "Channels Last" method card, after NVIDIA: "the
cuDNN library performs a transpose to convert the tensor into NHWC format ... This transpose
introduces overhead"; our H200, data/measurements/kernels/2026-12-04-h200-2.csv: a bf16 NCHW layer
takes 1.5-2.2x its channels-last time, the difference the four passes over input and output at
about half the DRAM bandwidth). The backward transposes the gradient it receives, the input again for
the weight gradient, and the data gradient it returns.

The tracer (:mod:`gpucast.graph.tracer`) records each transpose :func:`transposes` names as an op
of its own after the convolution (``cudnn_nchw_to_nhwc`` / ``cudnn_nhwc_to_nchw``, category
``copy``, launched from C++, allocating nothing the step keeps: cuDNN's workspace). Their rate is
``achieved.yaml``'s ``transpose`` family (``bandwidth_per_sm``, measured on our H200: Hopper and
data-center Blackwell; on other GPUs the DRAM roofline).

Two kinds of convolution pay none: depthwise ones (PyTorch's own NCHW kernels) and 1x1 convolutions
of stride 1 without padding (on NCHW a GEMM per image; our H200: ResNet-50's 64->256 1x1 layer at
56x56 takes the same time in both layouts, 181 and 175 us).

Not modelled: FP32/TF32 convolutions (their NCHW kernels were not measured against NHWC ones),
transposes cuDNN may still choose for a 1x1 layer on small images (ResNet-50's 2048->512 layer at 7x7
took 2x its channels-last time), GPUs without tensor cores (no
NHWC preference: their FP16 convolutions pay these transposes here too), 3-D convolutions, cuDNN
fusing a transpose into the convolution for some shapes.
"""

from __future__ import annotations

import torch

HALF = (torch.float16, torch.bfloat16)
TO_NHWC = "cudnn_nchw_to_nhwc"
TO_NCHW = "cudnn_nhwc_to_nchw"


def _nchw_half(t) -> bool:
    """A 4-D half-precision tensor laid out NCHW (and not also channels-last, as 1x1 images are)."""
    return (isinstance(t, torch.Tensor) and t.dim() == 4 and t.dtype in HALF and t.shape[1] > 1
            and t.is_contiguous() and not t.is_contiguous(memory_format=torch.channels_last))


def is_depthwise(x_shape, w_shape) -> bool:
    """A depthwise convolution, from its input's and weight's shapes: one input channel per group,
    more than one group (the weight's second dimension is 1 and the input has several channels)."""
    return len(w_shape) >= 3 and w_shape[1] == 1 and x_shape[1] > 1


def _depthwise(x: torch.Tensor, w: torch.Tensor) -> bool:
    return w.dim() == 4 and is_depthwise(x.shape, w.shape)


def _pointwise(w: torch.Tensor, stride, padding) -> bool:
    """A 1x1 convolution of stride 1 and no padding: on NCHW a plain GEMM per image (the weight times
    the image as a channels x pixels matrix), which runs on the tensor cores with no transpose."""
    return (w.dim() == 4 and tuple(w.shape[2:]) == (1, 1) and all(s == 1 for s in stride)
            and all(p == 0 for p in padding))


def _skips(x, w, stride, padding) -> bool:
    return not _nchw_half(x) or _depthwise(x, w) or _pointwise(w, stride, padding)


def transposes(name: str, args: tuple, out) -> list[tuple[str, torch.Tensor]]:
    """(op name, tensor) of each layout transpose cuDNN runs for this call, in order; empty for any
    other op or layout."""
    if name == "convolution":
        x, w = args[0], args[1]
        if _skips(x, w, args[3], args[4]):
            return []
        return [(TO_NHWC, x), (TO_NCHW, out)]
    if name == "convolution_backward":
        grad, x, w = args[0], args[1], args[2]
        if _skips(x, w, args[4], args[5]):
            return []
        mask = args[10] if len(args) > 10 else (True, True, True)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        steps = [(TO_NHWC, grad)]
        if mask[1]:
            steps.append((TO_NHWC, x))  # the weight gradient reads the input in NHWC too
        if mask[0] and isinstance(outs[0], torch.Tensor):
            steps.append((TO_NCHW, outs[0]))
        return steps
    return []
