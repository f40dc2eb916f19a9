"""Lucid's RTX 3090 measurements (``../shared/data/lucid-rtx3090``) as gpucast jobs, each with the
loader, loop and stack its script really had.

The set (its README): 35 solo runs (``singles.csv``) and 335 pairs run together on one RTX 3090
by time-slicing (``pairs.csv``), from the public artifact of Lucid (Hu et al., ASPLOS '23), seven
of its workload families, PyTorch 1.11.0+cu113. Each job ran in its own process for 30 s; speeds
are samples per second after warm-up, ``gpu_util_pct`` the mean of nvidia-smi's
``utilization.gpu`` over the steady state, memory the whole GPU's ``fb_memory_usage.used`` (the
mean for solo runs, the maximum of both processes together for pairs). The data is read from a
directory the caller gives (tests pass ``../shared/data/lucid-rtx3090``); nothing of it is
packaged (S-Lab License 1.0, non-commercial).

What is modelled: every family as the closest zoo workload (:data:`JOBS`) with the surroundings
read from its script in the artifact's ``workloads/`` folder (loader, copies, the loop's host
syncs, cuDNN autotuning) and the artifact's stack (torch 1.11, CUDA 11.3: per-parameter optimizer
loops, eagerly loaded CUDA modules). Where a script's per-sample host work is no gpucast source,
it is ``data.source = "custom"`` with a per-sample cost measured on a workstation core and scaled
to gpucast's reference core by :data:`HOST_SCALE_TO_REFERENCE` (the constants below say how).

What is not (approximations, per family):

* ResNet18, CIFAR-10: ``resnet18-cifar`` is torchvision's ResNet-18 with the CIFAR stem, the same
  layers as the artifact's ``models/resnet.py`` (kuangliu/pytorch-cifar).
* EfficientNet (B0), CIFAR-10: torchvision's ``efficientnet-b0`` at 3x32x32. The artifact's
  ``models/efficientnet.py`` is the kuangliu CIFAR variant: a stride-1 stem, ReLU for SiLU, SE on
  the block's output, no 1280-wide head, no dropout or stochastic depth. Its stages run at twice
  the torchvision net's resolution at 32x32 (more FLOPs); the kernel count, which sets the time
  of these host-bound runs (24-45 % utilization), is about the same.
* ResNet50, ImageNet: torchvision ``resnet50`` on one synthetic batch on the GPU; exact but for
  SGD's momentum buffer (gpucast's ``sgd`` has momentum 0.9, the script's SGD has none).
* LSTM, Wikitext-2: ``lstm-lm-wikitext2`` is the artifact's ``lstm/models.py`` RNNModel at the
  script's sizes (2 layers of 200, embedding 200, dropout 0.2, untied, bptt 35) with WikiText-2's
  33,278-token vocabulary; the script's plain SGD (no clipping) is gpucast's ``sgd``, which has
  momentum 0.9 (two more kernels per parameter and a momentum buffer), and the artifact's
  ``forward`` ends in a ``log_softmax`` that CrossEntropyLoss repeats (one more log-softmax over
  the 35·B x 33,278 logits and its gradient, not in the graph). Its loader indexes the
  token tensor *on the GPU* per sample (``CorpusDataset.__getitem__``: two slices, two
  ``torch.cat``), in the loop (no workers): modelled as custom per-sample host work with no
  host-to-device copy; the two tiny kernels per sample are not in the graph.
* DCGAN, LSUN: the zoo's 64x64 ``dcgan`` (same generator and discriminator; one backward over the
  three losses for the script's three). The data is torchvision ``FakeData`` (a random tensor to
  PIL to ``ToTensor`` per sample, 30,000 samples), not JPEG files.
* NeuMF, MovieLens: ``ncf-ml1m`` is NeuMF at the script's ml-1m size (6,040 x 3,706 ids,
  predictive factor 32: GMF 32, MLP embeddings 128 and MLP 256-128-64-32); SGD as gpucast's
  ``sgd`` (momentum 0.9, as the script's).
* TD3, BipedalWalker: no zoo TD3; ``ppo-mlp`` (a Gaussian actor-critic MLP, Adam) with
  BipedalWalker's 24-d observation is the closest: TD3's nets are wider (400-300, twin critics,
  target nets) and its gradient step launches several times the kernels (twin-critic update,
  the delayed actor update, Polyak averaging parameter by parameter). The measured speed is not a gradient-step rate
  at all: see :data:`STEP_TIME_NOT_COMPARABLE`.

Memory: ``memory_used_mib`` is the GPU's whole used memory averaged over the run, what a
measured row's ``memory_mib`` (the process's peak as nvidia-smi shows it) is closest to for one
process alone on the GPU.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpucast.job import Job
from gpucast.learn.rows import MeasuredRow, RowsError, from_records
from gpucast.surroundings import Data, Loop, Stack

__all__ = ["JOBS", "FamilyJob", "Single", "Pair", "singles", "pairs", "single_records", "single_rows",
           "family_of", "GPU", "SINGLES_FILE", "PAIRS_FILE", "RowsError"]

GPU = "rtx-3090"
SINGLES_FILE = "singles.csv"
PAIRS_FILE = "pairs.csv"

SINGLES_COLUMNS = ("model", "dataset", "batch_size", "amp", "speed_samples_per_s", "gpu_util_pct",
                   "memory_used_mib")
PAIRS_COLUMNS = ("model1", "dataset1", "batch_size1", "amp1", "speed1_vs_solo",
                 "model2", "dataset2", "batch_size2", "amp2", "speed2_vs_solo",
                 "gpu_util_pct", "memory_used_max_mib")

# The RTX 3090's board memory (24 GB GDDR6X = 24,576 MiB): no reading of used memory exceeds it.
RTX3090_MEMORY_MIB = 24_576
# A job cannot run twice as fast beside a neighbour as alone (time-slicing only takes time away);
# the set's largest ratio is ~1.1 (measurement noise).
MAX_SPEED_VS_SOLO = 2.0

# ------------------------------------------------------------------------------ the artifact's stack

# workloads/imagenet/requirements.txt: torch 1.11.0+cu113 (README: per-parameter optimizer loops,
# eager CUDA module loading).
LUCID_STACK = Stack(torch="1.11", cuda="11.3", lazy_loading=False)

# ------------------------------------------------------------------------------ host costs per sample

# Per-sample loader costs below were timed on one core of the workstation this module was written
# on (torch 2.x, one thread, a thousand samples or more). That core ran the CIFAR recipe
# (Image.fromarray + RandomCrop(32, pad 4) + flip + ToTensor + Normalize, the artifact's
# profile_cifar.py transform) in 187 us, where gpucast's reference core takes
# Environment.small_image_sample_s = 80 us; the same factor scales every timing to that core.
HOST_SCALE_TO_REFERENCE = 80.0 / 187.0

# workloads/dcgan/profile_dcgan.py: FakeData(size=30000, image_size=(3, 64, 64),
# transform=ToTensor()). FakeData.__getitem__ saves and restores the CPU RNG state, seeds it, draws a
# 3x64x64 randn, converts it to a PIL image and ToTensor converts it back: 416 us per sample measured.
DCGAN_FAKEDATA_SAMPLE_S = 416e-6 * HOST_SCALE_TO_REFERENCE
DCGAN_FAKEDATA_SAMPLES = 30_000
DCGAN_SAMPLE_BYTES = 3 * 64 * 64 * 4   # only data[0] (the float image) goes to the GPU

# workloads/ncf/profile_ncf.py + data_utils.py: NCFData draws its negatives once, in ng_sample(),
# before the timed loop (it is never called again: the loop never ends an epoch), so a sample is
# three Python list lookups and default_collate turning ints into tensors: 2.0 us per sample
# measured (the fetcher's list comprehension and collate of 64-128-sample batches included).
NCF_SAMPLE_S = 2.0e-6 * HOST_SCALE_TO_REFERENCE
# ml-1m's leave-one-out training set has 994,169 ratings; NCFData yields each with num_ng=4
# negatives: 5 x 994,169 samples per epoch.
NCF_EPOCH_SAMPLES = 5 * 994_169
NCF_SAMPLE_BYTES = 3 * 8               # user, item, label: three int64 tensors, .cuda() each

# workloads/lstm/profile_lstm.py: CorpusDataset keeps the batchified corpus on the GPU and
# __getitem__ slices it per sample (two slices, two new_zeros, two torch.cat): 28 us per sample
# measured on CPU tensors, plus ~10 us for the two cat kernels' launches on CUDA.
LSTM_GPU_INDEX_SAMPLE_S = 38e-6 * HOST_SCALE_TO_REFERENCE
# Wikitext-2's training split is 2,088,628 tokens (the word_language_model corpus); the dataset's
# __len__ is tokens // bptt.
LSTM_EPOCH_SAMPLES = 2_088_628 // 35
LSTM_VOCAB = 33_278                    # the script's ntokens (not settable on lstm-lm-small)

# workloads/rl/profile_rl_walker.py: stable-baselines3 TD3("MlpPolicy") with its 1.x defaults
# (train_freq=(1, "episode"), gradient_steps=-1, learning_starts=100): one environment step per
# gradient step on average. Per gradient step, the host also steps Box2D's BipedalWalker (~0.3 ms
# with its lidar ray casts) and runs SB3's per-step Python (the actor's forward for the action and
# its .cpu(), action rescaling, the replay-buffer add, callbacks): ~1 ms in all, an estimate (no
# timing: gym's Box2D is not installed here). Spread over the batch, plus the replay buffer's
# numpy gather per sample.
TD3_HOST_PER_GRADIENT_STEP_S = 1.0e-3
TD3_REPLAY_SAMPLE_S = 1.0e-6
# The replay sample moved to the GPU per transition: obs and next obs (24 floats each), the
# action (4), reward and done (1 each), float32.
TD3_SAMPLE_BYTES = (24 + 24 + 4 + 1 + 1) * 4
BIPEDALWALKER_OBS = (24,)

# The measured "speed" of TD3 is not a gradient-step rate: profile_rl_walker.py counts
# model.learn(total_timesteps=1) calls, and each such call (reset_num_timesteps=True, train_freq one
# episode) runs a whole episode from a reset and then one gradient step per environment step once
# the episode is longer than learning_starts. batch_size / speed is seconds per episode (1-2 s in
# the set), so single_records gives TD3 rows no step_time_s (their utilization and memory stay).
STEP_TIME_NOT_COMPARABLE = frozenset({("TD3", "BipedalWalker")})


# ------------------------------------------------------------------------------ families -> jobs

@dataclass(frozen=True)
class FamilyJob:
    """How one Lucid family's script runs, as the fields of a gpucast :class:`Job`."""

    model: str                              # the zoo workload
    optimizer: str
    data: Data | None                       # None: data_for_batch(batch_size) builds it
    loop: Loop
    script: str                             # the artifact's script (under workloads/)
    approximation: str                      # what the zoo job does not reproduce
    input_shape: tuple[int, ...] | None = None
    seq_len: int | None = None
    data_for_batch: Callable[[int], Data] | None = field(default=None, compare=False, repr=False)

    def job(self, batch_size: int, amp: bool) -> Job:
        data = self.data_for_batch(batch_size) if self.data_for_batch else self.data
        return Job(model=self.model, batch_size=batch_size, precision="amp-fp16" if amp else "fp32",
                   optimizer=self.optimizer, input_shape=self.input_shape, seq_len=self.seq_len,
                   data=data, loop=self.loop, stack=LUCID_STACK)

    __call__ = job


