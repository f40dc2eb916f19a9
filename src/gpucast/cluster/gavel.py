"""Gavel's published data, packaged: job-type mapping, trace files and measured throughputs.

Source: Gavel (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep
Learning Workloads", OSDI 2020; github.com/stanford-futuredata/gavel), MIT licence, copied
unchanged into ``gpucast/data/gavel/`` (``LICENSE``, ``simulation_throughputs.json``,
``traces/*.trace``) so that the simulator works without the shared checkout.

``simulation_throughputs.json`` (written by Gavel's profiler,
``scheduler/scripts/profiling/measure_throughput.py``)::

    {gpu: {"(job type, scale factor)": {"null": solo steps/s,
                                        "(other job type, sf)": [own steps/s, other's steps/s]}}}

``gpu`` is ``k80``, ``p100``, ``v100`` (mapped to catalog ``k80``, ``p100``, ``v100-16gb``;
``*_unconsolidated`` variants are not used). ``"null"`` is the job alone. A pair entry under
job A's key lists A's throughput first and the partner's second, both measured while co-located
(verified: ``v100["('A3C', 1)"]["('ResNet-18 (batch size 16)', 1)"] == [5.57, 32.35]`` where
A3C alone runs at 7.18 and ResNet-18 b16 alone at 32.35). A pair of ``[0.0, 0.0]`` is a pair
the profiler could not run together; such pairs are left out of fits. Units: training
iterations per second.

``MAPPING`` (Gavel job type -> gpucast job fields, with the evidence) is the one table both the
simulator and ``benchmarks/gavel_compare.py`` use. Where ``nearest`` is true, Gavel's model is not
in gpucast's zoo and the mapping is the nearest zoo workload (the benchmark's variants follow
Gavel's definition as custom modules; the simulator needs zoo names and uses the nearest).
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from gpucast.surroundings import Data, Loop

GAVEL_GPUS = {"k80": "k80", "p100": "p100", "v100": "v100-16gb"}  # Gavel name -> catalog name
CATALOG_TO_GAVEL = {v: k for k, v in GAVEL_GPUS.items()}
_JOB_TYPE_RE = re.compile(r"^(?P<name>.*?) \(batch size (?P<batch>\d+)\)$")


def data_dir() -> Path:
    """The packaged copy of Gavel's data (``gpucast/data/gavel``)."""
    return Path(str(resources.files("gpucast") / "data" / "gavel"))


def throughputs_path() -> Path:
    return data_dir() / "simulation_throughputs.json"


def trace_ids() -> list[str]:
    """Ids of the packaged Gavel traces (file stems, e.g. ``"ee9e8c"``)."""
    return sorted(p.stem for p in (data_dir() / "traces").glob("*.trace"))


def parse_key(key: str) -> tuple[str, int] | None:
    """``"('ResNet-18 (batch size 16)', 1)"`` -> ``("ResNet-18 (batch size 16)", 1)``."""
    try:
        value = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int):
        return value
    return None


def split_job_type(job_type: str) -> tuple[str, int | None]:
    """``"ResNet-18 (batch size 16)"`` -> ``("ResNet-18", 16)``; ``"A3C"`` -> ``("A3C", None)``."""
    m = _JOB_TYPE_RE.match(job_type)
    if m:
        return m["name"], int(m["batch"])
    return job_type, None


@functools.lru_cache(maxsize=4)
def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def solo_throughputs(path: str | Path | None = None) -> dict[tuple[str, int, str], float]:
    """``{(job type, scale factor, catalog gpu): steps/s}`` for every positive solo entry."""
    data = _read(str(path or throughputs_path()))
    out = {}
    for ggpu, gpu in GAVEL_GPUS.items():
        for key, entry in data.get(ggpu, {}).items():
            parsed = parse_key(key)
            if parsed and isinstance(entry, dict) and _ok(entry.get("null")):
                out[(parsed[0], parsed[1], gpu)] = float(entry["null"])
    return out


def pair_throughputs(path: str | Path | None = None, gpu: str = "v100-16gb"
                     ) -> dict[tuple[str, str], tuple[float, float]]:
    """``{(A, B): (A's steps/s, B's steps/s)}`` co-located on ``gpu``, single-GPU jobs only,
    both positive. Each unordered pair appears under both orders when the file has both."""
    data = _read(str(path or throughputs_path()))
    out = {}
    for key, entry in data.get(CATALOG_TO_GAVEL[gpu], {}).items():
        a = parse_key(key)
        if not a or a[1] != 1 or not isinstance(entry, dict):
            continue
        for k2, v in entry.items():
            b = parse_key(k2) if k2 != "null" else None
            if b and b[1] == 1 and isinstance(v, list) and len(v) == 2 and _ok(v[0]) and _ok(v[1]):
                out[(a[0], b[0])] = (float(v[0]), float(v[1]))
    return out


