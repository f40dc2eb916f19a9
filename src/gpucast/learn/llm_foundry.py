"""llm-foundry's MPT throughput table (A100-40GB, PyTorch FSDP) as gpucast jobs, and the fit of the
parallel-plan constants on it.

The set (``data/measured/llm-foundry-a100-40gb`` in the repository, its README has the
provenance) is 78 measured training configurations of MPT 125M-70B: sequence length, GPUs (8-128,
8 per node, 1,600 Gbit/s RoCE between nodes), micro-batch, gradient accumulation, activation
checkpointing, and the measured tokens/s per GPU, MFU and HFU. Nothing of it is packaged:
:func:`read` takes the folder.

**A row as a job** (:meth:`Row.job`): MPT is GPT-shaped (pre-LayerNorm blocks, a GELU MLP of
``expansion_ratio * d_model``, embeddings tied to the head), so the job is Hugging Face GPT-2 with
MPT's shapes, ``n_positions = SeqLen`` and no dropout (``MPTConfig``'s defaults: ``resid_pdrop``,
``emb_pdrop`` and ``attn_pdrop`` 0, none set in the pretrain yamls); precision ``bf16`` (FSDP's
``PURE`` mode: weights, gradients and communication in bf16, fp32 sharded masters), AdamW, ``fsdp-full`` sharding,
``recompute="full"`` where the row checkpoints activations, ``grad_accum`` as given, 8 GPUs per
node, ``roce-1600``. The table's ``NumParams`` equals GPT-2's count with ``n_positions = SeqLen``
in every row, which :func:`gpt2_params` reproduces in closed form: the measured models had a
learned position table of ``SeqLen x d_model`` and biases (``MPTConfig``'s defaults
``learned_pos_emb=True``, ``no_bias=False``; the yamls set neither ALiBi nor ``no_bias``), as
GPT-2 has. llm-foundry ran its Triton FlashAttention kernel (``attn_impl: triton``;
transformers' own MPT class has only eager attention, while HF GPT-2's SDPA path, which gpucast captures
as one fused flash-attention kernel, mirrors FlashAttention): the job says so (``stack.attention =
"triton"``, at that kernel's published rate, :mod:`gpucast.estimate.achieved`). What differs from what
ran: low-precision LayerNorm. The loss is what llm-foundry ran: ``ComposerMPTCausalLM``'s default
``loss_fn: fused_crossentropy`` (flash-attn's fused cross-entropy on the bf16 logits), which the job
asks for as ``stack.loss = "fused"`` (:mod:`gpucast.graph.lm_loss`; transformers' own loss, the
capture's default, upcasts the logits to fp32: ~6 bytes per token and vocabulary entry held instead
of ~2). The activation is the exact GELU in both (``gelu``, not GPT-2's usual ``gelu_new``).

**Global batch**: the README says a global batch the micro-batch does not divide ends with a
shorter micro-batch; in this table ``MicroBatchSize * GradAccum * GPUs == GlobalBatchSize`` in
every row (:attr:`Row.batch_mismatch` says where not), so ``GradAccum`` is used as given.

**The fit** (:func:`fit`): constants of :data:`PRIORS` (``gather_overlap`` of
:class:`gpucast.estimate.parallel.constants.ParallelConstants`, ``net_efficiency`` of
:class:`gpucast.estimate.comm.CommConstants`, optionally the Environment's
``kernel_time_factor``) that minimise ``sum(log(pred / measured)^2) / ROW_SIGMA^2`` over the rows'
tokens/s per GPU plus the Gaussian penalties of their priors, by a compass (pattern) search on a
lattice of :data:`LATTICE`: each point's predictions of every row are computed once
(:class:`Evaluator` memoises them), so the folds of a group-held-out cross-validation share them.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

GPU = "a100-40gb"
SET_NAME = "llm-foundry-a100-40gb"
GPUS_PER_NODE = 8
NETWORK = "roce-1600"
SIZES = ("125m", "350m", "760m", "1b", "3b", "7b", "13b", "30b", "70b")

# name -> (prior mean, prior standard deviation, log-space prior?, lower bound, upper bound)
PRIORS: dict[str, tuple[float, float, bool, float, float]] = {
    "gather_overlap": (0.8, 0.15, False, 0.0, 1.0),
    "net_efficiency": (0.9, 0.1, False, 0.2, 1.0),
    "kernel_time_factor": (1.0, 0.15, True, 0.5, 2.0),
}
# Scatter of one row's log throughput that the search weighs the priors against: rows of one model
# and sequence length that differ only in GPU count (ga = 1, 16-128 GPUs) differ by 1-3 % in the
# table, with one at -18 % (1b on 32 GPUs); 5 % leaves room for what the model does not describe.
ROW_SIGMA = 0.05
HUBER_K = 2.0  # the Huber loss's threshold, in ROW_SIGMA
LATTICE = 0.01  # the search's finest step (and the memo's key): well below what the data resolve
# The coarse grid the search starts from: each constant's range at about its prior's spread.
GRID: dict[str, tuple[float, ...]] = {
    "gather_overlap": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "net_efficiency": (0.3, 0.5, 0.7, 0.9, 1.0),
    "kernel_time_factor": (0.9, 1.0, 1.1, 1.2),
}


@dataclass(frozen=True)
class Shape:
    """An MPT size's shape (models.csv)."""

    d_model: int
    n_heads: int
    n_layers: int
    expansion_ratio: int
    vocab_size: int


