"""A kernel's grid on the GPU's SMs: the tiles a library cuts an op into, the waves they run in.

A GPU runs a kernel's thread blocks (CTAs) on its ``S`` SMs, one wave of at most ``S`` tiles after
another. :func:`grid_fill` gives, per op, the share ``phi`` of the steady-state rate (every SM busy
with a large tile) that the op's grid reaches on this GPU or MIG slice; the kernel model divides
the op's FLOPs by ``peak x achieved x phi`` (:mod:`gpucast.estimate.kernels`).

* **GEMMs** (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``; a linear layer is one): a
  ``batch x M x N x K`` problem cut into ``m x n`` CTA tiles runs ``T = batch ceil(M/m) ceil(N/n)``
  tiles; edge tiles cost a whole tile (tile quantisation); ``T`` tiles take ``ceil(T / S)`` waves,
  the last one partly filled (wave quantisation). When ``T`` is below ``S`` and ``K`` is long, the
  library splits ``K`` (split-K, where ``K`` is the longest side) into ``s`` slices, ``T s`` CTAs, and reduces the ``s`` partial
  products in fp32 (their bytes cost bandwidth). Among the architecture's tiles
  (:data:`GEMM_TILES`) and splits, the one that finishes first is taken: cuBLAS's heuristics aim
  at that. A tile's own rate falls with its size: per ``k`` step an ``m x n`` tile does ``m n``
  multiply-adds on ``m + n`` loaded operands, so its operand reuse is ``w = m n / (m + n)``, and
  its rate relative to the architecture's largest tile is ``w / (w + w0)`` over the same for the
  largest (``EstimatorConfig.tile_reuse_half``: ``w0``, times :data:`TILE_REUSE_SCALE` on GPUs whose
  SMs compute faster than they load).
* **Convolutions** as implicit GEMMs (cuDNN's and CUTLASS's form): forward ``M = n P Q``, ``N = k/g``,
  ``K = (c/g) R S`` per group; backward's data gradient ``M = n P Q``, ``N = c/g``, ``K = (k/g) R S``
  and weight gradient ``M = k/g``, ``N = (c/g) R S``, ``K = n P Q``.
* **cuDNN RNNs** (``_cudnn_rnn`` and its backward, :mod:`gpucast.graph.rnn`): per layer and direction
  the input projection of every time step as one GEMM, then a recurrent GEMM of ``batch`` rows a time
  step, run one after another (each waits for the step before); the backward's recurrent data
  gradient a step, its input-data gradient and weight gradients over every step. The kernel model
  gives each of those GEMMs its own ramp and streams their weights at one step's CTAs.
* **Fused attention**: FlashAttention-2's forward runs one CTA per ``128`` query rows per head,
  its backward one per ``128`` key rows (Dao 2023, FlashAttention-2, section 3.2: the grid over
  sequence blocks and heads; ``kBlockM = 128`` in flash_fwd_launch_template.h for head dims up to
  128); memory-efficient attention (xFormers' CUTLASS kernels) ``64`` rows; each CTA's share of the
  op's FLOPs is its rows' share, so a short sequence pays a whole block.

**Memory-bound kernels** (elementwise, normalisation, reductions, copies): PyTorch launches
``ceil(numel / 512)`` blocks (TensorIterator's vectorised launch: 128 threads x 4 elements,
aten/src/ATen/native/cuda/Loops.cuh ``num_threads() x thread_work_size()``); a block keeps about
one SM's fair share of DRAM bandwidth in flight (Little's law: ~8 KB in flight per 128-thread
block over ~0.6 us of DRAM latency is ~14 GB/s, an A100's 1,555 GB/s / 108 SMs), so a kernel of
fewer blocks than the whole GPU has SMs reaches ``blocks / S_whole`` of its bandwidth, on a MIG
slice as on the whole GPU (:func:`memory_fill`).

What a GPU of fewer SMs does with each grid follows: a MIG slice runs a small kernel (fewer tiles
than its SMs) as fast as the whole GPU and a large one at its SMs' share; a tensor-parallel rank's
GEMMs are narrower (``N / t`` or ``K / t``), so a GEMM that filled one wave still takes one.

On Hopper and Blackwell the library may also run a persistent stream-K kernel
(:data:`STREAM_K`): the tiles' K loops cut into equal shares per SM, the partly done tiles fixed
up in fp32; it is one more candidate, so a problem whose tiles fill the SMs badly is no longer
rounded up to a whole wave there.

Not modelled: several CTAs of one kernel sharing an SM (occupancy above one large tile),
stream-K on Ampere and earlier, cluster launch and TMA multicast, L2 hits between tiles, the exact tile table of each cuBLAS release (the sets below are
the tile sizes cuBLAS's kernel names show). Causal attention's skipped blocks are left out of the
op's FLOPs at capture (:mod:`gpucast.graph.causal`).
"""