# profile_cifar.py: CIFAR10 in memory with per-sample PIL transforms, DataLoader(batch_size,
# shuffle=True, num_workers=2) (no pin_memory), inputs.to(device) (blocking), no .item() and no
# printing in the loop, cudnn.benchmark = True; SGD(lr 0.01, momentum 0.9, weight_decay 5e-4).
CIFAR_DATA = Data(source="small-images", num_workers=2, pin_memory=False, non_blocking=False,
                  dataset_samples=50_000)
# Every script's timed loop: no .item(), no progress bar, no log line; cudnn.benchmark = True.
LUCID_LOOP = Loop(item_calls=0, progress_bar=False, log_every=0, cudnn_benchmark=True)

# profile_imagenet.py: torch.randn(B, 3, 224, 224) and its targets moved to the GPU once (no
# DataLoader: every loader field set, or the zoo's ImageNet recipe's 4 pinned workers show through).
IMAGENET_DATA = Data(source="device", num_workers=0, pin_memory=False, non_blocking=False)

# profile_lstm.py: DataLoader(CorpusDataset, batch_size, shuffle=False, drop_last=True): no
# workers, no pinning, the samples already on the GPU (no copy, so nothing blocks: non_blocking).
LSTM_DATA = Data(source="custom", per_sample_s=LSTM_GPU_INDEX_SAMPLE_S, num_workers=0, pin_memory=False,
                 non_blocking=True, sample_bytes=0, dataset_samples=LSTM_EPOCH_SAMPLES)