@dataclass(frozen=True)
class Row:
    """One measured configuration (throughput.csv), with its model's shape."""

    model: str
    seq_len: int
    gpus: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    checkpointing: bool
    tokens_per_s_per_gpu: float
    mfu: float          # fraction (the table's percent / 100)
    hfu: float
    num_params: int
    shape: Shape

    @property
    def batch_mismatch(self) -> bool:
        """The global batch is not ``micro_batch * grad_accum * gpus`` (a shorter last micro-batch)."""
        return self.micro_batch * self.grad_accum * self.gpus != self.global_batch

    @property
    def label(self) -> str:
        return f"{self.model} s{self.seq_len} g{self.gpus} mb{self.micro_batch} ga{self.grad_accum}" + \
            (" ckpt" if self.checkpointing else "")

    def hf_config(self) -> dict:
        """The Hugging Face GPT-2 config with this row's MPT shape (module docstring)."""
        s = self.shape
        return dict(model_type="gpt2", n_embd=s.d_model, n_head=s.n_heads, n_layer=s.n_layers,
                    n_inner=s.expansion_ratio * s.d_model, vocab_size=s.vocab_size, n_positions=self.seq_len,
                    tie_word_embeddings=True, activation_function="gelu", attn_pdrop=0.0, resid_pdrop=0.0,
                    embd_pdrop=0.0)

    def job(self):
        """The row as a :class:`gpucast.job.Job` with its parallel plan (module docstring)."""
        from gpucast.job import Job

        return Job.from_hf_config(
            self.hf_config(), batch_size=self.micro_batch, seq_len=self.seq_len, precision="bf16",
            optimizer="adamw", gpus=self.gpus, stack=dict(loss="fused", attention="triton"),
            parallel=dict(sharding="fsdp-full", recompute="full" if self.checkpointing else "none",
                          grad_accum=self.grad_accum, gpus_per_node=GPUS_PER_NODE, network=NETWORK))

    def flops_per_token(self) -> float:
        """llm-foundry's MFU numerator per token: ``6 N + 12 L d s`` with the table's ``N``."""
        s = self.shape
        return 6.0 * self.num_params + 12.0 * s.n_layers * s.d_model * self.seq_len