from __future__ import annotations

import math

# CTA tiles (M x N) the libraries pick from, per architecture: the tile sizes in cuBLAS's kernel
# names as profilers print them (e.g. maxwell_sgemm_128x64_nn, volta_h884gemm_256x128_ldg8_nn,
# ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn,
# sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1) and CUTLASS's
# default GEMM configurations per architecture.
_SIMT = ((128, 128), (128, 64), (64, 64), (64, 32), (32, 32))
_SMALL = ((64, 32), (32, 64), (32, 32))  # cuDNN's small-channel kernels (e.g. ..._tilesize32x32x64_...)
_VOLTA = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), *_SMALL)
_AMPERE = _VOLTA
_HOPPER = _VOLTA
GEMM_TILES: dict[str, tuple[tuple[int, int], ...]] = {
    "kepler": _SIMT, "maxwell": _SIMT, "pascal": _SIMT, "volta": _VOLTA, "turing": _VOLTA,
    "ampere": _AMPERE, "ada": _AMPERE, "hopper": _HOPPER, "blackwell": _HOPPER,
}
# How much harder a small tile is to feed, relative to Ampere: a tile's operands stream through the
# SM's L1/shared memory, and Hopper doubled the tensor rate per SM (4,096 dense FP16 FLOP/clk against
# the A100's 2,048) while its L1 throughput per SM grew little (124.1 vs 106.8 B/clk/SM measured on an
# H800 PCIe and an A100 PCIe: Luo et al. 2024, 'Benchmarking and Dissecting the Nvidia Hopper GPU
# Architecture', Table V): (4096 / 124.1) / (2048 / 106.8) = 1.72. Blackwell assumed as Hopper.
TILE_REUSE_SCALE = {"hopper": 1.72, "blackwell": 1.72}
# Architectures whose GEMM library also runs persistent stream-K kernels: the tiles' K loops are cut
# into equal shares of MAC iterations, one per SM, and partly done tiles are fixed up in fp32 (Osama
# et al., 'Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix Multiplication on
# the GPU', PPoPP 2023; CUTLASS 3's SM90 persistent tile schedulers with stream-K): no wave
# quantisation beyond one K step per SM.
STREAM_K = frozenset({"hopper", "blackwell"})
K_STEP = 64  # the K of one main-loop iteration (tile shapes 128x256x64 in cuBLAS's SM90 kernel names)
SPLIT_K_MIN = 256  # K a split-K slice keeps at least (a tile's K loop of several 32/64-wide steps)
SPLITS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # split-K factors tried
ATTENTION_ROWS = {"flash": 128, "efficient": 64, "cudnn": 128}
MIN_GEMM_SIDE = 16  # a side below this is not a tiled GEMM (cuBLAS's GEMV kernels; depthwise convolutions)
ELEMENTS_PER_BLOCK = 512  # TensorIterator: 128 threads x 4 elements (Loops.cuh)
# A GEMM CTA's cp.async/TMA pipeline holds 3-4 stages of its A and B tiles (128x32 or 128x64 each, 2
# bytes): ~48-64 KB in flight, about 8 elementwise blocks' ~8 KB (CUTLASS's default sm80 configurations
# keep 3-4 stages: 'stages_64x3', 'stages_32x4' in cuBLAS's kernel names).
TILE_STREAM_BLOCKS = 8

_GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "addbmm"})


def _numel(shape) -> int:
    return math.prod(shape) if isinstance(shape, tuple) else 0


def _is_shape(s) -> bool:
    return isinstance(s, tuple) and all(isinstance(d, int) for d in s)


def _problems(op: str, shapes: tuple, out_shapes: tuple) -> list[tuple[int, int, int, int]] | None:
    try:
        if op in ("mm", "_scaled_mm"):
            (m, k), (_, n) = shapes[0], shapes[1]
            return [(1, m, n, k)]
        if op == "addmm":
            (m, k), (_, n) = shapes[1], shapes[2]
            return [(1, m, n, k)]
        if op == "bmm":
            (b, m, k), (_, _, n) = shapes[0], shapes[1]
            return [(b, m, n, k)]
        if op == "baddbmm":
            (b, m, k), (_, _, n) = shapes[1], shapes[2]
            return [(b, m, n, k)]
        if op == "addbmm":  # the batch summed into one output: one GEMM of K = b k
            (b, m, k), (_, _, n) = shapes[1], shapes[2]
            return [(1, m, n, b * k)]
        if op == "convolution":
            return _conv_forward(shapes[0], shapes[1], out_shapes[0])
        if op == "convolution_backward":
            return _conv_backward(shapes, out_shapes)
        if op in ("_cudnn_rnn", "_cudnn_rnn_backward"):
            return _rnn(shapes, out_shapes, op.endswith("backward"))
    except (ValueError, TypeError, IndexError):
        return None
    return None


