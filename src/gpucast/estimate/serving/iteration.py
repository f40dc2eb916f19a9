"""The time of one engine iteration, from the model's traced forward and the kernel model.

An iteration runs ``n`` tokens through the model: the decode tokens of ``d`` running sequences (one
each, at a mean context of ``L`` cached tokens) and prefill chunks (``p`` tokens at a mean context of
``c``). Its GPU time is

* the **dense part**: every op but attention of a forward over ``n`` tokens (engines flatten the
  batch's tokens into one matrix: GEMMs of M = n read every weight once; norms, activations, the
  cache writes), from :func:`gpucast.graph.serving.trace_iteration` of one sequence of ``n`` new
  tokens, costed by :func:`gpucast.estimate.kernels.kernel_times`;
* the **attention**: the traced attention kernels of a decode step of ``d`` sequences at ``L``
  (flash decoding reads each sequence's K/V once) and of a prefill chunk of ``p`` tokens over ``c``
  cached ones, their shapes rescaled to the context asked (FLOPs grow with it, K/V bytes too);
* **tensor parallelism** ``t``: GEMMs, attention and the fused small kernels narrowed to a rank's
  share (the kernel model's ``split``), and two all-reduces of the ``n`` tokens' hidden states per layer
  (:func:`gpucast.estimate.comm.collective_time` over the node's links);
* **attention data parallelism** (``parallel.attention_dp``, :mod:`.stages`): ``n`` is one rank's
  tokens, and every op but the routed experts runs whole on them; each MoE layer takes all ``t``
  ranks' tokens (:func:`.experts.routed` with ``ranks = t``), gathered to the ranks before it and
  reduce-scattered after it (TensorRT-LLM's default ``AllGatherReduceScatter``:
  ``fused_moe/communication/allgather_reducescatter.py``, which quantises before the gather: the
  tokens go in the checkpoint's activation format, :data:`DISPATCH_BYTES`, the outputs in 16 bits);
  with ``parallel.expert_dispatcher: alltoall`` (wide expert parallelism: TensorRT-LLM's MNNVL / DeepEP
  all-to-all, SGLang's DeepEP) each token goes only to its ``k`` experts' ranks and back: a dispatch and
  a combine all-to-all of ``n k`` hidden states a rank. The ranks span nodes past ``gpus_per_node`` (an
  NVL72 rack is one NVLink domain). No all-reduce.

Its wall time: with CUDA graphs (decode iterations up to the captured batch) the GPU time plus the
engine's host time per iteration; without them (``hf``, or an eager iteration) the step gpucast's
estimator gives the traced forward on its own (each op dispatched from Python,
:mod:`gpucast.estimate.host`), plus the same host time. Weight-only int8/int4 cut the GEMMs' weight
bytes to 8/16 or 4/16 (the dequantising kernels' math is not modelled; ``mxfp4`` the routed experts'
only, to 4.25/16, at the 16-bit rate as Hopper's dequantising MoE kernels run them), ``fp8`` precision to 8/16
(FP8 weights and activations: the GEMMs at the FP8 peak; the head's GEMM is cut too, though engines keep it
in 16 bits), ``mxfp8`` to 8.25/16 and ``nvfp4`` to 4.5/16 (Blackwell's block-scaled formats, at the FP8 and FP4
peaks); an FP8 KV cache halves the attention's K/V bytes, an NVFP4 one (Blackwell) takes 4.5 bits an
element. Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank``) decodes over the
cached latents with the up-projections absorbed (:meth:`IterationModel._latent_decode`); its prefill runs
the traced decompressed attention. Mixture-of-experts GEMMs read the experts the iteration's tokens reach, on the
busiest rank under expert parallelism (:mod:`.experts`).

Results are memoised on a grid (token counts and contexts in steps of ~19 %, batch sizes in powers
of two) and interpolated linearly between grid points, so a run of thousands of iterations costs a
few dozen traces. A model whose layers are alike, or repeat with a period of ``P`` layers (by its config,
and checked once per model and plan against the whole model's decode step), is traced cut to one and two
periods, each cost taken as ``f(P) + (L / P - 1) (f(2P) - f(P))`` (:mod:`.layers`): an 80-layer model's
traces ~40x faster,
the costs within 0.5 % of the whole model's (the fused small kernels meet their floor a little
differently). ``hf`` is traced whole (its eager wall time is the estimator's, not a sum).

One module of this size because :class:`IterationModel` is one memoised cost function whose dense, attention
and collective terms share its grids and caches (layer sampling is :mod:`.layers`, draft passes
:mod:`.speculative`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpucast.estimate.comm import Group, Links, collective_time
from gpucast.estimate.kernels import kernel_times
from gpucast.formats import ELEMENT_BYTES
from gpucast.graph import causal
from gpucast.graph.linear_attention import OPS as LINEAR_OPS
from gpucast.graph.windows import chunk_share, windows_of
from gpucast.estimate.serving.experts import ITEMSIZE, is_expert_gemm, routed
from gpucast.estimate.serving.fusion import fused
from gpucast.estimate.serving.layers import _SAMPLES, layer_period, layer_sample  # noqa: F401 (tests clear _SAMPLES)
from gpucast.estimate.serving.memory import MXFP4_SHARE, WEIGHT_ONLY_SHARE
from gpucast.estimate.serving.sparse import indexer
from gpucast.estimate.serving.served import model_job, served
from gpucast.estimate.serving.speculative import draft_seconds, drafter_job
from gpucast.plan import Parallel
from gpucast.surroundings import Stack

GRID_STEP = 2 ** 0.25  # ~19 % between grid points of token counts and contexts
# Layer sampling (.layers): a model whose layers are alike is traced cut to one and two layers, and each cost of
# the whole model is f(1) + (L - 1) (f(2) - f(1)) (the embedding, final norm and head once, a layer L
# times): two small traces instead of one of every layer (an 80-layer model's traces ~40x faster).
# Checked once per model and plan against the whole model's decode step: within this share, or the
# whole model is traced.
SAMPLE_TOLERANCE = 1e-3

# A quantised checkpoint's linear weights: bytes kept per traced (16-bit) byte (gpucast.formats.ELEMENT_BYTES:
# NVFP4's 16-element blocks carry an FP8 scale each), and the GEMM operands' dtype.
QUANT_SHARE = {p: ELEMENT_BYTES[p] / 2 for p in ("fp8", "mxfp8", "nvfp4")}
QUANT_DTYPE = {"fp8": "float8_e4m3fn", "mxfp8": "float8_e4m3fn", "nvfp4": "float4_e2m1fn_x2"}
# Bytes a token's hidden element takes once quantised for the expert GEMMs: in an attention-DP MoE layer's gather
# (post-quantisation dispatch) and in the engines' permute (.fusion): FP8 one byte; NVFP4 half a byte plus one FP8
# scale per 16 elements (gpucast.formats.ELEMENT_BYTES); else 16-bit.
DISPATCH_BYTES = {p: ELEMENT_BYTES[p] for p in ("fp8", "mxfp8", "nvfp4")}
COMBINE_BYTES = 2


# The grid points by exponent: GRID_STEP ** k rounded (k up to 2 ** 64 tokens; a table instead of two
# powers per call, the same values).
_POINTS = tuple(max(1, round(GRID_STEP ** k)) for k in range(257))


def grid(x: float) -> tuple[int, int, float]:
    """Grid points around ``x`` (>= 1) and the weight of the upper one."""
    x = max(1.0, float(x))
    k = math.log(x, GRID_STEP)
    lo, hi = _POINTS[math.floor(k)], _POINTS[math.ceil(k)]
    if hi <= lo:
        return lo, lo, 0.0
    return lo, hi, min(1.0, max(0.0, (x - lo) / (hi - lo)))


def pow2(x: int) -> tuple[int, int, float]:
    x = max(1, int(x))
    lo = 1 << (x.bit_length() - 1)
    if lo == x:
        return x, x, 0.0
    return lo, lo * 2, (x - lo) / lo


class IterationModel:
    """Costs of iterations of ``job`` on ``gpu`` under ``engine`` (module docstring)."""

    def __init__(self, job, gpu, engine, env, cfg, tensor: int = 1, weights: str = "auto", kv_scale: float = 1.0,
                 expert: int = 1, attention_dp: bool = False, spec=None, dispatcher: str | None = None,
                 stages: int = 1):
        job = model_job(job)  # traces depend on the model and precision only
        self.job, self.gpu, self.engine, self.env, self.cfg = job, gpu, engine, env, cfg
        self.t = tensor
        self.e = expert
        self.spec = spec   # gpucast.estimate.serving.speculative.Speculation, or None
        self.all_to_all = dispatcher in ("alltoall", "deepep")   # attention DP's MoE dispatch (module docstring)
        self.dp = attention_dp and tensor > 1
        self.attn_t = 1 if self.dp else tensor   # the ranks attention and the dense layers split over
        self.weight_scale = WEIGHT_ONLY_SHARE.get(weights or "auto", 1.0)   # mxfp4: the experts' only
        if self.weight_scale == 1.0 and job.precision in QUANT_SHARE:  # FP8 / NVFP4 checkpoints (W8A8, W4A4)
            self.weight_scale = QUANT_SHARE[job.precision]
        # the routed experts' bytes per traced byte: MXFP4 experts (GPT-OSS) at 4.25 bits, else the rest's
        self.expert_scale = MXFP4_SHARE if weights == "mxfp4" else self.weight_scale
        # an expert GEMM activation's bytes (W8A8, W4A4 checkpoints quantise them): the gather's and the permute's
        self.operand_bytes = DISPATCH_BYTES.get(job.precision, 2.0)
        self.kv_scale = float(kv_scale)   # the cache's bytes per 16-bit K/V byte (FP8 0.5, NVFP4 0.28)
        self.served = served(job)
        self._samples: dict[int, object] = {}   # layers -> the served model of the model cut to them
        self.shape = self.served.shape
        self.cache = "paged" if engine.paged else "dynamic"
        par = Parallel().resolved(gpu)
        self.links = Links.of(gpu, par.network_spec())
        self.per_node = par.gpus_per_node
        # tensor groups of one node whose collectives run at once (a pipeline's stages): over PCIe they share the
        # host's bandwidth (gpucast.estimate.comm, Group.concurrent)
        self.host_groups = max(1, min(stages, self.per_node // max(1, tensor)))
        # the engine's own attention kernel on this GPU (.engines), unless the job's stack names one
        own = dict(engine.attention_kernels).get(gpu.architecture)
        self.stack = job.stack or Stack()
        if own and not self.stack.attention:
            self.stack = dataclasses.replace(self.stack, attention=own)
        # GPU times depend on the model, GPU, plan, attention kernel and whether small ops are fused, not on the
        # engine's scheduler settings: engines with their own kernels (vLLM, SGLang, TensorRT-LLM) share them
        shared = _COSTS.setdefault((job.key, gpu, tensor, expert, self.dp, self.all_to_all, self.weight_scale,
                                    self.expert_scale, self.kv_scale, engine.name == "hf", self.stack.attention,
                                    id(env), cfg), ({}, {}))
        if len(_COSTS) > _COSTS_MAX:
            _COSTS.pop(next(iter(_COSTS)))
        self._dense: dict[int, tuple[float, float]] = shared[0]
        self._attn: dict[tuple, float] = shared[1]
        self._by_tokens: dict[int, tuple[float, float, float]] = {}  # this engine's (dense, eager, all-reduce)
        self._dec_cells: dict[tuple, tuple] = {}   # decode attention's grid corners by (batch, context cell)

    # ------------------------------------------------------------------ pieces
    def _trace(self, batch: int, new: int, ctx: int, layers: int | None = None):
        if layers is None:
            return self.served.trace(batch, new, ctx, self.cache)
        cut = self._samples.get(layers)
        if cut is None:
            cut = self._samples[layers] = served(layer_sample(self.job, layers))
        return cut.trace(batch, new, ctx, self.cache)

    def _split(self, trace) -> np.ndarray | None:
        if self.t <= 1:
            return None
        if self.dp:   # only the routed experts are spread over the ranks (stored at t x a rank's share: .experts)
            return np.array([float(self.t) if is_expert_gemm(o, self.shape) else 1.0 for o in trace.ops])
        # GEMMs, attention and the fused small kernels (their bytes are mostly the MLP's and the heads'
        # activations, which tensor parallelism shards) run a rank's share; the embedding is replicated
        return np.array([float(self.t) if o.category in ("matmul", "attention") or o.op == "fused_elementwise"
                         else 1.0 for o in trace.ops])

    def _quantised(self, trace):
        if self.weight_scale == 1.0:
            return trace
        low = QUANT_DTYPE.get(self.job.precision)   # W8A8 / W4A4: the GEMMs on those tensor cores (kernels.math_peak)
        ops = []
        for o in trace.ops:
            if low and is_expert_gemm(o, self.shape):   # their weight bytes are cut where they are routed (.experts)
                o = dataclasses.replace(o, dtype=low)
            elif o.category == "matmul" and len(o.shapes) >= 2 and len(o.shapes[1]) == 2:
                k, n = o.shapes[1]
                size = o.bytes_read / max(1, sum(math.prod(s) for s in o.shapes[:2]))
                cut = int(k * n * size * (1 - self.weight_scale))
                o = dataclasses.replace(o, bytes_read=max(0, o.bytes_read - cut),
                                        **({"dtype": low} if low else {}))
            ops.append(o)
        return dataclasses.replace(trace, ops=ops)

    def _times(self, trace, layers: int | None = None):
        """(the trace as the engine runs it, its ops' GPU seconds); ``layers``: the traced model's layers
        (the whole model's unless a cut one was traced)."""
        trace = self._quantised(routed(trace, self.shape, self.t, self.e, self.expert_scale, self.t if self.dp else 1))
        if self.engine.name != "hf":   # engines with their own kernels fuse the small ops (.fusion)
            trace = fused(trace, layers or self.shape["layers"], self.shape, self.operand_bytes,
                          self.t if self.dp else 1)
        return trace, kernel_times(trace, self.gpu, self.job.precision, self.cfg, self.stack,
                                   split=self._split(trace)).time

    def _dense_at(self, n: int) -> tuple[float, float]:
        """(GPU seconds, eager wall seconds) of the non-attention ops of a forward over ``n`` tokens."""
        got = self._dense.get(n)
        if got is None:
            if self.needs_eager(n) and self.engine.name == "hf":
                tr, kt = self._times(self._trace(1, n, 0))
                mask = np.array([o.category != "attention" for o in tr.ops])
                gpu_s = float(kt[mask].sum())
                eager = self._eager_wall(tr, float(kt.sum())) - float(kt[~mask].sum())
            else:  # engines with their own eager paths hide launches behind the kernels (_eager_wall)
                gpu_s = eager = self._over_layers(lambda k: self._dense_gpu(self._trace(1, n, 0, k), k))
            got = self._dense[n] = (gpu_s, max(gpu_s, eager))
        return got

    def cut_to(self, layers: int):
        """The model cut to its first ``layers`` layers (:func:`layer_sample`), or None when they are unalike."""
        return layer_sample(self.job, layers)

    def _dense_gpu(self, trace, layers: int | None) -> float:
        tr, kt = self._times(trace, layers)
        return float(sum(t for o, t in zip(tr.ops, kt) if o.category != "attention"))

    def _over_layers(self, fn) -> float:
        """``fn(layers)`` of the whole model: from models cut to one and two periods of ``P`` layers where
        the layers repeat with period ``P`` (1: alike; a hybrid's pattern, such as Qwen3-Next's three linear
        layers and one full: :func:`layer_period`), as ``f(P) + (L / P - 1) (f(2P) - f(P))``; else
        ``fn(None)``, the whole traced model."""
        if not self._sampled():
            return fn(None)
        p = self.period
        one = fn(p)
        return one + (self.shape["layers"] // p - 1) * (fn(2 * p) - one)

    @property
    def period(self) -> int:
        got = self._attn.get(("period",))
        if got is None:
            got = self._attn[("period",)] = layer_period(self.job) or 0
        return got

    def _sampled(self) -> bool:
        """Whether the cut models stand for the whole one: checked once per model and plan against the
        whole model's decode step (:data:`SAMPLE_TOLERANCE`)."""
        key = ("sampled",)
        got = self._attn.get(key)
        if got is None:
            got = False
            p = self.period
            if self.engine.name != "hf" and p and self.shape["layers"] > 2 * p:
                whole = self._step_gpu(None)
                cut = self._step_gpu(p) + (self.shape["layers"] // p - 1) * (self._step_gpu(2 * p) - self._step_gpu(p))
                got = abs(cut - whole) <= SAMPLE_TOLERANCE * whole
            self._attn[key] = got
        return got

    def _step_gpu(self, layers: int | None) -> float:
        """GPU seconds of a decode step of 4 sequences at 256 cached tokens (the check's shape)."""
        tr, kt = self._times(self._trace(4, 1, 256, layers), layers)
        return float(kt.sum())

    def needs_eager(self, n: int) -> bool:
        return not self.engine.cuda_graphs or n > self.engine.graph_max_batch

    def _eager_wall(self, trace, gpu_s: float) -> float:
        """The step gpucast's estimator gives a traced forward run eagerly (Python dispatch per op)."""
        from gpucast.estimate import estimate

        if self.engine.name != "hf":  # engines' own eager paths launch from C++/Python with their fused ops:
            return gpu_s              # long prefill kernels hide the launches
        est = estimate(trace, self.job, self.gpu, self.cfg, self.env)
        return float(est.step_time_s)

    def _attention(self, batch: int, new: int, ctx: int) -> float:
        """GPU seconds of the attention kernels of ``batch`` sequences of ``new`` tokens over ``ctx`` cached."""
        key = (batch, new, ctx)
        got = self._attn.get(key)
        if got is None:
            got = self._attn[key] = self._over_layers(lambda k: self._attention_of(batch, new, ctx, k))
        return got

    def _attention_of(self, batch: int, new: int, ctx: int, layers: int | None) -> float:
        ref_ctx = 256 if new == 1 else 0
        tr = self._trace(batch, new, ref_ctx, layers)
        ops = [o for o in tr.ops if o.category == "attention"]
        if not ops:
            return 0.0
        total_ref = ref_ctx + new
        total = ctx + new
        windows = self._windows()
        sparse = self.shape.get("sparse")
        index = [indexer(o, batch, new, ctx, sparse, self.attn_t) for o in ops] if sparse else []   # DSA (.sparse)
        if new == 1 and self.shape.get("mla"):
            seen = min(total, sparse["topk"]) if sparse else total   # DSA: the top-k latents only
            sub = dataclasses.replace(tr, ops=[self._latent_decode(o, batch, seen) for o in ops] + index)
            return float(self._times(sub, layers)[1].sum())
        scaled = list(index)
        for o in ops:
            if o.op in LINEAR_OPS:   # a linear layer's work is per token and sequence, not per cached token;
                if ctx and new > 1:  # a chunk continuing a sequence also reads the state its trace (at 0) did not
                    state = o.bytes_written - math.prod(o.out_shapes[0]) * ITEMSIZE.get(o.dtype, 2)
                    o = dataclasses.replace(o, bytes_read=o.bytes_read + max(0, int(state)))
                scaled.append(o)
                continue
            f = fb = total / total_ref   # FLOPs and K/V bytes grow with the keys each query reads
            if new > 1 and causal.traced_causal(o):   # a causal chunk's triangle over its cache (graph.causal)
                f = causal.chunk_pairs(new, ctx) / causal.chunk_pairs(new, ref_ctx)
            w = windows[o.block] if 0 <= o.block < len(windows) else 0
            if w:   # a sliding layer's kernel reads and computes its window only (gpucast.graph.windows)
                f *= chunk_share(w, ctx, new)
                fb *= chunk_share(w, ctx, new)
            shapes = tuple(tuple(d if i != len(s) - 2 or j == 0 or d != total_ref else total
                                 for i, d in enumerate(s)) for j, s in enumerate(o.shapes))
            kv_bytes = sum(math.prod(s) for s in o.shapes[1:3]) if len(o.shapes) >= 3 else 0
            size = o.bytes_read / max(1, sum(math.prod(s) for s in o.shapes))
            kv_now = kv_bytes * size * fb * self.kv_scale
            rest = o.bytes_read - kv_bytes * size
            scaled.append(dataclasses.replace(o, shapes=shapes, flops=int(o.flops * f),
                                              bytes_read=int(max(0.0, rest) + kv_now)))
        sub = dataclasses.replace(tr, ops=scaled)
        return float(self._times(sub, layers)[1].sum())

    def _windows(self) -> list[int]:
        """Each layer's sliding window (0: full attention), for engines whose kernels take it (not ``hf``);
        DeepSeek sparse attention's top-k counts as every layer's window (each query attends that many keys)."""
        if self.engine.name == "hf":
            return []
        got = self._attn.get(("windows",))
        if got is None:
            sparse = self.shape.get("sparse")
            got = [sparse["topk"]] * self.shape["layers"] if sparse else windows_of(self.job)
            self._attn[("windows",)] = got
        return got

    def _latent_decode(self, op, batch: int, total: int):
        """A decode step's attention over MLA's latent cache as vLLM's MLA backends run it (FlashMLA; the
        up-projections absorbed into the query and the output): every head's query of ``lora + rope`` dims
        against each sequence's ``total`` cached latents (scores), then the weighted latents (``lora``
        dims); the latents read once per sequence, by every tensor-parallel rank (one head: replicated),
        so their bytes are stored ``t`` times over the split's division (module docstring)."""
        m = self.shape["mla"]
        heads, d, lora = self.shape["heads"], m["lora"] + m["rope"], m["lora"]
        size = ITEMSIZE.get(op.dtype, 2)
        latent = batch * total * d * size * self.kv_scale
        q_out = batch * heads * (d + lora) * size
        return dataclasses.replace(
            op, shapes=((batch, heads, 1, d), (batch, 1, total, d), (batch, 1, total, lora)),
            out_shapes=((batch, heads, 1, lora),), flops=int(2 * batch * heads * total * (d + lora)),
            bytes_read=int(latent * self.attn_t + batch * heads * d * size),
            bytes_written=int(q_out - batch * heads * d * size))

    def _interp(self, fn, x: float, snap=grid):
        lo, hi, w = snap(x)
        a = fn(lo)
        if w == 0.0 or hi == lo:
            return a
        b = fn(hi)
        if isinstance(a, tuple):
            return tuple(u + (v - u) * w for u, v in zip(a, b))
        return a + (b - a) * w

    def _allreduce(self, n: int) -> float:
        """Seconds of an iteration's tensor-parallel collectives at ``n`` tokens (a rank's, under
        attention DP: the MoE layers' gather and reduce-scatter instead; module docstring)."""
        if self.t <= 1:
            return 0.0
        if self.dp:
            group = Group(self.t, min(self.t, self.per_node), self.host_groups)
            if self.all_to_all:   # each token to its k experts' ranks and back
                sent = n * (self.shape.get("experts_per_token") or 1) * self.shape["hidden"]
                return self.shape.get("moe_layers", 0) * (
                    collective_time("all-to-all", sent * self.operand_bytes, group, self.links)
                    + collective_time("all-to-all", sent * COMBINE_BYTES, group, self.links))
            tokens = self.t * n * self.shape["hidden"]
            return self.shape.get("moe_layers", 0) * (
                collective_time("all-gather", tokens * self.operand_bytes, group, self.links)
                + collective_time("reduce-scatter", tokens * COMBINE_BYTES, group, self.links))
        nbytes = n * self.shape["hidden"] * 2
        one = collective_time("all-reduce", nbytes, Group(self.t, self.t, self.host_groups), self.links)
        return 2 * self.shape["layers"] * one

    # ------------------------------------------------------------------ the iteration
    def cost(self, ntok: int, ndec: int, dctx: float, ptok: int, pctx: float, npre: int = 1) -> tuple[float, float]:
        """(wall seconds, GPU-busy seconds) of one iteration (module docstring): ``ntok`` tokens, ``ndec``
        decoding sequences at mean context ``dctx``, ``ptok`` prefill tokens in ``npre`` sequences' chunks
        over ``pctx`` tokens each already cached (each chunk's attention its own: causal within it)."""
        wall, busy = self.device_cost(ntok, ndec, dctx, ptok, pctx, npre)
        host = self.engine.host_per_iteration_s
        return (max(wall, host) if self.engine.overlap_host else wall + host), busy   # (.engines)

    def device_cost(self, ntok: int, ndec: int, dctx: float, ptok: int, pctx: float, npre: int = 1) -> tuple[float, float]:
        """:meth:`cost` without the engine's host work: (the GPU's wall seconds, its busy seconds)."""
        gpu_s, eager_s, comm = self._per_tokens(ntok)
        attn = 0.0
        if ndec:
            attn += self._decode_attention(ndec, max(dctx, 1.0))
        if ptok:
            def pre(p):
                return self._interp(lambda c: self._attention(1, p, c), pctx) if pctx >= 1 else self._attention(1, p, 0)
            each = max(1, npre)
            attn += each * self._interp(pre, ptok / each)
        if self.spec is not None and (ndec or (ptok and self.spec.draft)):   # draft passes (.speculative)
            attn += draft_seconds(self, self.spec, ndec, dctx, ptok, pctx, npre)
        busy = gpu_s + attn + comm
        if self.needs_eager(ntok):
            wall = max(busy, eager_s + attn + comm)
        else:
            wall = busy
        return wall, busy

    def _per_tokens(self, ntok: int) -> tuple[float, float, float]:
        """The dense part's (GPU, eager wall) seconds at ``ntok`` tokens, interpolated on the grid, and
        the tensor-parallel all-reduces' seconds; memoised by token count (iterations repeat them)."""
        got = self._by_tokens.get(ntok)
        if got is None:
            gpu_s, eager_s = self._interp(self._dense_at, ntok)
            got = self._by_tokens[ntok] = (gpu_s, eager_s, self._allreduce(ntok))
        return got

    def _decode_attention(self, ndec: int, dctx: float) -> float:
        """Decode attention of ``ndec`` sequences at a mean context ``dctx``: interpolated between the
        batch sizes (powers of two) and the contexts (the grid) around them; the four corners of a
        batch size's context cell are looked up once (a simulation asks for every context in a cell)."""
        clo, chi, cw = grid(dctx)
        key = (ndec, clo, chi)
        cell = self._dec_cells.get(key)
        if cell is None:
            blo, bhi, bw = pow2(ndec)
            cell = self._dec_cells[key] = (self._attention(blo, 1, clo), self._attention(blo, 1, chi),
                                           self._attention(bhi, 1, clo), self._attention(bhi, 1, chi),
                                           bw, bw == 0.0 or bhi == blo)
        lo_lo, lo_hi, hi_lo, hi_hi, bw, one_batch = cell
        if cw == 0.0 or chi == clo:
            a, b = lo_lo, hi_lo
        else:
            a, b = lo_lo + (lo_hi - lo_lo) * cw, hi_lo + (hi_hi - hi_lo) * cw
        return a if one_batch else a + (b - a) * bw


_MODELS: dict = {}
_MODELS_MAX = 32
_COSTS: dict = {}  # memoised GPU times, shared by the IterationModels of one model, GPU and plan
_COSTS_MAX = 64


def iteration_model(job, gpu, engine, env, cfg, tensor: int = 1, weights: str | None = "auto",
                    kv_scale: float = 1.0, expert: int = 1, attention_dp: bool = False, spec=None,
                    dispatcher: str | None = None, stages: int = 1) -> IterationModel:
    """A shared :class:`IterationModel` (its memoised costs serve every job of the same model, GPU,
    engine and plan; ``stages``: the pipeline's, whose groups share a PCIe host)."""
    key = (model_job(job).key, gpu, engine, tensor, weights or "auto", kv_scale, expert, attention_dp, spec, dispatcher,
           stages, id(env), cfg)
    m = _MODELS.get(key)
    if m is None:
        if len(_MODELS) >= _MODELS_MAX:
            _MODELS.pop(next(iter(_MODELS)))
        m = _MODELS[key] = IterationModel(job, gpu, engine, env, cfg, tensor, weights or "auto", kv_scale, expert,
                                          attention_dp, spec, dispatcher, stages)
        drafter = drafter_job(job, spec)
        if drafter is not None:   # a draft model: its own iteration model, at the target's degree (.speculative)
            m.drafter = iteration_model(drafter, gpu, engine, env, cfg, 1 if attention_dp else tensor, "auto",
                                        kv_scale)
    return m