def gpt2_params(shape: Shape, seq_len: int) -> int:
    """Parameters of GPT-2 with this shape, ``n_positions = seq_len`` and tied embeddings: token and
    position tables, per layer ``qkv + proj + fc + proj`` weights and biases and two LayerNorms, the
    final LayerNorm."""
    d, f = shape.d_model, shape.expansion_ratio * shape.d_model
    per_layer = (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    return shape.vocab_size * d + seq_len * d + shape.n_layers * per_layer + 2 * d


def _flag(text: str) -> bool:
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise ValueError(f"expected True/False, got {text!r}")
    return t == "true"


def read(directory: str | Path) -> list[Row]:
    """The table's rows in file order (``directory``: the set's folder with models.csv and
    throughput.csv)."""
    directory = Path(directory)
    shapes: dict[str, Shape] = {}
    with open(directory / "models.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            shapes[r["model"]] = Shape(int(r["d_model"]), int(r["n_heads"]), int(r["n_layers"]),
                                       int(r["expansion_ratio"]), int(r["vocab_size"]))
    rows = []
    with open(directory / "throughput.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append(Row(
                model=r["Model"], seq_len=int(r["SeqLen (T)"]), gpus=int(r["# GPUs"]),
                micro_batch=int(r["MicroBatchSize"]), grad_accum=int(r["GradAccum"]),
                global_batch=int(r["GlobalBatchSize"]), checkpointing=_flag(r["Activation Checkpointing"]),
                tokens_per_s_per_gpu=float(r["Throughput (T/s/GPU)"]), mfu=float(r["MFU"]) / 100.0,
                hfu=float(r["HFU"]) / 100.0, num_params=int(r["NumParams"]), shape=shapes[r["Model"]]))
    return rows


# ---------------------------------------------------------------------------------- predictions
@dataclass
class Answer:
    """What the plan model answers for one row at one point of the constants."""

    tokens_per_s_per_gpu: float   # NaN when the row errored
    memory_bytes: float
    error: str = ""


class Evaluator:
    """Predicts every row at a point of the constants, memoised on the point.

    ``rows`` are grouped by capture (model, sequence, micro-batch): each group's trace is captured
    once (:func:`gpucast.api.trace`) and kept, so a point costs only the plan estimates
    (``corners=False``). ``progress(done, total, label)`` is called as captures are made."""

    def __init__(self, rows: Sequence[Row], progress: Callable[[int, int, str], None] | None = None) -> None:
        from gpucast.hardware import get_gpu

        self.rows = list(rows)
        self.gpu = get_gpu(GPU)
        self.jobs = [r.job() for r in self.rows]
        self._traces: dict = {}
        self.capture_errors: dict[int, str] = {}
        self.capture_s = 0.0
        self.estimate_s = 0.0
        self.estimates = 0
        self._memo: dict[tuple, list[Answer]] = {}
        self._progress = progress

    @staticmethod
    def key(values: dict) -> tuple:
        return tuple(sorted((k, round(round(float(v) / LATTICE) * LATTICE, 6)) for k, v in values.items()))

    def capture_all(self) -> None:
        """Capture each (model, sequence, micro-batch) once, largest models first."""
        from gpucast import api

        groups: dict = {}
        for i, j in enumerate(self.jobs):
            groups.setdefault(j.with_(gpus=1, parallel=None), []).append(i)
        order = sorted(groups, key=lambda k: -self.rows[groups[k][0]].num_params)
        for n, key in enumerate(order):
            idx = groups[key]
            if self._progress:
                self._progress(n, len(order), self.rows[idx[0]].label)
            t0 = time.perf_counter()
            try:
                tr = api.trace(self.jobs[idx[0]])
                for i in idx:
                    self._traces[i] = tr
            except Exception as exc:  # a row that cannot be captured is reported, never dropped
                for i in idx:
                    self.capture_errors[i] = f"capture: {type(exc).__name__}: {exc}"
            self.capture_s += time.perf_counter() - t0
        if self._progress:
            self._progress(len(order), len(order), "")

    def answers(self, values: dict | None = None) -> list[Answer]:
        """Every row's answer at ``values`` (names of :data:`PRIORS`; missing ones at their prior)."""
        from gpucast.estimate.comm import DEFAULT_COMM
        from gpucast.estimate.environment import Environment
        from gpucast.estimate.parallel import estimate_plan
        from gpucast.estimate.parallel.constants import DEFAULT_PARALLEL

        full = {k: PRIORS[k][0] for k in PRIORS}
        full.update(values or {})
        key = self.key(full)
        if key in self._memo:
            return self._memo[key]
        if not self._traces and not self.capture_errors:
            self.capture_all()
        v = dict(key)
        consts = DEFAULT_PARALLEL.replace(gather_overlap=v["gather_overlap"])
        comm = DEFAULT_COMM.replace(net_efficiency=v["net_efficiency"])
        env = Environment.default().replace(kernel_time_factor=v["kernel_time_factor"])
        out = []
        t0 = time.perf_counter()
        for i, job in enumerate(self.jobs):
            if i in self.capture_errors:
                out.append(Answer(math.nan, math.nan, self.capture_errors[i]))
                continue
            try:
                est = estimate_plan(self._traces[i], job, self.gpu, env=env, consts=consts, comm=comm, corners=False)
                out.append(Answer(float(est.plan["tokens_per_s_per_gpu"]), float(est.memory.total_bytes)))
            except Exception as exc:
                out.append(Answer(math.nan, math.nan, f"estimate: {type(exc).__name__}: {exc}"))
        self.estimate_s += time.perf_counter() - t0
        self.estimates += len(self.jobs)
        self._memo[key] = out
        return out

    def tokens(self, values: dict | None = None) -> np.ndarray:
        return np.array([a.tokens_per_s_per_gpu for a in self.answers(values)])

    @property
    def points(self) -> int:
        return len(self._memo)