def gemm_problems(op: str, shapes: tuple, out_shapes: tuple) -> list[tuple[int, int, int, int]] | None:
    """The (batch, M, N, K) GEMMs an op's kernels run, or None when the op is not one the grid
    model knows (its FLOPs then run at the family's steady rate): also a problem with a side
    under :data:`MIN_GEMM_SIDE` (a matrix-vector product, a depthwise convolution: kernels of
    their own, bandwidth-bound, not tiled GEMMs)."""
    probs = _problems(op, shapes, out_shapes)
    if not probs or any(min(m, n, k) < MIN_GEMM_SIDE for _, m, n, k in probs):
        return None
    return probs


def _groups(x: tuple, w: tuple, out: tuple) -> int:
    c, k = x[1], out[1]
    if w[0] == k and w[1] and c % w[1] == 0:
        return max(1, c // w[1])
    return max(1, k // w[1]) if w[1] else 1  # transposed: weight (c, k/g, ...)


def _conv_forward(x: tuple, w: tuple, out: tuple) -> list[tuple[int, int, int, int]]:
    g = _groups(x, w, out)
    n, c, k = x[0], x[1], out[1]
    return [(g, n * _numel(out[2:]), k // g, (c // g) * _numel(w[2:]))]


def _conv_backward(shapes: tuple, out_shapes: tuple) -> list[tuple[int, int, int, int]]:
    grad, x, w = shapes[0], shapes[1], shapes[2]
    g = _groups(x, w, grad)
    n, c, k = x[0], x[1], grad[1]
    rs = _numel(w[2:])
    outs = [s for s in out_shapes if _is_shape(s) and s]
    probs = []
    if any(s == x for s in outs):  # the data gradient: the forward's multiply-adds, transposed
        probs.append((g, n * _numel(grad[2:]), c // g, (k // g) * rs))
    if any(s == w for s in outs):  # the weight gradient
        probs.append((g, k // g, (c // g) * rs, n * _numel(grad[2:])))
    return probs


def _rnn(shapes: tuple, out_shapes: tuple, backward: bool) -> list[tuple[int, int, int, int]]:
    """cuDNN's GEMMs for an RNN call (:mod:`gpucast.graph.rnn`), per layer and direction: the input
    projection of every time step as one GEMM, then one recurrent GEMM of the batch's rows a step,
    each waiting for the step before; the backward's recurrent data gradient a step, its input-data
    gradient and its two weight gradients over every step. The shapes say the rest: the input
    ``(T, B, in)`` or ``(B, T, in)``, the first layer's ``w_ih`` ``(gates x H, in)``, ``hx``
    ``(layers x directions, B, H)``, the output's last dimension ``H x directions``. The first layer's
    input-data gradient is listed even where the input needs none (the shapes do not say; its FLOPs
    then exceed flop_counter's count by that GEMM, which only weighs in the grid's share)."""
    x, weights, hx = shapes[0], shapes[1], shapes[3]
    gates_h, width = weights[0]
    groups, b, h = hx
    dirs = max(1, out_shapes[0][-1] // h)
    t = _numel(x) // (b * width)
    probs = []
    for g in range(groups):
        k_in = width if g < dirs else h * dirs
        if backward:
            probs += [(1, b, h, gates_h)] * t + [(1, t * b, k_in, gates_h), (1, gates_h, k_in, t * b),
                                                 (1, gates_h, h, t * b)]
        else:
            probs += [(1, t * b, gates_h, k_in)] + [(1, b, gates_h, h)] * t
    return probs


def attention_grid(op: str, shapes: tuple) -> tuple[int, float] | None:
    """(CTAs, share of the op's FLOPs each runs) of a fused attention kernel, or None."""
    kind = ("efficient" if "efficient" in op else "cudnn" if "cudnn" in op else "flash" if "flash" in op else None)
    if kind is None:
        return None
    rows = ATTENTION_ROWS[kind]
    backward = op.endswith("backward")
    try:
        if op.startswith("_scaled_dot_product"):  # (b, h, L, d)
            q = shapes[1] if backward else shapes[0]
            k = shapes[2] if backward else shapes[1]
            b, h, lq, lk = q[0], q[1], q[2], k[2]
        else:  # _flash_attention_* / _efficient_attention_*: (b, L, h, d)
            q = shapes[1] if backward else shapes[0]
            k = shapes[2] if backward else shapes[1]
            b, h, lq, lk = q[0], q[2], q[1], k[1]
    except (IndexError, TypeError):
        return None
    length = lk if backward else lq  # backward parallelises over key blocks (FlashAttention-2, 3.2)
    if not length:
        return None
    blocks = b * h * math.ceil(length / rows)
    return blocks, rows / (b * h * length)


def _tile_rate(m: int, n: int, w_max: float, w0: float) -> float:
    w = m * n / (m + n)
    return (w / (w + w0)) / (w_max / (w_max + w0))


def gemm_fill(problems: list[tuple[int, int, int, int]], arch: str, sms: int, w0: float,
              sm_rate: float, reduce_s_per_byte: float) -> float:
    """``phi`` of a list of GEMMs run one after another on ``sms`` SMs (module docstring):
    their FLOPs over the steady rate, divided by the time the best tile and split take.
    ``sm_rate``: one SM's FLOP/s at the family's steady rate (only the split-K reduction's bytes,
    at ``reduce_s_per_byte``, need it in seconds)."""
    tiles = GEMM_TILES.get(arch, _AMPERE)
    w_max = max(m * n / (m + n) for m, n in tiles)
    w0 = w0 * TILE_REUSE_SCALE.get(arch, 1.0)
    ideal = 0.0
    took = 0.0
    for b, m, n, k in problems:
        if min(b, m, n, k) <= 0:
            continue
        flops = 2.0 * b * m * n * k
        ideal += flops / (sms * sm_rate)
        best = math.inf
        for tm, tn in tiles:
            rate = sm_rate * _tile_rate(tm, tn, w_max, w0)
            t_mn = b * math.ceil(m / tm) * math.ceil(n / tn)
            s_max = min(sms // t_mn, k // SPLIT_K_MIN) if t_mn < sms and k > max(m, n) else 1
            for s in (1, *(s for s in SPLITS if s <= s_max)):
                waves = math.ceil(t_mn * s / sms)
                t = waves * 2.0 * tm * tn * math.ceil(k / s) / rate
                if s > 1:  # s fp32 partial products, reduced through L2: one pass at DRAM speed
                    t += 4.0 * b * m * n * s * reduce_s_per_byte
                best = min(best, t)
            if arch in STREAM_K:  # every SM an equal share of the K steps; one partial tile fixed up per SM
                steps = t_mn * math.ceil(k / K_STEP)
                t = math.ceil(steps / sms) * 2.0 * tm * tn * K_STEP / rate
                t += 4.0 * tm * tn * min(sms, t_mn) * reduce_s_per_byte
                best = min(best, t)
        took += best
    return min(1.0, ideal / took) if took > 0 else 1.0


def gemm_ctas(problems: list[tuple[int, int, int, int]]) -> int:
    """CTAs of the problems at a 128x128 tile: what a GEMM keeps in flight against DRAM."""
    return sum(b * math.ceil(m / 128) * math.ceil(n / 128) for b, m, n, _ in problems)


def attention_fill(blocks: int, sms: int) -> float:
    """``phi`` of a fused attention kernel: its CTAs' work over the waves they take."""
    return blocks / (math.ceil(blocks / sms) * sms) if blocks > 0 else 1.0


def memory_fill(numel: int, sms_whole: int) -> float:
    """Share of its bandwidth a memory-bound kernel of ``numel`` elements reaches (module
    docstring): its blocks over the whole GPU's SMs, at most 1."""
    blocks = math.ceil(numel / ELEMENTS_PER_BLOCK)
    return min(1.0, blocks / sms_whole) if blocks > 0 else 1.0


def tiled_memory_fill(ctas: int, sms_whole: int) -> float:
    """The same for a GEMM's or attention kernel's operand stream: a CTA's multi-stage pipeline
    keeps :data:`TILE_STREAM_BLOCKS` elementwise blocks' worth of bytes in flight."""
    return min(1.0, TILE_STREAM_BLOCKS * ctas / sms_whole) if ctas > 0 else 1.0


def largest_numel(shapes: tuple, out_shapes: tuple) -> int:
    """Elements of the op's largest tensor (what its elementwise/reduction grid is sized by)."""
    best = 0
    for s in (*shapes, *out_shapes):
        if _is_shape(s) and s:
            best = max(best, _numel(s))
    return best


def split_problem(problems: list[tuple[int, int, int, int]], t: int) -> list[tuple[int, int, int, int]]:
    """A tensor-parallel rank's share of each GEMM: the longer of ``N`` and ``K`` divided by ``t``
    (Megatron's column-parallel layers split ``N``, the row-parallel ones that follow them ``K``;
    of a transformer's pairs the first is the wider one: QKV and fc1 split their outputs, the
    projection and fc2 their inputs)."""
    out = []
    for b, m, n, k in problems:
        if n > k:
            out.append((b, m, max(1, n // t), k))
        else:
            out.append((b, m, n, max(1, k // t)))
    return out