# profile_dcgan.py: DataLoader(FakeData, batch_size, shuffle=True, num_workers=2),
# data[0].to(device) (blocking, pageable); Adam(2e-4, betas 0.5/0.999) for both nets.
DCGAN_DATA = Data(source="custom", per_sample_s=DCGAN_FAKEDATA_SAMPLE_S, num_workers=2, pin_memory=False,
                  non_blocking=False, sample_bytes=DCGAN_SAMPLE_BYTES, dataset_samples=DCGAN_FAKEDATA_SAMPLES)

# profile_ncf.py: DataLoader(NCFData, batch_size, shuffle=True, num_workers=2), user/item/label
# .cuda() each (blocking); the script's Adam is overwritten by SGD(0.01, momentum 0.9, wd 5e-4).
NCF_DATA = Data(source="custom", per_sample_s=NCF_SAMPLE_S, num_workers=2, pin_memory=False,
                non_blocking=False, sample_bytes=NCF_SAMPLE_BYTES, dataset_samples=NCF_EPOCH_SAMPLES)


def _td3_data(batch_size: int) -> Data:
    """SB3's replay sample in the loop (no DataLoader), th.as_tensor(...).to(device) per array."""
    per_sample = TD3_HOST_PER_GRADIENT_STEP_S / batch_size + TD3_REPLAY_SAMPLE_S
    return Data(source="custom", per_sample_s=per_sample, num_workers=0, pin_memory=False, non_blocking=False,
                sample_bytes=TD3_SAMPLE_BYTES)