# ---------------------------------------------------------------------------------- the fit
def prior_penalty(values: dict) -> float:
    """Sum of the squared prior z-scores of ``values``."""
    out = 0.0
    for k, v in values.items():
        mu, sd, log, _, _ = PRIORS[k]
        z = (math.log(v) - math.log(mu)) / sd if log else (v - mu) / sd
        out += z * z
    return out


def objective(pred: np.ndarray, measured: np.ndarray, values: dict, loss: str = "squared") -> float:
    """``sum(rho(log(pred / measured) / ROW_SIGMA))`` plus the priors' penalty, ``rho(z) = z^2``
    (``loss="squared"``) or Huber's ``z^2`` within ``HUBER_K`` and ``2 HUBER_K |z| - HUBER_K^2``
    beyond (``"huber"``: one row far off cannot carry the fit). A row that errored counts as a
    residual of ``log(e)``, so a point cannot win by breaking rows."""
    r = np.log(pred / measured)
    z = np.where(np.isfinite(r), r, 1.0) / ROW_SIGMA
    if loss == "huber":
        a = np.abs(z)
        rho = np.where(a <= HUBER_K, z * z, 2 * HUBER_K * a - HUBER_K ** 2)
    elif loss == "squared":
        rho = z * z
    else:
        raise ValueError(f"unknown loss {loss!r}")
    return float(np.sum(rho) + prior_penalty(values))


@dataclass
class Fit:
    values: dict
    objective: float
    evaluations: int


def start_grid(names: Sequence[str]) -> list[dict]:
    """The coarse grid the search starts from (:data:`GRID` per constant), so that a minimum away
    from the priors is found too."""
    pts = [{}]
    for k in names:
        pts = [dict(p, **{k: v}) for p in pts for v in GRID[k]]
    return pts


def fit(ev: Evaluator, mask: np.ndarray, names: Iterable[str], loss: str = "squared",
        steps: Sequence[float] = (0.04, 0.02, 0.01)) -> Fit:
    """The constants ``names`` minimising :func:`objective` on the rows in ``mask``: the best point
    of :func:`start_grid` and the priors, then a compass search on the :data:`LATTICE` that halves
    its step when no neighbour improves (module docstring)."""
    names = list(names)
    measured = np.array([r.tokens_per_s_per_gpu for r in ev.rows])[mask]

    def f(x: dict) -> float:
        return objective(ev.tokens(x)[mask], measured, x, loss)

    starts = [{k: PRIORS[k][0] for k in names}] + start_grid(names)
    scored = [(f(x), x) for x in starts]
    best, x = min(scored, key=lambda t: t[0])
    n = len(scored)
    for step in steps:
        improved = True
        while improved:
            improved = False
            for k in names:
                for sign in (1, -1):
                    lo, hi = PRIORS[k][3], PRIORS[k][4]
                    y = dict(x)
                    y[k] = min(hi, max(lo, round((x[k] + sign * step) / LATTICE) * LATTICE))
                    if y[k] == x[k]:
                        continue
                    val = f(y)
                    n += 1
                    if val < best - 1e-9:
                        x, best, improved = y, val, True
    return Fit(values={k: round(float(v), 6) for k, v in x.items()}, objective=best, evaluations=n)


__all__ = ["Answer", "Evaluator", "Fit", "GPU", "PRIORS", "ROW_SIGMA", "Row", "SET_NAME", "SIZES", "Shape",
           "fit", "gpt2_params", "objective", "prior_penalty", "read", "start_grid"]