def job_fields(job_type: str) -> dict:
    """gpucast ``Job`` fields for a Gavel job type such as ``"ResNet-50 (batch size 64)"``, with
    the loader and loop of its script (:data:`GAVEL_SURROUNDINGS`)."""
    name, batch = split_job_type(job_type)
    if name not in MAPPING:
        raise KeyError(f"no gpucast mapping for Gavel job type {job_type!r}")
    data, loop = GAVEL_SURROUNDINGS[name]
    return {**MAPPING[name].job(batch), "data": data, "loop": loop}


# ----------------------------------------------------------------------------- the loaders

# Each Gavel job type's loader and loop, from its script (the mapping's notes below).
GAVEL_SURROUNDINGS: dict = {  # job type -> (Data, Loop)
    # cifar10/main.py: DataLoader(num_workers=2), RandomCrop + flip + ToTensor + Normalize, loss.item()
    # and correct .sum().item() every step.
    "ResNet-18": (Data(source="small-images", num_workers=2, pin_memory=False, non_blocking=False),
                  Loop(item_calls=2, progress_bar=False, log_every=0, cudnn_benchmark=True)),
    # imagenet/main.py -j 8: JPEGs, RandomResizedCrop + flip, pin_memory, non_blocking, cudnn.benchmark,
    # loss.item() per step, print_freq 10.
    "ResNet-50": (Data(source="images", num_workers=8, pin_memory=True, non_blocking=True),
                  Loop(item_calls=1, progress_bar=False, log_every=10, cudnn_benchmark=True)),
    # translation/train.py: DataLoader(num_workers=2) with padding collate, tqdm per step, loss.item()
    # and the correct-word count .item() per step.
    "Transformer": (Data(source="tokens", num_workers=2, pin_memory=False, non_blocking=False),
                    Loop(item_calls=2, progress_bar=True, log_every=0, cudnn_benchmark=False)),
    # language_modeling/main.py: num_workers=0 Dataset whose __getitem__ slices the batchified GPU
    # corpus and concatenates per sample: about two GPU ops and two views from Python per sample
    # (EstimatorConfig: 2 x python_op_s + 2 x python_view_s + the fetcher ~6 us = 29 us), no copy.
    # loss.item() per step, log_interval 200.
    "LM": (Data(source="custom", per_sample_s=29e-6, num_workers=0, pin_memory=False, non_blocking=False),
           Loop(item_calls=1, progress_bar=False, log_every=200, cudnn_benchmark=False)),
    # recommendation/train.py (recoder): num_data_workers=0, sparse batches collated from CSR on the
    # host and densified on the GPU, so a sample moves its ratings, not 20,108 floats: ML-20M's
    # 20,000,263 ratings over 138,493 users (Harper & Konstan 2015) are ~145 per user, 12 bytes each
    # (an int64 index and a float32 value); pageable copies, loss.item() per step.
    "Recommendation": (Data(source="memory", num_workers=0, pin_memory=False, non_blocking=False,
                            dataset_samples=136_677, sample_bytes=1_740),
                       Loop(item_calls=1, progress_bar=False, log_every=0, cudnn_benchmark=False)),
    # rl/main.py: Pong stepped in the main process, one environment step per rollout frame.
    "A3C": (Data(source="environment", num_workers=0),
            Loop(item_calls=1, progress_bar=False, log_every=0, cudnn_benchmark=False)),
    # cyclegan.py: n_cpu workers (8 by default), Resize 286 + RandomCrop 256 + flip, five .item() and
    # a status line every step.
    "CycleGAN": (Data(source="images", num_workers=8, pin_memory=False, non_blocking=False, image_size=(256, 256),
                      dataset_samples=6_287),
                 Loop(item_calls=5, progress_bar=False, log_every=1, cudnn_benchmark=False)),
}



# ----------------------------------------------------------------------------- the mapping
# (moved here from benchmarks/gavel_compare.py, which imports it)