# SB3's TD3.train(): critic_loss.item() every gradient step (actor_loss.item() every second one) and
# the action's .cpu() at every environment step: two host syncs per step.
TD3_LOOP = Loop(item_calls=2, progress_bar=False, log_every=0, cudnn_benchmark=True)

JOBS: dict[tuple[str, str], FamilyJob] = {
    ("ResNet18", "CIFAR-10"): FamilyJob(
        model="resnet18-cifar", optimizer="sgd", data=CIFAR_DATA, loop=LUCID_LOOP,
        script="workloads/cifar/profile_cifar.py (models/resnet.py)",
        approximation="exact architecture (torchvision ResNet-18, CIFAR stem)"),
    ("EfficientNet", "CIFAR-10"): FamilyJob(
        model="efficientnet-b0", optimizer="sgd", data=CIFAR_DATA, loop=LUCID_LOOP, input_shape=(3, 32, 32),
        script="workloads/cifar/profile_cifar.py (models/efficientnet.py)",
        approximation="torchvision EfficientNet-B0 at 32x32 for the kuangliu CIFAR variant "
                      "(stride-1 stem, ReLU, no 1280 head)"),
    ("ResNet50", "ImageNet"): FamilyJob(
        model="resnet50", optimizer="sgd", data=IMAGENET_DATA, loop=LUCID_LOOP,
        script="workloads/imagenet/profile_imagenet.py",
        approximation="SGD with momentum 0.9 for the script's plain SGD"),
    ("LSTM", "Wikitext2"): FamilyJob(
        model="lstm-lm-wikitext2", optimizer="sgd", data=LSTM_DATA, loop=LUCID_LOOP, seq_len=35,
        script="workloads/lstm/profile_lstm.py (lstm/models.py RNNModel)",
        approximation=f"exact sizes (vocabulary {LSTM_VOCAB:,}, 2x200, dropout 0.2); momentum SGD for plain"),
    ("DCGAN", "LSUN"): FamilyJob(
        model="dcgan", optimizer="adam", data=DCGAN_DATA, loop=LUCID_LOOP, input_shape=(3, 64, 64),
        script="workloads/dcgan/profile_dcgan.py",
        approximation="one backward over the three losses; FakeData as custom per-sample host work"),
    ("NeuMF", "MovieLens"): FamilyJob(
        model="ncf-ml1m", optimizer="sgd", data=NCF_DATA, loop=LUCID_LOOP,
        script="workloads/ncf/profile_ncf.py (NCFData, factor 32, 3 MLP layers)",
        approximation="exact sizes (ml-1m 6,040 x 3,706, factor 32, MLP 256-128-64-32)"),
    ("TD3", "BipedalWalker"): FamilyJob(
        model="ppo-mlp", optimizer="adam", data=None, loop=TD3_LOOP, input_shape=BIPEDALWALKER_OBS,
        data_for_batch=_td3_data,
        script="workloads/rl/profile_rl_walker.py (stable-baselines3 TD3 MlpPolicy)",
        approximation="PPO's 64-64 Gaussian actor-critic for TD3's 400-300 actor and twin critics; "
                      "the measured speed is per episode, not per gradient step"),
}


