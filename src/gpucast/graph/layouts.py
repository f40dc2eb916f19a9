"""The layout transposes cuDNN runs around a tensor-core convolution on NCHW tensors.

Tensor-core convolutions run in NHWC (channels last). PyTorch's tensors are NCHW unless a job asks
for ``torch.channels_last``, so for an FP16/BF16 convolution on an NCHW input cuDNN transposes the
input to NHWC before its kernel and the output back after it, each a kernel of its own that reads
and writes the whole tensor (MosaicML Composer's "Channels Last" method card, after NVIDIA: "the
cuDNN library performs a transpose to convert the tensor into NHWC format ... This transpose
introduces overhead"; our H200, data/measurements/kernels/2026-12-04-h200-2.csv: a bf16 NCHW layer
takes 1.5-2.2x its channels-last time, the difference the four passes over input and output at
about half the DRAM bandwidth). The backward transposes the gradient it receives, the input again for
the weight gradient, and the data gradient it returns.

A float32 convolution runs on the TF32 tensor cores (``torch.backends.cudnn.allow_tf32``, on by
default) and is recorded with the same transposes in float32. Whether a GPU runs them is the
estimator's business (:func:`gpucast.estimate.kernels.absent`): our H200 pays them (its float32 NCHW
layers take about their TF32 time plus the bf16 layer's transposes, ``achieved.yaml``'s
``transpose_fp32``), Ampere's cuDNN has TF32 kernels that read NCHW, and a GPU without TF32 runs float32
convolutions on the CUDA cores, in NCHW.

The tracer (:mod:`gpucast.graph.tracer`) records each transpose :func:`transposes` names as an op
of its own after the convolution (``cudnn_nchw_to_nhwc`` / ``cudnn_nhwc_to_nchw``, category
``copy``, launched from C++, allocating nothing the step keeps: cuDNN's workspace). Their rate is
``achieved.yaml``'s ``transpose`` family (``bandwidth_per_sm``, measured on our H200: Hopper and
data-center Blackwell; on other GPUs the DRAM roofline), ``transpose_fp32`` for float32 (Hopper only:
the GPUs that run them).

Three kinds of convolution pay none: depthwise ones (PyTorch's own NCHW kernels), 1x1 convolutions
of stride 1 without padding (on NCHW a GEMM per image; our H200: ResNet-50's 64->256 1x1 layer at
56x56 takes the same time in both layouts, 181 and 175 us) and a float32 image network's first layer
(cuDNN's CUDA-core kernel, ``achieved.yaml``'s ``conv_stem``, measured on NCHW).

Not modelled: transposes cuDNN may still choose for a 1x1 layer on small images (ResNet-50's
2048->512 layer at 7x7 took 2x its channels-last time), GPUs without tensor cores (no NHWC preference:
their FP16 convolutions pay these transposes here too), 3-D convolutions, cuDNN fusing a transpose into
the convolution for some shapes.
"""

from __future__ import annotations

import torch

# the dtypes cuDNN runs on tensor cores in NHWC: half precision, and float32 as TF32
TENSOR_CORE = (torch.float16, torch.bfloat16, torch.float32)
# A convolution over this many input channels or fewer (one group) is an image network's first layer,
# which cuDNN cannot feed to the tensor cores at their rate: their convolutions want the input
# channels in multiples of 8 (FP16/BF16) or 4 (TF32), and a 3-channel image is padded or gathered
# pixel by pixel (NVIDIA Deep Learning Performance Guide, 'Convolutional Layers: Channels In and Out';
# MLPerf ResNet-50 submissions pad the image to 4 channels for cuDNN's C=4 first-layer kernels).
STEM_MAX_CHANNELS = 4
TO_NHWC = "cudnn_nchw_to_nhwc"
TO_NCHW = "cudnn_nhwc_to_nchw"


def _nchw(t) -> bool:
    """A 4-D half-precision or float32 tensor laid out NCHW (and not also channels-last, as 1x1 images
    are)."""
    return (isinstance(t, torch.Tensor) and t.dim() == 4 and t.dtype in TENSOR_CORE and t.shape[1] > 1
            and t.is_contiguous() and not t.is_contiguous(memory_format=torch.channels_last))


def is_depthwise(x_shape, w_shape) -> bool:
    """A depthwise convolution, from its input's and weight's shapes: one input channel per group,
    more than one group (the weight's second dimension is 1 and the input has several channels)."""
    return len(w_shape) >= 3 and w_shape[1] == 1 and x_shape[1] > 1


def is_stem(x_shape, w_shape) -> bool:
    """A convolution over at most :data:`STEM_MAX_CHANNELS` input channels in one group (an image
    network's first layer: the input's and the weight's channels agree)."""
    return len(w_shape) >= 3 and x_shape[1] == w_shape[1] and 0 < x_shape[1] <= STEM_MAX_CHANNELS


def _depthwise(x: torch.Tensor, w: torch.Tensor) -> bool:
    return w.dim() == 4 and is_depthwise(x.shape, w.shape)


def _pointwise(w: torch.Tensor, stride, padding) -> bool:
    """A 1x1 convolution of stride 1 and no padding: on NCHW a plain GEMM per image (the weight times
    the image as a channels x pixels matrix), which runs on the tensor cores with no transpose."""
    return (w.dim() == 4 and tuple(w.shape[2:]) == (1, 1) and all(s == 1 for s in stride)
            and all(p == 0 for p in padding))


def _skips(x, w, stride, padding) -> bool:
    if not _nchw(x) or _depthwise(x, w) or _pointwise(w, stride, padding):
        return True
    # a float32 first layer runs cuDNN's CUDA-core kernel on NCHW (achieved.yaml's conv_stem)
    return x.dtype == torch.float32 and w.dim() == 4 and is_stem(x.shape, w.shape)


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