@dataclass(frozen=True)
class Mapping:
    """How one Gavel job type becomes a gpucast Job, and why."""

    model: str                        # zoo name
    job: Callable[[int | None], dict]  # batch size from the key -> Job fields
    evidence: str                     # what Gavel's code establishes
    unknown: str                      # what we could not establish / known differences
    fields_note: str = ""             # short text for the table
    nearest: bool = False             # True: Gavel's model is not a zoo model; this is the nearest
                                      # zoo workload (benchmarks/gavel_compare.py's variants follow
                                      # Gavel's own definition as custom modules)


MAPPING: dict[str, Mapping] = {
    # Gavel: image_classification/cifar10/main.py. `from models import *; net = ResNet18()`,
    # CIFAR-10 32x32, SGD(lr 0.1, momentum 0.9, wd 5e-4), DataLoader(num_workers=2) with
    # RandomCrop(32, pad 4) + flip + ToTensor + Normalize, `loss.item()` and an accuracy
    # `.sum().item()` every step.
    "ResNet-18": Mapping(
        model="resnet18-cifar",
        job=lambda b: dict(model="resnet18-cifar", batch_size=b, optimizer="sgd"),
        evidence="job_table.py: cifar10/main.py --batch_size N; main.py builds ResNet18() "
                 "(the pytorch-cifar definition), CIFAR-10, SGD momentum 0.9, 2 loader workers.",
        unknown="Gavel's ResNet18() is the pytorch-cifar one (3x3 stride-1 stem, no max-pool, "
                "~0.56 GFLOP/img forward); gpucast's resnet18-cifar is torchvision's ResNet-18 with "
                "that same CIFAR stem, so the layers match. Gavel's data loader (2 workers, "
                "random crop + flip) and per-step .item() calls are not modelled.",
        fields_note="bN, sgd"),
    # Gavel: image_classification/imagenet/main.py (pytorch/examples), `-j 8 -a resnet50 -b N`:
    # torchvision resnet50, ImageNet JPEGs with RandomResizedCrop(224) + flip, 8 loader workers,
    # pin_memory, SGD(0.1, momentum 0.9, wd 1e-4), cudnn.benchmark=True, loss.item() per step.
    "ResNet-50": Mapping(
        model="resnet50",
        job=lambda b: dict(model="resnet50", batch_size=b, optimizer="sgd"),
        evidence="job_table.py: imagenet/main.py -j 8 -a resnet50 -b N; torchvision resnet50, "
                 "224x224, SGD momentum 0.9, 8 JPEG-decoding loader workers.",
        unknown="Host CPU and loader throughput of Gavel's machines not known (JPEG decode can "
                "bound small GPUs' peers, not usually a K80).",
        fields_note="bN, 224px, sgd"),
    # Gavel: translation/train.py (jadore801120/attention-is-all-you-need-pytorch):
    # `-data multi30k.atok.low.pt -batch_size N -proj_share_weight`; defaults d_model 512,
    # d_inner 2048, 8 heads, 6+6 layers, dropout 0.1; Adam(0.9, 0.98, eps 1e-9) with the
    # warm-up schedule; DataLoader(num_workers=2) whose collate pads to the longest sentence.
    "Transformer": Mapping(
        model="transformer-nmt",
        job=lambda b: dict(model="transformer-nmt", batch_size=b, seq_len=32, optimizer="adam"),
        evidence="job_table.py: translation/train.py -batch_size N -proj_share_weight; "
                 "transformer-base shape (512/2048/8 heads/6+6), Adam.",
        unknown="Sequence length NOT established: Multi30k sentences average ~12-13 tokens and the "
                "collate pads to the batch's longest (preprocessing caps at 50+2); we use seq_len "
                "32 for every batch, an assumption. Vocabulary differs: Multi30k's (a few "
                "thousand words per side, separate src/tgt tables) vs the zoo's shared 32k, so "
                "gpucast costs a larger output projection and softmax. An evaluation epoch runs "
                "inside Gavel's timed loop every ~450 steps at b64 (amortised, not modelled).",
        fields_note="bN, seq 32 (assumed), adam"),
    # Gavel: language_modeling/main.py (pytorch/examples word_language_model): `--cuda --data
    # wikitext2 --batch_size N`; defaults LSTM, emsize 200, nhid 200, 2 layers, dropout 0.2,
    # bptt 35, untied; plain SGD(lr 20), clip_grad_norm_(0.25); a Dataset whose __getitem__
    # slices a GPU tensor per sample (two cats per sample) and a num_workers=0 DataLoader.
    "LM": Mapping(
        model="lstm-lm-small",
        job=lambda b: dict(model="lstm-lm-small", batch_size=b, seq_len=35, optimizer="sgd"),
        evidence="job_table.py: language_modeling/main.py --batch_size N; 2-layer LSTM, "
                 "hidden 200, bptt 35 = lstm-lm-small's shape.",
        unknown="VOCABULARY DIFFERS: WikiText-2 has 33,278 words vs the zoo's PTB 10k, and the "
                "200->vocab decoder is most of this model's FLOPs (see the variant). Dropout "
                "0.2 vs 0.0, plain SGD + clip_grad_norm_ vs SGD momentum. Gavel's per-sample "
                "__getitem__ launches ~4 small GPU ops per sample in the main process (not "
                "modelled).",
        fields_note="bN, seq 35, sgd", nearest=True),
    # Gavel: recommendation/train.py + recoder: DynamicAutoencoder(hidden_layers=[200], tanh,
    # noise_prob 0.5), loss 'logistic' (BCEWithLogits, sum), Adam(1e-3, wd 2e-5), mini-batch
    # negative sampling, num_data_workers=0; ML-20M as preprocessed for VAE-CF (pro_sg).
    "Recommendation": Mapping(
        model="deeprec-autoencoder",
        job=lambda b: dict(model="deeprec-autoencoder", batch_size=b, input_shape=(20108,),
                           optimizer="adam"),
        evidence="job_table.py: recommendation/train.py --data_dir ml-20m/pro_sg/ --batch_size N; "
                 "an item-vector autoencoder trained with Adam. The zoo's closest entry is the "
                 "DeepRecommender autoencoder.",
        unknown="ARCHITECTURE DIFFERS: Gavel's model is recoder's DynamicAutoencoder with ONE "
                "hidden layer of 200 (tanh), item embeddings gathered per batch and BCE loss, "
                "not DeepRecommender's 512-512-1024 SELU. Item count 20,108 is ML-20M after "
                "VAE-CF preprocessing (Liang et al. 2018), not read from the data here; with "
                "negative sampling a batch sees only its users' items (fewer at small batches, "
                "not established). Batches are collated from CSR on the host "
                "(num_data_workers=0).",
        fields_note="bN, 20108 items, adam", nearest=True),
    # Gavel: rl/main.py + train.py (dgriff777/rl_a3c_pytorch, "Hogwild training was far
    # superior"): PongDeterministic-v4, --workers 4 --amsgrad True, num-steps 20 per rollout;
    # A3Clstm with hx/cx of 512; shared Adam on the CPU copy of the model.
    "A3C": Mapping(
        model="a3c-atari",
        job=lambda b: dict(model="a3c-atari", batch_size=20, input_shape=(1, 80, 80),
                           optimizer="adam"),
        evidence="job_table.py: rl/main.py --env PongDeterministic-v4 --workers 4 --amsgrad True; "
                 "a step is one 20-frame rollout (num-steps default 20) of worker 0, forward one "
                 "frame at a time, then backward; frames are 80x80 in that code base.",
        unknown="ARCHITECTURE DIFFERS: dgriff777's A3Clstm (4 stride-1 convs with max-pools, "
                "LSTMCell 1024->512) vs the zoo's universe-starter net (4 stride-2 convs, LSTM "
                "256). Not modelled at all: 4 Hogwild processes share the GPU, Atari emulation "
                "on the CPU, grads copied to and Adam run on a CPU model, weights copied back "
                "each rollout.",
        fields_note="rollout 20, 1x80x80, adam", nearest=True),
    # Gavel: cyclegan/cyclegan.py (eriklindernoren/PyTorch-GAN): batch_size 1, 256x256,
    # 9 residual blocks, Adam(2e-4, 0.5, 0.999) x3, LSGAN + L1 cycle (10) + identity (5),
    # 4 loader workers (Resize 286 bicubic + RandomCrop + flip), five .item() per step,
    # sample_images() every 100 steps.
    "CycleGAN": Mapping(
        model="cyclegan",
        job=lambda b: dict(model="cyclegan", batch_size=1, input_shape=(3, 256, 256),
                           optimizer="adam"),
        evidence="job_table.py: cyclegan.py --dataset_path monet2photo --decay_epoch 0; "
                 "defaults batch 1, 256x256, ResNet-9-block generators, PatchGAN, Adam.",
        unknown="The PatchGAN differs slightly (eriklindernoren: 4 stride-2 blocks -> 16x16 "
                "patches; zoo: 70x70 PatchGAN with a stride-1 C512). sample_images() every 100 "
                "steps (5 test images through both generators, PNG write) is inside the timed loop.",
        fields_note="b1, 256px, adam"),
}
