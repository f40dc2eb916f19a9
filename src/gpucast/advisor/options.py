"""One way to run a job, priced: the :class:`Option` the advisor compares, and how a prediction becomes one.

An option is a GPU type, a count of data-parallel GPUs, a per-GPU (micro-)batch with its gradient
accumulation, a precision and, for a small job, a share of one GPU. From gpucast's prediction of
that configuration (step time and its interval, memory and its interval, utilization) and a price
per GPU-hour:

* samples/s = per-GPU batch x GPUs / step time; time per epoch = samples per epoch / samples/s;
* cost per epoch = time per epoch x GPUs x price per GPU-hour (x the share for a shared GPU);
* the step time's interval gives the time and cost ranges (a step at the interval's upper end is
  an epoch that long and that costly: the ranges are the interval carried through, nothing added);
* memory: ``fits`` when the memory interval's upper end fits the GPU, ``risky`` when the point
  estimate fits and the upper end does not, ``no`` when the point estimate does not fit (an
  option the advisor never recommends and leaves off the front).

With gradient accumulation (``accumulation`` micro-steps per optimizer step, to keep a global
batch) each micro-step is costed as a whole step, optimizer included: an upper bound on time by
the optimizer's share. Not modelled: convergence (a larger global batch may need more epochs),
start-up and checkpoint time.

A **parallel plan** (:mod:`gpucast.advisor.plans`) is an option with ``plan`` set
(:class:`PlanFields`: tensor, pipeline and data-parallel degrees, sharding, recompute, nodes, and
the prediction's tokens/s and MFU). Its prediction already is one optimizer step of the whole
plan (every micro-batch, the pipeline bubble, the collectives, the optimizer:
:mod:`gpucast.estimate.parallel`), so for a plan ``step_time_s`` is that optimizer step, nothing is
multiplied by the accumulation, the global batch is micro-batch x accumulation x data-parallel
degree, and time per epoch = samples per epoch / global batch x step time. Cost and memory are as
above (memory: the busiest GPU's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

FITS, RISKY, NO = "fits", "risky", "no"


@dataclass(frozen=True)
class PlanFields:
    """A parallel plan's shape and the prediction's throughput figures (``Prediction.plan``)."""

    tensor: int
    pipeline: int
    data: int
    sharding: str
    recompute: str
    nodes: int
    gpus_per_node: int
    network: str
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    step_breakdown_s: tuple[tuple[str, float], ...] = ()
    context: int = 1
    expert: int = 1
    virtual_pipeline: int = 1
    sequence: bool = False

    @classmethod
    def of(cls, plan: dict) -> "PlanFields":
        return cls(tensor=int(plan["tensor"]), pipeline=int(plan["pipeline"]), data=int(plan["data"]),
                   sharding=str(plan["sharding"]), recompute=str(plan["recompute"]), nodes=int(plan["nodes"]),
                   gpus_per_node=int(plan["gpus_per_node"]), network=str(plan["network"]),
                   tokens_per_s=float(plan["tokens_per_s"]), tokens_per_s_per_gpu=float(plan["tokens_per_s_per_gpu"]),
                   mfu=float(plan["mfu"]), hfu=float(plan["hfu"]),
                   step_breakdown_s=tuple((k, float(v)) for k, v in plan.get("step_breakdown_s", {}).items()),
                   context=int(plan.get("context") or 1), expert=int(plan.get("expert") or 1),
                   virtual_pipeline=int(plan.get("virtual_pipeline") or 1), sequence=bool(plan.get("sequence")))

    @property
    def label(self) -> str:
        """``t8 p2 d4 zero1 recompute-full`` (``c2``, ``e8``, ``v4`` where above 1; ``sp`` with sequence
        parallelism)."""
        rc = f" recompute-{self.recompute}" if self.recompute != "none" else ""
        more = "".join(f" {k}{v}" for k, v in (("c", self.context), ("e", self.expert), ("v", self.virtual_pipeline))
                       if v > 1)
        return f"t{self.tensor} p{self.pipeline}{more} d{self.data} {self.sharding}{rc}{' sp' if self.sequence else ''}"

    # The exposed communication kinds of the step's breakdown, as the plan table labels them.
    COMM_KINDS = (("TP", "tensor_parallel_comm_s"), ("CP", "context_parallel_comm_s"),
                  ("EP", "expert_parallel_comm_s"), ("PP", "pipeline_p2p_s"), ("DP", "data_parallel_comm_s"))

    def shares(self, step_s: float) -> dict[str, float]:
        """Each exposed communication kind's and the bubble's share of the step (0-1)."""
        b = dict(self.step_breakdown_s)
        out = {k: b.get(key, 0.0) / step_s for k, key in self.COMM_KINDS} if step_s > 0 else {}
        out["bubble"] = b.get("pipeline_bubble_s", 0.0) / step_s if step_s > 0 else 0.0
        return out

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "step_breakdown_s"}
        d["step_breakdown_s"] = dict(self.step_breakdown_s)
        return d


@dataclass(frozen=True)
class Option:
    gpu: str
    gpus: int
    batch_size: int            # per GPU (a micro-batch when accumulation > 1)
    precision: str
    accumulation: int
    share: float               # of each GPU billed: 1 (whole GPUs) or a fraction of one GPU
    step_time_s: float         # one micro-step, on the share when shared
    step_time_interval: tuple[float, float]
    samples_per_s: float
    epoch_s: float
    epoch_interval_s: tuple[float, float]
    usd_per_gpu_hour: float
    price_offer: str
    cost_per_epoch: float
    cost_per_epoch_interval: tuple[float, float]
    epochs: float
    util_pct: float
    memory_bytes: int          # per GPU
    memory_interval: tuple[int, int]
    gpu_memory_bytes: int
    memory_fit: str            # fits | risky | no
    bottleneck: str
    slowdown: float = 1.0      # of the shared step over the solo one (1: whole GPU)
    notes: tuple[str, ...] = field(default_factory=tuple)
    plan: PlanFields | None = None   # a parallel plan: step_time_s is then one optimizer step
    mode: str = ""             # how it shares the GPU (gpucast.advisor.sharing): timeslice | mps | mig; "": whole

    @property
    def id(self) -> str:
        acc = f"x{self.accumulation} accum" if self.accumulation > 1 else ""
        shared = " ".join(x for x in (f"share {self.share:g}" if self.share < 1 else "",
                                      self.mode if self.mode in ("timeslice", "mps") else "") if x)
        shape = self.plan.label if self.plan is not None else ""
        return " ".join(p for p in (f"{self.gpu} x{self.gpus}", shape, f"b{self.batch_size}", acc, self.precision,
                                    shared) if p)

    @property
    def global_batch(self) -> int:
        replicas = self.plan.data if self.plan is not None else self.gpus
        return self.batch_size * replicas * self.accumulation

    @property
    def run_s(self) -> float:
        return self.epoch_s * self.epochs

    @property
    def run_interval_s(self) -> tuple[float, float]:
        return (self.epoch_interval_s[0] * self.epochs, self.epoch_interval_s[1] * self.epochs)

    @property
    def cost_per_run(self) -> float:
        return self.cost_per_epoch * self.epochs

    @property
    def cost_per_run_interval(self) -> tuple[float, float]:
        return (self.cost_per_epoch_interval[0] * self.epochs, self.cost_per_epoch_interval[1] * self.epochs)

    @property
    def shared(self) -> bool:
        return self.share < 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        d["plan"] = self.plan.to_dict() if self.plan is not None else None
        d.update(id=self.id, global_batch=self.global_batch, run_s=self.run_s, run_interval_s=list(self.run_interval_s),
                 cost_per_run=self.cost_per_run, cost_per_run_interval=list(self.cost_per_run_interval))
        return d


def memory_fit(point: int, interval: tuple[int, int], capacity: int) -> str:
    """``fits`` / ``risky`` / ``no`` (module docstring)."""
    if point > capacity:
        return NO
    return FITS if interval[1] <= capacity else RISKY


def from_prediction(pred, price, samples_per_epoch: float, epochs: float, accumulation: int = 1,
                    share: float = 1.0, slowdown: float = 1.0, capacity: int | None = None,
                    notes: tuple[str, ...] = (), mode: str = "") -> Option:
    """The option a prediction (:class:`~gpucast.prediction.Prediction`) describes, at ``price``
    (:class:`~gpucast.advisor.prices.Price`); ``share``/``slowdown``: a fraction of one GPU and the
    co-location slowdown on it; ``mode``: how it shares the GPU (:mod:`gpucast.advisor.sharing`)."""
    gpus = int(pred.job.get("gpus", 1))
    batch = int(pred.job["batch_size"])
    step = pred.step_time_s * slowdown
    lo, hi = (v * slowdown for v in pred.step_time_interval)
    per_step = batch * gpus  # samples per micro-step across the GPUs
    epoch = samples_per_epoch / per_step * step
    e_lo, e_hi = samples_per_epoch / per_step * lo, samples_per_epoch / per_step * hi
    rate = price.usd_per_gpu_hour * gpus * share / 3600.0
    offer = " ".join(p for p in (price.provider, price.offer) if p)
    mem_iv = (int(pred.memory_interval[0]), int(pred.memory_interval[1]))
    return Option(gpu=pred.gpu, gpus=gpus, batch_size=batch, precision=pred.job["precision"],
                  accumulation=accumulation, share=share, step_time_s=step, step_time_interval=(lo, hi),
                  samples_per_s=per_step / step if step > 0 else 0.0, epoch_s=epoch, epoch_interval_s=(e_lo, e_hi),
                  usd_per_gpu_hour=price.usd_per_gpu_hour, price_offer=offer, cost_per_epoch=epoch * rate,
                  cost_per_epoch_interval=(e_lo * rate, e_hi * rate), epochs=epochs, util_pct=pred.gpu_util_pct,
                  memory_bytes=int(pred.memory_peak_bytes), memory_interval=mem_iv,
                  gpu_memory_bytes=int(capacity) if capacity is not None else 0,
                  memory_fit=memory_fit(int(pred.memory_peak_bytes), mem_iv, capacity) if capacity else FITS,
                  bottleneck=pred.bottleneck, slowdown=slowdown, notes=tuple(notes), mode=mode)


def from_plan_prediction(pred, price, samples_per_epoch: float, epochs: float, capacity: int) -> Option:
    """The option a parallel plan's prediction describes (module docstring): ``pred.plan`` set,
    ``pred.step_time_s`` one optimizer step of ``pred.plan['global_batch']`` samples."""
    pl = pred.plan
    gpus = int(pl["gpus"])
    per_step = int(pl["global_batch"])
    step = pred.step_time_s
    lo, hi = pred.step_time_interval
    steps = samples_per_epoch / per_step
    rate = price.usd_per_gpu_hour * gpus / 3600.0
    offer = " ".join(p for p in (price.provider, price.offer) if p)
    mem_iv = (int(pred.memory_interval[0]), int(pred.memory_interval[1]))
    point = int(pred.memory_peak_bytes)
    return Option(gpu=pred.gpu, gpus=gpus, batch_size=int(pl["micro_batch"]), precision=pred.job["precision"],
                  accumulation=int(pl["grad_accum"]), share=1.0, step_time_s=step, step_time_interval=(lo, hi),
                  samples_per_s=per_step / step if step > 0 else 0.0, epoch_s=steps * step,
                  epoch_interval_s=(steps * lo, steps * hi), usd_per_gpu_hour=price.usd_per_gpu_hour,
                  price_offer=offer, cost_per_epoch=steps * step * rate,
                  cost_per_epoch_interval=(steps * lo * rate, steps * hi * rate), epochs=epochs,
                  util_pct=pred.gpu_util_pct, memory_bytes=point, memory_interval=mem_iv,
                  gpu_memory_bytes=int(capacity), memory_fit=memory_fit(point, mem_iv, capacity),
                  bottleneck=pred.bottleneck, plan=PlanFields.of(pl))
