"""The configurations the advisor tries, and their predictions: GPU types x counts x batches x precisions x shares.

* **GPU types**: the ones asked for, or every catalog GPU the price table prices (the rest are
  skipped, with a note). A MIG slice (``a100-80gb:1g.10gb``, :mod:`gpucast.mig`) is a GPU type
  when asked for: one per job (no data parallel runs over slices, no further share of a slice),
  priced at its share of the whole GPU unless the table prices it
  (:func:`gpucast.advisor.prices.slice_price`).
* **Precisions** a GPU runs: ``fp32`` everywhere; ``tf32`` where it has TF32 tensor cores;
  ``amp-fp16`` and ``fp16`` from compute capability 6.0 (Pascal: K80 has no FP16 arithmetic);
  ``amp-bf16`` and ``bf16`` where it has BF16 tensor cores (Ampere on); ``fp8`` (Transformer Engine's
  recipe, :mod:`gpucast.graph.fp8`) where it has FP8 tensor cores (Ada, Hopper, Blackwell); ``mxfp8``
  and ``nvfp4`` (:mod:`gpucast.formats`) on Blackwell. Default:
  the job's own, ``fp32``, ``amp-fp16`` and ``amp-bf16``, each where the GPU runs it (``fp8`` when
  asked for, or when it is the job's).
* **Batch sizes** per GPU: default the job's and 2x, 4x, 8x it (the largest of them that fits a GPU
  is that GPU's "largest that fits"); with ``keep_global_batch`` the job's global batch ``G`` (its
  batch x its GPUs) is kept: micro-batches ``G, G/2, G/4, G/8`` with the accumulation that makes
  ``GPUs x micro-batch x accumulation = G``.
* **GPU counts** (data parallel, within one node): default 1, 2, 4, 8, at most ``max_gpus``; a job
  fed by an RL environment steps one environment per process and is not data parallel here (1 GPU).
  A count whose per-GPU batch would be below 1 sample is not tried.
* **Shares**: a 1-GPU option whose share (:func:`gpucast.integrations.resources.gpu_share`: held
  compute plus margin, memory plus headroom) is at most ``MAX_SHARE`` is also offered shared, in
  each mode the GPU supports (:mod:`gpucast.advisor.sharing`): time-sliced under a HAMi core limit,
  under MPS with an SM limit, each billed at the share and slowed as the co-location model predicts
  next to a copy of itself (a neighbour as demanding as the job: cautious), and on the smallest MIG
  slice that holds it; a note says which mode is cheapest and why.

Each (batch, precision) is captured once (the capture does not depend on the GPU or the count);
every other combination is an estimate of that trace. A batch larger than one that does not fit
a GPU at a precision is not tried on that GPU (memory grows with the batch), nor are more GPUs of a
type on which one GPU does not fit (each replica holds the whole model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from gpucast.advisor.options import NO, Option, from_prediction
from gpucast.advisor.prices import PriceError, PriceTable
from gpucast.hardware import GpuSpec, get_gpu

DEFAULT_COUNTS = (1, 2, 4, 8)
MAX_GPUS = 8        # one node (the all-reduce is costed over the node's NVLink or PCIe)
BATCH_FACTORS = (1, 2, 4, 8)
PRECISION_ORDER = ("fp32", "tf32", "amp-fp16", "amp-bf16", "fp16", "bf16", "fp8", "mxfp8", "nvfp4")


class AdviseError(ValueError):
    """The advice cannot be given as asked; one line."""


@dataclass(frozen=True)
class Plan:
    """What will be tried (before any capture)."""

    gpus: tuple[GpuSpec, ...]
    counts: tuple[int, ...]
    batches: tuple[int, ...]          # per-GPU (micro-)batches
    precisions: tuple[str, ...]
    keep_global_batch: bool
    global_batch: int
    share: bool
    notes: tuple[str, ...]


def routed_experts(job) -> int:
    """The routed experts a Hugging Face job's config names (:func:`gpucast.graph.blocks.experts_of`);
    0 for a dense model or a job without a config."""
    import json
    from types import SimpleNamespace

    from gpucast.graph.blocks import experts_of

    try:
        cfg = json.loads(job.hf_config) if job.hf_config else None
    except ValueError:
        return 0
    return experts_of(SimpleNamespace(**cfg))[0] if isinstance(cfg, dict) else 0


def runs(spec: GpuSpec, precision: str) -> bool:
    """Whether ``spec`` runs ``precision`` (module docstring)."""
    if precision == "fp32":
        return True
    if precision == "tf32":
        return spec.tf32_tflops is not None
    if precision in ("amp-fp16", "fp16"):
        return tuple(spec.compute_capability) >= (6, 0)
    if precision in ("amp-bf16", "bf16"):
        return spec.supports_bf16
    if precision == "fp8":  # Transformer Engine runs FP8 on Ada, Hopper and Blackwell only
        return spec.fp8_tflops is not None
    if precision in ("mxfp8", "nvfp4"):  # Blackwell's block-scaled recipes (gpucast.formats)
        from gpucast.formats import unsupported

        return spec.fp4_tflops is not None and unsupported(precision, spec) is None
    return False


def gpu_types(prices: PriceTable, gpus: Sequence[str | GpuSpec] | None = None,
              provider: str | None = None) -> tuple[tuple[GpuSpec, ...], list[str]]:
    """The GPU types to try (module docstring) and a note naming the catalog GPUs left out unpriced;
    a GPU asked for without a price, or a provider the table lacks, is one error."""
    from gpucast.hardware import catalog

    notes = []
    if provider is not None and provider not in prices.providers:
        raise AdviseError(f"no provider {provider!r} in prices {prices.name!r} ({', '.join(prices.providers) or 'none'})")
    if gpus:
        specs = tuple(get_gpu(g) for g in gpus)
        for s in specs:
            if prices.price(s.name, provider) is None:
                raise PriceError(f"no price for GPU {s.name!r} in prices {prices.name!r}"
                                 f"{f' from {provider}' if provider else ''} (give --prices FILE with it)")
    else:
        specs = tuple(s for s in catalog().values() if prices.price(s.name, provider) is not None)
        unpriced = [n for n in catalog() if prices.price(n, provider) is None]
        if unpriced:
            notes.append(f"not priced in {prices.name!r}, so not tried: {', '.join(unpriced)}")
        if not specs:
            raise AdviseError(f"prices {prices.name!r} price no catalog GPU")
    return specs, notes


def plan(job, prices: PriceTable, gpus: Sequence[str | GpuSpec] | None = None, counts: Sequence[int] | None = None,
         batches: Sequence[int] | None = None, precisions: Sequence[str] | None = None,
         keep_global_batch: bool = False, share: bool = True, max_gpus: int = MAX_GPUS,
         provider: str | None = None) -> Plan:
    """Check the request and say what will be tried; an impossible request is one :class:`AdviseError`."""
    from gpucast.job import PRECISIONS

    specs, notes = gpu_types(prices, gpus, provider)
    if not isinstance(max_gpus, int) or max_gpus < 1:
        raise AdviseError(f"max_gpus must be a positive integer, got {max_gpus!r}")
    counts = tuple(sorted(set(counts))) if counts else tuple(c for c in DEFAULT_COUNTS if c <= max_gpus)
    for c in counts:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1 or c > MAX_GPUS:
            raise AdviseError(f"GPU counts must be integers 1-{MAX_GPUS} (one node), got {c!r}")
    if max(counts) > max_gpus:
        raise AdviseError(f"GPU count {max(counts)} is above max_gpus {max_gpus}")
    resolved_source = _data_source(job)
    if (job.data is not None and job.data.environment is not None) or resolved_source == "environment":
        if counts != (1,):
            notes.append("an RL job steps its environment in one process: not data parallel here (1 GPU only)")
        counts = (1,)
    g = job.batch_size * job.gpus
    if keep_global_batch:
        batches = tuple(sorted(set(batches))) if batches else tuple(sorted({g // k for k in BATCH_FACTORS if g % k == 0},
                                                                           reverse=True))
        bad = [b for b in batches if g % b]
        if bad:
            raise AdviseError(f"batch {bad[0]} does not divide the global batch {g} (keep_global_batch)")
        if not any(g % (b * c) == 0 for b in batches for c in counts):
            raise AdviseError(f"no GPU count x batch divides the global batch {g}")
    else:
        batches = tuple(sorted(set(batches))) if batches else tuple(job.batch_size * k for k in BATCH_FACTORS)
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise AdviseError(f"batch sizes must be positive integers, got {b!r}")
    if precisions:
        for p in precisions:
            if p not in PRECISIONS:
                raise AdviseError(f"unknown precision {p!r} ({', '.join(PRECISIONS)})")
        precisions = tuple(dict.fromkeys(precisions))
    else:
        precisions = tuple(p for p in PRECISION_ORDER if p in {job.precision, "fp32", "amp-fp16", "amp-bf16"})
    if not any(runs(s, p) for s in specs for p in precisions):
        raise AdviseError(f"none of these GPUs runs {', '.join(precisions)}")
    return Plan(specs, counts, batches, precisions, keep_global_batch, g, share, tuple(notes))


def _data_source(job) -> str | None:
    """The job's data source as its spec or its zoo workload's typical script says (None: unknown)."""
    if job.data is not None and job.data.source is not None:
        return job.data.source
    if job.is_module or job.is_onnx or job.is_hf:
        return None
    from gpucast.zoo import get

    data = get(job.model).data
    return data.source if data is not None else None


def evaluate(job, p: Plan, prices: PriceTable, samples_per_epoch: float | None, epochs: float,
             config=None, env=None, provider: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> tuple[list[Option], float, list[str]]:
    """Every option of the plan, predicted: (options, samples per epoch used, notes)."""
    from gpucast.advisor import sharing
    from gpucast.api import explain

    combos = [(b, prec) for prec in p.precisions for b in p.batches]
    total = len(combos) * len(p.gpus) * len(p.counts)
    done = 0
    options: list[Option] = []
    notes: list[str] = []
    samples = samples_per_epoch
    skipped = 0
    one_slice = False
    for spec in p.gpus:
        price = prices.price(spec.name, provider)
        is_slice = ":" in spec.name
        for prec in p.precisions:
            if not runs(spec, prec):
                done += len(p.batches) * len(p.counts)
                continue
            too_big = None
            for b in sorted(p.batches):
                for n in p.counts:
                    done += 1
                    if progress is not None:
                        progress(done, total)
                    acc = 1
                    if p.keep_global_batch:
                        if p.global_batch % (b * n):
                            continue
                        acc = p.global_batch // (b * n)
                    if too_big is not None and (b > too_big[0] or (b == too_big[0] and n > too_big[1])):
                        skipped += 1
                        continue
                    if n > 1 and is_slice:
                        one_slice = True
                        continue
                    pred = explain(job.with_(batch_size=b, precision=prec, gpus=n), spec, config, env).prediction
                    if samples is None:
                        samples = pred.surroundings.get("data", {}).get("dataset_samples")
                        if not samples:
                            raise AdviseError("the job names no dataset size: give samples per epoch "
                                              "(--samples-per-epoch N)")
                    opt = from_prediction(pred, price, samples, epochs, acc, capacity=spec.memory_bytes)
                    options.append(opt)
                    if opt.memory_fit == NO:
                        too_big = (b, n)
                        continue
                    if p.share and n == 1 and not is_slice:
                        options += sharing.options(job, pred, spec, prices, provider, samples, epochs, acc,
                                                   config, env)
    notes += sharing.why(options)
    if one_slice:
        notes.append("MIG slices are tried as one GPU each: a process sees one MIG device and slices have no "
                     "peer access to each other (NVIDIA MIG User Guide), so data parallel runs span whole GPUs")
    if skipped:
        notes.append(f"{skipped} larger batch/count combinations not tried: a smaller one already does not fit")
    return options, float(samples or 0), notes
