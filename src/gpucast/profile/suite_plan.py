"""The device suite's plan: the ordered list of configurations to measure (no GPU, no torch).

``configs()`` is the suite ``h200-v1``, most informative first, so that a collection cut short
by its time box still spans the space:

1. ``spread``: twelve hand-picked solo jobs, three regimes interleaved (``REGIMES``):
   launch-bound tiny jobs (the GPU idles between small kernels), mid-size jobs, and saturated
   jobs (large kernels back to back). The regime is what the job is expected to be, assigned by
   hand as a coverage label; it is not a measurement and not a prediction.
2. ``sweep``: every family of the zoo, batch sizes x precisions (fp32 and amp-bf16 for all;
   amp-fp16 and tf32 for a subset) x mode (train; inference for a subset). Each model lists its
   variants most informative first (the middle batch at its main precision; then the other
   precision, the smallest batch and inference, in an order rotated from model to model; then
   the largest batch, ...), and the sweep takes variant 0 of every model, then variant 1 of
   every model, and so on, models interleaved by family. Shallow models (2 batch sizes, or a
   ``depth`` limit) join from the third round on.
3. ``colocated``: pairs and a few triples of spread jobs on one GPU at once (launch-bound with
   compute-bound, memory-heavy with light, identical pairs). Their members are spread jobs so
   that their solo step times are among the first measured.

Jobs left out on purpose: ``llama-7b`` training (7 B parameters with AdamW state is ~112 GB
before activations: it would not fit usefully on one 141 GB GPU); llama-7b inference is kept.
Nothing is filtered by a prediction: a configuration that does not fit is recorded as ``oom``,
which is data (the predictor's memory estimate is checked against it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from gpucast.job import Job

__all__ = ["Config", "Sweep", "REGIMES", "PHASES", "SUITE_NAME", "configs", "spread", "sweep", "groups", "job_label"]

SUITE_NAME = "h200-v1"
REGIMES = ("launch-bound", "mid", "saturated")
PHASES = ("spread", "sweep", "colocated")

# The optimizer a trainer of each family typically uses (inference runs use none).
FAMILY_OPTIMIZER = {"cnn": "sgd", "rnn": "sgd", "transformer": "adamw", "gan": "adam", "recsys": "adam",
                    "pointnet": "adam", "rl": "adam", "mlp": "sgd"}


# ----------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class Config:
    """One thing to measure: one job alone (``solo``) or 2-3 jobs sharing the GPU (``colocated``).

    ``phase`` is where it sits in the suite (``PHASES``); ``regime`` the hand-assigned coverage
    label of a spread job (``REGIMES``), ``None`` elsewhere."""

    jobs: tuple[Job, ...]
    phase: str
    regime: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.jobs) <= 3:
            raise ValueError(f"a config has 1 to 3 jobs, got {len(self.jobs)}")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        if self.regime is not None and self.regime not in REGIMES:
            raise ValueError(f"regime must be one of {REGIMES} or None, got {self.regime!r}")

    @property
    def kind(self) -> str:
        return "solo" if len(self.jobs) == 1 else "colocated"

    @property
    def job(self) -> Job:
        return self.jobs[0]

    @property
    def key(self) -> str:
        """GPU-independent identity (the kind and the multiset of job keys); unique in a suite."""
        return self.kind + ":" + "+".join(sorted(j.key for j in self.jobs))

    @property
    def label(self) -> str:
        return " + ".join(job_label(j) for j in self.jobs)

    def config_ids(self, gpu_model: str) -> list[str]:
        """One :func:`~gpucast.profile.dataset.config_id` per slot, as the rows will carry them."""
        from gpucast.profile.dataset import config_id

        if self.kind == "solo":
            return [config_id(self.job.key, gpu_model, "solo")]
        keys = [j.key for j in self.jobs]
        return [config_id(k, gpu_model, "colocated", tuple(keys[:i] + keys[i + 1:])) for i, k in enumerate(keys)]


def job_label(job: Job) -> str:
    seq = f" s{job.seq_len}" if job.seq_len else ""
    return f"{job.model} b{job.batch_size}{seq} {job.precision} {job.mode}"


def _job(model: str, batch: int, precision: str = "fp32", mode: str = "train", seq_len: int | None = None) -> Job:
    from gpucast import zoo

    optimizer = FAMILY_OPTIMIZER[zoo.get(model).family] if mode == "train" else "none"
    return Job(model=model, batch_size=batch, precision=precision, mode=mode, optimizer=optimizer, seq_len=seq_len)


# The spread: (name, model, batch, precision, regime). Regimes interleaved, names used by GROUPS.
SPREAD = (
    ("mlp-small", "mlp-small", 64, "fp32", "launch-bound"),
    ("resnet50-b256-bf16", "resnet50", 256, "amp-bf16", "saturated"),
    ("resnet18-cifar-b128", "resnet18-cifar", 128, "fp32", "mid"),
    ("a2c-mlp", "a2c-mlp", 80, "fp32", "launch-bound"),
    ("gpt2-medium-b8", "gpt2-medium", 8, "fp32", "saturated"),
    ("resnet50-b32", "resnet50", 32, "fp32", "mid"),
    ("resnet18-cifar-b8", "resnet18-cifar", 8, "fp32", "launch-bound"),
    ("vit-b16-b64", "vit-b16", 64, "fp32", "saturated"),
    ("bert-base-b16", "bert-base", 16, "fp32", "mid"),
    ("llama-1b-b1-bf16", "llama-1b", 1, "amp-bf16", "saturated"),
    ("gpt2-b4", "gpt2", 4, "fp32", "mid"),
    ("lstm-lm-medium", "lstm-lm-medium", 20, "fp32", "mid"),
)
# seq lengths of the spread are the zoo defaults (bert-base 128, gpt2 1024, llama-1b 2048)


@dataclass(frozen=True)
class Sweep:
    """The variants of one model: ``batches`` (ascending), the ``main`` precision and the
    ``second`` one, ``extra`` precisions (at the middle batch), inference at two batches if
    ``infer`` (``infer_only``: inference only, at the main precision)."""

    model: str
    batches: tuple[int, ...]
    main: str = "fp32"
    second: str = "amp-bf16"
    extra: tuple[str, ...] = ()
    infer: bool = False
    infer_only: bool = False
    depth: int | None = None  # a shallow model: only its first ``depth`` variants, from round 2 on


# Interleaved by family so that any prefix of a round covers every family. Batch ranges are
# chosen so that a step is ~0.1 ms to ~0.5 s on an H200 (a run stays a few seconds) and so that
# the smallest batch of each model is dispatch-bound and the largest near saturation.
SWEEPS = (
    Sweep("resnet50", (16, 64, 128, 256), extra=("amp-fp16", "tf32"), infer=True),
    Sweep("bert-base", (8, 16, 32, 64), extra=("amp-fp16", "tf32"), infer=True),
    Sweep("lstm-lm-medium", (10, 20, 64, 256), extra=("amp-fp16",), infer=True),
    Sweep("dcgan", (32, 128, 256, 512), extra=("amp-fp16",)),
    Sweep("dlrm-small", (256, 2048, 8192, 32768), infer=True),
    Sweep("pointnet", (16, 32, 128, 512)),
    Sweep("ppo-mlp", (64, 256, 1024, 4096)),
    Sweep("mlp-large", (64, 256, 1024, 4096), extra=("tf32",)),
    Sweep("resnet18-cifar", (16, 64, 256, 1024), extra=("amp-fp16",), infer=True),
    Sweep("gpt2", (1, 2, 4, 8), extra=("amp-fp16",), infer=True),
    Sweep("lstm-seq2seq", (16, 32, 64, 128), depth=4),
    Sweep("cyclegan", (1, 2, 4, 8)),
    Sweep("ncf", (256, 2048, 8192, 32768), infer=True),
    Sweep("a3c-atari", (8, 20, 64, 256)),
    Sweep("mlp-small", (32, 128, 1024, 8192)),
    Sweep("vit-b16", (8, 16, 32, 64), extra=("amp-fp16",), infer=True),
    Sweep("lstm-lm-large", (10, 20, 64, 128), depth=4),
    Sweep("deeprec-autoencoder", (32, 128, 512, 1024), depth=4),
    Sweep("a2c-mlp", (16, 80, 512, 4096)),
    Sweep("vgg16", (16, 32, 64, 128), extra=("tf32",)),
    Sweep("t5-small", (8, 16, 32, 64), infer=True),
    Sweep("gru-lm", (20, 128), depth=3),
    Sweep("mobilenet-v2", (32, 128, 256, 512), infer=True),
    Sweep("transformer-nmt", (32, 64, 128, 256)),
    Sweep("efficientnet-b0", (32, 64, 128, 256), infer=True, depth=4),
    Sweep("gpt2-medium", (1, 2, 4, 8), extra=("tf32",), infer=True),
    Sweep("lstm-lm-small", (20, 128), depth=3),
    Sweep("convnext-tiny", (16, 32, 64, 128), extra=("tf32",)),
    Sweep("bert-large", (4, 8, 16, 32), infer=True),
    Sweep("densenet121", (16, 32, 64, 128), depth=4),
    Sweep("llama-1b", (1, 2, 4), main="amp-bf16", second="fp32", infer=True),
    Sweep("inception-v3", (16, 32, 64, 128), depth=4),
    Sweep("resnet18", (32, 128, 256, 512), infer=True),
    Sweep("gpt2-large", (1, 4), main="amp-bf16", second="fp32", depth=3),
    Sweep("alexnet", (128, 1024), depth=3),
    Sweep("mobilenet-v3-small", (64, 256), depth=3),
    Sweep("gpt2-xl", (1, 2), main="amp-bf16", second="fp32", depth=3),
    Sweep("resnet101", (16, 128), depth=3),
    Sweep("shufflenet-v2", (64, 256), depth=3),
    Sweep("llama-7b", (1, 4), main="amp-bf16", infer=True, infer_only=True, depth=2),
    Sweep("vgg16-cifar", (32, 256), depth=3),
    Sweep("resnext50-32x4d", (16, 128), depth=3),
    Sweep("mobilenet-v3-large", (64, 256), depth=3),
    Sweep("resnet50-cifar", (32, 256), depth=3),
    Sweep("squeezenet", (64, 256), depth=3),
    Sweep("googlenet", (32, 128), depth=3),
    Sweep("regnet-y-400mf", (64, 256), depth=3),
    Sweep("resnet34", (32, 256), depth=3),
    Sweep("mobilenet-v2-cifar", (32, 256), depth=3),
    Sweep("vgg19", (16, 64), depth=3),
    Sweep("resnet152", (16, 64), depth=3),
)

# Co-located groups, by spread name: launch-bound with compute-bound, memory-heavy with light,
# identical pairs, mid with mid, and a few triples.
GROUPS = (
    ("mlp-small", "resnet50-b256-bf16"),
    ("a2c-mlp", "gpt2-medium-b8"),
    ("resnet18-cifar-b8", "vit-b16-b64"),
    ("resnet18-cifar-b128", "resnet18-cifar-b128"),
    ("llama-1b-b1-bf16", "mlp-small"),
    ("resnet50-b32", "bert-base-b16"),
    ("resnet50-b256-bf16", "vit-b16-b64"),
    ("gpt2-b4", "gpt2-b4"),
    ("lstm-lm-medium", "gpt2-medium-b8"),
    ("mlp-small", "a2c-mlp"),
    ("resnet50-b32", "resnet50-b32"),
    ("llama-1b-b1-bf16", "resnet18-cifar-b8"),
    ("bert-base-b16", "bert-base-b16"),
    ("gpt2-b4", "resnet18-cifar-b128"),
    ("vit-b16-b64", "a2c-mlp"),
    ("llama-1b-b1-bf16", "gpt2-b4"),
    ("resnet50-b256-bf16", "resnet18-cifar-b8"),
    ("lstm-lm-medium", "lstm-lm-medium"),
    ("mlp-small", "mlp-small"),
    ("bert-base-b16", "lstm-lm-medium"),
    ("gpt2-medium-b8", "gpt2-medium-b8"),
    ("resnet50-b256-bf16", "llama-1b-b1-bf16"),
    ("mlp-small", "resnet18-cifar-b128", "gpt2-medium-b8"),
    ("resnet50-b32", "resnet50-b32", "resnet50-b32"),
    ("a2c-mlp", "bert-base-b16", "vit-b16-b64"),
    ("lstm-lm-medium", "resnet18-cifar-b8", "llama-1b-b1-bf16"),
)


def spread() -> list[Config]:
    return [Config((_job(m, b, p),), "spread", regime) for _, m, b, p, regime in SPREAD]


def _batch_order(batches: Sequence[int]) -> list[int]:
    """Middle batch first, then the extremes, then the rest: any prefix spans the range."""
    bs = sorted(batches)
    order = [bs[len(bs) // 2], bs[0], bs[-1]] + bs[1:-1]
    return list(dict.fromkeys(order))


def _variants(s: Sweep, turn: int = 0) -> list[Job]:
    """One model's variants, most informative first. After the middle batch at the main
    precision come, in an order rotated by ``turn`` (the model's index, so that every round of
    the sweep mixes all axes): the other precision, the smallest batch, and inference."""
    b = _batch_order(s.batches)
    mid, low, high = b[0], b[1 % len(b)], b[2 % len(b)]
    rest = b[3:]
    if s.infer_only:
        out = [(mid, s.main, "infer"), (high, s.main, "infer"), (low, s.main, "infer")]
    else:
        axes = [(mid, s.second, "train"), (low, s.main, "train")] + ([(mid, "amp-bf16", "infer")] if s.infer else [])
        k = turn % len(axes)
        out = [(mid, s.main, "train")] + axes[k:] + axes[:k] + [(high, s.main, "train")]
        out += [(mid, p, "train") for p in s.extra]
        out.append((high, s.second, "train"))
        out += [(r, s.main, "train") for r in rest]
        if s.infer:
            out.append((high, "fp32", "infer"))
    jobs = list(dict.fromkeys(_job(s.model, bs, p, mode) for bs, p, mode in out))
    return jobs[:s.depth] if s.depth else jobs


def sweep(exclude: Iterable[Job] = ()) -> list[Config]:
    """The batch x precision x mode sweep, round-robin over models (see the module docstring):
    round r takes variant r of every full model and variant r - 2 of every shallow one."""
    seen = set(exclude)
    per_model = [(2 if s.depth else 0, _variants(s, turn=i)) for i, s in enumerate(SWEEPS)]
    out = []
    for rnd in range(max(lag + len(v) for lag, v in per_model)):
        for lag, variants in per_model:
            r = rnd - lag
            if 0 <= r < len(variants) and variants[r] not in seen:
                seen.add(variants[r])
                out.append(Config((variants[r],), "sweep"))
    return out


def groups() -> list[Config]:
    by_name = {name: _job(m, b, p) for name, m, b, p, _ in SPREAD}
    return [Config(tuple(by_name[n] for n in g), "colocated") for g in GROUPS]


def configs(gpu_memory_bytes: int | None = None) -> list[Config]:
    """The suite ``h200-v1``, most informative first: spread, sweep, co-located groups.

    ``gpu_memory_bytes`` (the device's total memory) drops the few jobs sized for an H200 that a
    much smaller GPU cannot hold (``llama-7b`` inference needs ~30 GB of fp32 weights, gpt2-xl
    training ~25 GB of weights and Adam state) by parameter count alone, no trace: below 48 GiB
    they are left out. ``None``: keep everything (OOM is recorded as data)."""
    first = spread()
    out = first + sweep(exclude=[c.job for c in first]) + groups()
    if gpu_memory_bytes is not None and gpu_memory_bytes < 48 * 2**30:
        big = {"llama-7b", "gpt2-xl"}
        out = [c for c in out if not any(j.model in big for j in c.jobs)]
    return out
