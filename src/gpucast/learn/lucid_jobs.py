"""Lucid's workload families (``data/measured/lucid-rtx3090``, read by :mod:`gpucast.learn.lucid`)
as gpucast jobs: the closest zoo workload of each, with the loader, loop and stack its script in
the artifact really had, and the host costs per sample that no gpucast source covers.

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
* LSTM, Wikitext-2: ``lstm-lm-wikitext2-logsoftmax`` is the artifact's ``lstm/models.py``
  RNNModel at the script's sizes (2 layers of 200, embedding 200, dropout 0.2, untied, bptt 35)
  with WikiText-2's 33,278-token vocabulary, its ``forward`` ending in the ``log_softmax`` that
  the script's CrossEntropyLoss repeats (both log-softmaxes over the 35·B x 33,278 logits, and
  their gradients, are in the traced graph); the script's plain SGD (no clipping) is gpucast's
  ``sgd``, which has momentum 0.9 (two more kernels per parameter and a momentum buffer); the
  hidden state starts from zeros (the script carries it over, detached). Its loader indexes the
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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from gpucast.job import Job
from gpucast.surroundings import Data, Loop, Stack

__all__ = ["JOBS", "FamilyJob", "LUCID_STACK", "LUCID_LOOP", "HOST_SCALE_TO_REFERENCE", "STEP_TIME_NOT_COMPARABLE",
           "SPEED_NOT_MEASURED"]

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
# Nor are TD3's speeds beside a neighbour measurements: pairs.csv gives the RL job 1.000 in every
# one of its 78 pair entries (beside idle and saturated neighbours alike, where every other
# family's entries vary from 0.5 to 1.1 and only 2 of its 590 are exactly 1), the artifact's value
# for a job whose throughput it did not measure together. Its neighbours' speeds are measured.
SPEED_NOT_MEASURED = frozenset({("TD3", "BipedalWalker")})


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
        model="lstm-lm-wikitext2-logsoftmax", optimizer="sgd", data=LSTM_DATA, loop=LUCID_LOOP, seq_len=35,
        script="workloads/lstm/profile_lstm.py (lstm/models.py RNNModel)",
        approximation=f"exact sizes (vocabulary {LSTM_VOCAB:,}, 2x200, dropout 0.2, log_softmax in forward "
                      f"and again in CrossEntropyLoss); momentum SGD for plain"),
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