def family_of(x) -> str:
    """The family held out together in evaluation: the ``model`` column (ResNet18, EfficientNet,
    ResNet50, LSTM, DCGAN, NeuMF, TD3). ``x``: a :class:`Single`, a measured row made by
    :func:`single_rows`, a family key ``(model, dataset)`` or a run key ``(model, dataset,
    batch_size, amp)``, or a model name."""
    if isinstance(x, Single):
        return x.model
    if isinstance(x, MeasuredRow):
        return x.group
    if isinstance(x, tuple) and x and isinstance(x[0], str):
        name = x[0]
    elif isinstance(x, str):
        name = x
    else:
        raise TypeError(f"family_of takes a Single, a MeasuredRow, a (model, dataset) key or a model name, "
                        f"got {type(x).__name__}")
    models = {m for m, _ in JOBS}
    if name not in models:
        raise KeyError(f"{name!r} is no Lucid family (known: {', '.join(sorted(models))})")
    return name


# ------------------------------------------------------------------------------ the rows

@dataclass(frozen=True)
class Single:
    """One solo run (a row of singles.csv)."""

    family: tuple[str, str]                 # (model, dataset)
    batch_size: int
    amp: bool
    speed_samples_per_s: float
    gpu_util_pct: float
    memory_used_mib: float
    row: int = 0                            # 1-based data row in singles.csv

    @property
    def model(self) -> str:
        return self.family[0]

    @property
    def key(self) -> tuple[str, str, int, bool]:
        return (*self.family, self.batch_size, self.amp)

    @property
    def step_time_s(self) -> float:
        """The solo step time as measured: batch_size / speed (for TD3 seconds per episode, see
        :data:`STEP_TIME_NOT_COMPARABLE`)."""
        return self.batch_size / self.speed_samples_per_s

    @property
    def step_time_comparable(self) -> bool:
        """Whether :attr:`step_time_s` is a training step as gpucast predicts one."""
        return self.family not in STEP_TIME_NOT_COMPARABLE

    def job(self) -> Job:
        return JOBS[self.family].job(self.batch_size, self.amp)

    @property
    def label(self) -> str:
        return (f"{self.family[0]} {self.family[1]} bs {self.batch_size} {'amp' if self.amp else 'fp32'} "
                f"({SINGLES_FILE} row {self.row})")


@dataclass(frozen=True)
class Pair:
    """Two jobs run together on the GPU (a row of pairs.csv), with each one's solo run."""

    family1: tuple[str, str]
    batch_size1: int
    amp1: bool
    speed1_vs_solo: float                   # its throughput together / alone
    family2: tuple[str, str]
    batch_size2: int
    amp2: bool
    speed2_vs_solo: float
    gpu_util_pct: float                     # the GPU's, while both ran
    memory_used_max_mib: float              # the GPU's, both processes
    solo1: Single
    solo2: Single
    row: int = 0                            # 1-based data row in pairs.csv

    @property
    def key1(self) -> tuple[str, str, int, bool]:
        return (*self.family1, self.batch_size1, self.amp1)

    @property
    def key2(self) -> tuple[str, str, int, bool]:
        return (*self.family2, self.batch_size2, self.amp2)

    def job1(self) -> Job:
        return self.solo1.job()

    def job2(self) -> Job:
        return self.solo2.job()

    @property
    def speed1_samples_per_s(self) -> float:
        return self.speed1_vs_solo * self.solo1.speed_samples_per_s

    @property
    def speed2_samples_per_s(self) -> float:
        return self.speed2_vs_solo * self.solo2.speed_samples_per_s


