"""The typical script of each zoo workload: its data source and loop habits.

A zoo workload is trained by some well-known script; these rows say how that script feeds the
model and runs its loop, with the script they follow. :func:`recipe` picks the row by the
workload's tags (the first tag that has a row wins), else by family. Fields a row leaves unset
take the source's defaults (:data:`gpucast.surroundings.SOURCE_DEFAULTS`) and the global loop
defaults. ``gpucast zoo`` prints the result; a job's own ``data``/``loop`` override it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.surroundings import Data, Loop


@dataclass(frozen=True)
class Recipe:
    data: Data
    loop: Loop
    script: str  # the script whose habits these are


_BY_TAG: dict[str, Recipe] = {
    "imagenet": Recipe(
        Data(source="images", num_workers=4, pin_memory=True, non_blocking=True),
        Loop(item_calls=1, progress_bar=False, log_every=10, cudnn_benchmark=True),
        "pytorch/examples imagenet/main.py: -j 4, pin_memory, non_blocking, cudnn.benchmark, "
        "loss.item() per step, print_freq 10"),
    "cifar-10": Recipe(
        Data(source="small-images", num_workers=2, pin_memory=False, non_blocking=False),
        Loop(item_calls=2, progress_bar=True, log_every=0, cudnn_benchmark=True),
        "kuangliu/pytorch-cifar main.py: 2 workers, RandomCrop+flip, loss.item() and "
        "correct.item() per step, progress_bar per step, cudnn.benchmark"),
    "mnist": Recipe(
        Data(source="small-images", num_workers=1, pin_memory=True, non_blocking=False, dataset_samples=60_000),
        Loop(item_calls=1, progress_bar=False, log_every=10, cudnn_benchmark=False),
        "pytorch/examples mnist/main.py: num_workers 1, pin_memory, ToTensor+Normalize, "
        "log_interval 10 with loss.item()"),
    "ptb": Recipe(
        Data(source="device"),
        Loop(item_calls=1, progress_bar=False, log_every=200, cudnn_benchmark=False),
        "pytorch/examples word_language_model/main.py: the corpus batchified onto the GPU, "
        "total_loss += loss.item() per step, log_interval 200"),
    "translation": Recipe(
        Data(source="tokens", num_workers=2, pin_memory=False, non_blocking=False),
        Loop(item_calls=1, progress_bar=True, log_every=0, cudnn_benchmark=False),
        "attention-is-all-you-need-pytorch train.py: 2 loader workers, tqdm per step, "
        "loss.item() per step"),
    "atari": Recipe(
        Data(source="environment", num_workers=0),
        Loop(item_calls=1, progress_bar=False, log_every=0, cudnn_benchmark=False),
        "A3C on Atari (universe-starter-agent style): one environment step per frame in the loop"),
    "image-generation": Recipe(
        Data(source="images", num_workers=2, pin_memory=False, non_blocking=False, image_size=(178, 218),
             dataset_samples=202_599),
        Loop(item_calls=5, progress_bar=False, log_every=1, cudnn_benchmark=True),
        "pytorch/examples dcgan/main.py: CelebA JPEGs (178x218), --workers 2, errD/D_x/D_G_z1/D_G_z2/"
        "errG .item() and a print every step, cudnn.benchmark"),
    "image-translation": Recipe(
        Data(source="images", num_workers=4, pin_memory=False, non_blocking=False, image_size=(256, 256),
             dataset_samples=6_287),
        Loop(item_calls=5, progress_bar=False, log_every=1, cudnn_benchmark=False),
        "eriklindernoren/PyTorch-GAN cyclegan.py: --n_cpu 4 (Resize 286 + RandomCrop 256 + flip), "
        "five .item() and a status line every step (monet2photo: 6,287 images)"),
}

_BY_FAMILY: dict[str, Recipe] = {
    "transformer": Recipe(
        Data(source="tokens"),
        Loop(item_calls=0, progress_bar=True, log_every=500, cudnn_benchmark=False),
        "Hugging Face Trainer: pre-tokenised dataset, dataloader_num_workers 0, pin_memory, a tqdm "
        "bar per step, the loss read on the host only every logging_steps (500)"),
    "recsys": Recipe(
        Data(source="memory", num_workers=0),
        Loop(item_calls=1, progress_bar=False, log_every=100, cudnn_benchmark=False),
        "NCF/DLRM-style scripts: interaction tensors in host memory, loss.item() per step"),
    "pointnet": Recipe(
        Data(source="memory", num_workers=4, pin_memory=False, non_blocking=False, dataset_samples=9_843),
        Loop(item_calls=2, progress_bar=True, log_every=0, cudnn_benchmark=False),
        "PointNet on ModelNet40 (point clouds pre-loaded, 4 workers, tqdm, loss and accuracy .item())"),
    "rl": Recipe(
        Data(source="environment", num_workers=0),
        Loop(item_calls=1, progress_bar=False, log_every=0, cudnn_benchmark=False),
        "An on-policy agent: one environment step per sample in the main process"),
    "gan": Recipe(
        Data(source="images", num_workers=2),
        Loop(item_calls=4, progress_bar=False, log_every=1, cudnn_benchmark=True),
        "a GAN training script"),
    "rnn": Recipe(
        Data(source="tokens"),
        Loop(item_calls=1, progress_bar=False, log_every=100, cudnn_benchmark=False),
        "a sequence-model training script"),
    "cnn": Recipe(
        Data(source="images"),
        Loop(item_calls=1, progress_bar=False, log_every=10, cudnn_benchmark=True),
        "an image-classification script"),
    "mlp": Recipe(
        Data(source="memory"),
        Loop(item_calls=1, progress_bar=False, log_every=10, cudnn_benchmark=False),
        "a small classifier script"),
}


def recipe(family: str, tags: tuple[str, ...]) -> Recipe | None:
    for tag in tags:
        if tag in _BY_TAG:
            return _BY_TAG[tag]
    return _BY_FAMILY.get(family)