# ------------------------------------------------------------------------------ reading and checking

class _Reader:
    """One CSV file's rows as text cells, every failure one RowsError line (file, row, column)."""

    def __init__(self, path: Path, columns: tuple[str, ...]):
        self.path, self.columns = path, columns

    def fail(self, why: str, row: int | None = None, column: str | None = None):
        where = "".join((f": row {row}" if row is not None else "", f": column {column}" if column else ""))
        raise RowsError(f"{self.path}{where}: {why}")

    def rows(self) -> list[dict[str, str]]:
        if not self.path.is_file():
            self.fail("no such file")
        try:
            with open(self.path, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                if header is None:
                    self.fail("empty file (no header)")
                header = [h.strip() for h in header]
                for c in self.columns:
                    if c not in header:
                        self.fail("missing from the header", column=c)
                for c in header:
                    if c not in self.columns:
                        self.fail(f"unknown column (expected: {', '.join(self.columns)})", column=c or "''")
                if len(set(header)) != len(header):
                    dup = next(c for c in header if header.count(c) > 1)
                    self.fail("appears twice in the header", column=dup)
                out = []
                for i, cells in enumerate(reader, 1):
                    if not any(c.strip() for c in cells):
                        self.fail("empty row", row=i)
                    if len(cells) > len(header):
                        self.fail(f"{len(cells)} values for {len(header)} columns", row=i,
                                  column=f"#{len(header) + 1} (not in the header)")
                    rec = {}
                    for j, c in enumerate(header):
                        v = cells[j].strip() if j < len(cells) else ""
                        if v == "":
                            self.fail("missing value", row=i, column=c)
                        rec[c] = v
                    out.append(rec)
        except UnicodeDecodeError:
            self.fail("not UTF-8 text")
        except csv.Error as exc:
            self.fail(f"not valid CSV: {exc}")
        if not out:
            self.fail("no data rows")
        return out

    # -------------------------------------------------------------- cells
    def number(self, rec: dict, i: int, col: str) -> float:
        v = rec[col]
        try:
            x = float(v)
        except ValueError:
            self.fail(f"not a number: {v!r}", i, col)
        if not math.isfinite(x):
            self.fail(f"not a finite number: {v!r}", i, col)
        return x

    def positive(self, rec: dict, i: int, col: str, upper: float = math.inf, unit: str = "") -> float:
        x = self.number(rec, i, col)
        if not (0 < x <= upper):
            bound = f"> 0 and <= {upper:g}{unit}" if math.isfinite(upper) else "> 0"
            self.fail(f"out of range: {rec[col]!r} (must be {bound})", i, col)
        return x

    def pct(self, rec: dict, i: int, col: str) -> float:
        x = self.number(rec, i, col)
        if not (0 <= x <= 100):
            self.fail(f"out of range: {rec[col]!r} (a percentage, 0-100)", i, col)
        return x

    def batch_size(self, rec: dict, i: int, col: str) -> int:
        v = rec[col]
        try:
            b = int(v)
        except ValueError:
            self.fail(f"not an integer: {v!r}", i, col)
        if b < 1:
            self.fail(f"out of range: {v!r} (a batch size >= 1)", i, col)
        return b

    def amp(self, rec: dict, i: int, col: str) -> bool:
        v = rec[col]
        if v not in ("0", "1"):
            self.fail(f"must be 0 or 1, got {v!r}", i, col)
        return v == "1"

    def family(self, rec: dict, i: int, model_col: str, dataset_col: str) -> tuple[str, str]:
        model, dataset = rec[model_col], rec[dataset_col]
        datasets = {d for m, d in JOBS if m == model}
        if not datasets:
            self.fail(f"unknown family {model!r} (known: {', '.join(sorted({m for m, _ in JOBS}))})", i, model_col)
        if dataset not in datasets:
            self.fail(f"{model} was measured on {', '.join(sorted(datasets))}, not {dataset!r}", i, dataset_col)
        return (model, dataset)


def singles(root: str | Path) -> list[Single]:
    """The 35 solo runs of ``root``/singles.csv, checked (``root``: the lucid-rtx3090 folder)."""
    r = _Reader(Path(root) / SINGLES_FILE, SINGLES_COLUMNS)
    out: list[Single] = []
    seen: dict[tuple, int] = {}
    for i, rec in enumerate(r.rows(), 1):
        s = Single(family=r.family(rec, i, "model", "dataset"), batch_size=r.batch_size(rec, i, "batch_size"),
                   amp=r.amp(rec, i, "amp"), speed_samples_per_s=r.positive(rec, i, "speed_samples_per_s"),
                   gpu_util_pct=r.pct(rec, i, "gpu_util_pct"),
                   memory_used_mib=r.positive(rec, i, "memory_used_mib", RTX3090_MEMORY_MIB, " MiB, the board's"),
                   row=i)
        if s.key in seen:
            r.fail(f"the run {s.model} {s.family[1]} bs {s.batch_size} amp {int(s.amp)} repeats row {seen[s.key]}",
                   i, "model")
        seen[s.key] = i
        out.append(s)
    return out


def pairs(root: str | Path, solo: list[Single] | None = None) -> list[Pair]:
    """The 335 co-located pairs of ``root``/pairs.csv, each with its two solo runs (from
    ``solo``, else ``root``/singles.csv); a pair whose job has no solo run is an error."""
    solo = singles(root) if solo is None else solo
    by_key = {s.key: s for s in solo}
    r = _Reader(Path(root) / PAIRS_FILE, PAIRS_COLUMNS)
    out: list[Pair] = []
    for i, rec in enumerate(r.rows(), 1):
        sides = []
        for n in ("1", "2"):
            fam = r.family(rec, i, f"model{n}", f"dataset{n}")
            b, amp = r.batch_size(rec, i, f"batch_size{n}"), r.amp(rec, i, f"amp{n}")
            speed = r.positive(rec, i, f"speed{n}_vs_solo", MAX_SPEED_VS_SOLO)
            s = by_key.get((*fam, b, amp))
            if s is None:
                r.fail(f"no solo run of {fam[0]} {fam[1]} bs {b} amp {int(amp)} in {SINGLES_FILE}", i, f"model{n}")
            sides.append((fam, b, amp, speed, s))
        (f1, b1, a1, v1, s1), (f2, b2, a2, v2, s2) = sides
        out.append(Pair(family1=f1, batch_size1=b1, amp1=a1, speed1_vs_solo=v1,
                        family2=f2, batch_size2=b2, amp2=a2, speed2_vs_solo=v2,
                        gpu_util_pct=r.pct(rec, i, "gpu_util_pct"),
                        memory_used_max_mib=r.positive(rec, i, "memory_used_max_mib", RTX3090_MEMORY_MIB,
                                                       " MiB, the board's"),
                        solo1=s1, solo2=s2, row=i))
    return out


# ------------------------------------------------------------------------------ measured rows

def single_records(root: str | Path) -> list[dict]:
    """The solo runs as measured-row records (:func:`gpucast.learn.rows.from_records`): the job
    spec as JSON, util, memory and the step time (batch / speed; none for TD3, whose speed counts
    episodes). Group: the family (the model column)."""
    out = []
    for s in singles(root):
        rec = {"job": s.job().to_json(), "gpu": GPU, "group": family_of(s), "label": s.label,
               "util_pct": s.gpu_util_pct, "memory_mib": s.memory_used_mib}
        if s.step_time_comparable:
            rec["step_time_s"] = s.step_time_s
        out.append(rec)
    return out


def single_rows(root: str | Path) -> list[MeasuredRow]:
    """The solo runs as validated measured rows (``root``: the lucid-rtx3090 folder)."""
    return from_records(single_records(root), str(Path(root) / SINGLES_FILE))
