"""Gavel's published data, packaged: job-type mapping, trace files and measured throughputs.

A data module low in the layers (it imports only :mod:`gpucast.surroundings`): the simulator
(``gpucast.cluster``: traces, truth, co-location fits) and the measured-row sets
(``gpucast.learn.shared_records``) both read it, and neither imports the other for it.
``gpucast.cluster.gavel`` re-exports every name, the path older code and the benchmarks use.

Source: Gavel (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep
Learning Workloads", OSDI 2020; github.com/stanford-futuredata/gavel), MIT licence, copied
unchanged into ``gpucast/data/gavel/`` (``LICENSE``, ``simulation_throughputs.json``,
``traces/*.trace``) so that the installed simulator works without the repository's
``data/measured/gavel`` (the same files, which tests, benchmarks and scripts read).

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

from gpucast.surroundings import Data, Loop, Stack

GAVEL_GPUS = {"k80": "k80", "p100": "p100", "v100": "v100-16gb"}  # Gavel name -> catalog name
CATALOG_TO_GAVEL = {v: k for k, v in GAVEL_GPUS.items()}
_JOB_TYPE_RE = re.compile(r"^(?P<name>.*?) \(batch size (?P<batch>\d+)\)$")


@functools.cache
def data_dir() -> Path:
    """The packaged copy of Gavel's data (``gpucast/data/gavel``)."""
    return Path(str(resources.files("gpucast") / "data" / "gavel"))


def throughputs_path() -> Path:
    return data_dir() / "simulation_throughputs.json"


def trace_ids() -> list[str]:
    """Ids of the packaged Gavel traces (file stems, e.g. ``"ee9e8c"``)."""
    return sorted(p.stem for p in (data_dir() / "traces").glob("*.trace"))


@functools.lru_cache(maxsize=8192)
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
    """``{(job type, scale factor, catalog gpu): steps/s}`` for every positive solo entry (a copy of
    the table parsed once per file and process: the simulator asks once per job)."""
    return dict(_solo_table(str(path or throughputs_path())))


@functools.lru_cache(maxsize=4)
def _solo_table(path: str) -> dict[tuple[str, int, str], float]:
    data = _read(path)
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
    the loader and loop of its script (:data:`GAVEL_SURROUNDINGS`) and Gavel's stack
    (:data:`GAVEL_STACK`)."""
    name, batch = split_job_type(job_type)
    if name not in MAPPING:
        raise KeyError(f"no gpucast mapping for Gavel job type {job_type!r}")
    data, loop = GAVEL_SURROUNDINGS[name]
    return {**MAPPING[name].job(batch), "data": data, "loop": loop, "stack": GAVEL_STACK}


# ----------------------------------------------------------------------------- the stack

# scheduler/requirements.txt pins torch==1.4.0 and torchvision==0.5.0 for every job type. The
# torch 1.4.0 wheel that `pip install torch==1.4.0` installs is built with CUDA 10.1 (pytorch.org,
# "Previous PyTorch Versions", v1.4.0: CUDA 10.1 is the default wheel, CUDA 9.2 the +cu92 one),
# cuDNN 7.6. PyTorch 1.4: optimizers loop over parameters in Python (no foreach), CUDA modules
# load eagerly (lazy loading needs CUDA 11.7 and is PyTorch 2.0's default).
# The hosts: Gavel's throughputs were measured on cloud instances whose CPUs are not recorded
# with the data; no CPU speed is given (cpu_speed stays the reference core's).
GAVEL_STACK = Stack(torch="1.4", cuda="10.1", lazy_loading=False)

# ----------------------------------------------------------------------------- the loaders

# language_modeling/main.py's CorpusDataset.__getitem__ slices the batchified corpus, which lives
# on the GPU, per sample (two slices, two new_zeros, two torch.cat): the same Dataset as Lucid's
# workloads/lstm/profile_lstm.py, timed for gpucast.learn.lucid.LSTM_GPU_INDEX_SAMPLE_S (28 us per
# sample measured on CPU tensors + ~10 us for the two cat launches on CUDA, on a core 187/80 times
# slower than the reference one): 38 us * 80 / 187 on the reference core.
LM_GPU_INDEX_SAMPLE_S = 38e-6 * 80.0 / 187.0
# WikiText-2's training split is 2,088,628 tokens (Merity et al. 2016); CorpusDataset.__len__ is
# tokens // bptt (35): samples per epoch, a new DataLoader iterator at each epoch's end.
LM_EPOCH_SAMPLES = 2_088_628 // 35

# recommendation/train.py: recoder's RecommendationDataLoader with num_data_workers=0 collates a
# batch in the loop from the CSR matrix (scipy row indexing, nonzero, np.unique over the batch's
# items, torch.LongTensor([rows, cols]) from two numpy arrays, FloatTensor(values)) and
# __compute_loss copies the sparse indices (2 x int64) and values (float32) of each interaction
# to the GPU, where to_dense makes the batch dense: 20 bytes per interaction, 73 interactions
# per user (ML-20M as VAE-CF preprocesses it: 10.0M interactions over 136,677 users, Liang et
# al. 2018 Table 1), plus the user id (8 bytes). Training users: 136,677 less 10,000 validation
# and 10,000 test users = 116,677 per epoch.
REC_SAMPLE_BYTES = 73 * 20 + 8
REC_EPOCH_SAMPLES = 116_677
# That collate, timed by benchmarks/gavel_host_costs.py (synthetic CSR rows of the script's shape,
# one thread, torch 2.x/scipy 1.17, the fastest of five runs on a shared 2-core VM): 24.8 us
# per user on a core that ran the CIFAR recipe in 141 us, so 24.8 * 80 / 141 us on the reference
# core (Environment.small_image_sample_s = 80 us).
REC_COLLATE_SAMPLE_S = 24.8e-6 * 80.0 / 141.0

# rl/train.py: per frame, Pong stepped in the worker's process (Environment.env_step_s's prior,
# restated because a custom per_sample_s replaces the source's cost: tests check they agree), and
# per iteration shared_optim.py's SharedAdam(amsgrad) step on the CPU model, one thread
# (main.py sets OMP_NUM_THREADS=1), over A3Clstm's 3,249,639 parameters, timed by
# benchmarks/gavel_host_costs.py: 9.2 ms on the 141-us core above, 9.2 * 80 / 141 ms on the
# reference core; spread over the rollout's 20 frames.
A3C_ENV_STEP_S = 400e-6
A3C_ROLLOUT = 20                       # main.py --num-steps
A3C_CPU_ADAM_S = 9.2e-3 * 80.0 / 141.0
A3C_HOST_PER_FRAME_S = A3C_ENV_STEP_S + A3C_CPU_ADAM_S / A3C_ROLLOUT

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
    # language_modeling/main.py: DataLoader(CorpusDataset, batch_size, shuffle=False, drop_last=True),
    # num_workers=0; the samples are slices of the GPU corpus (LM_GPU_INDEX_SAMPLE_S each, nothing
    # copied from the host, so nothing blocks); total_loss += loss.item() per step (clip_grad_norm_'s
    # own sync is in the graph), a log line every --log-interval 200 steps.
    "LM": (Data(source="custom", per_sample_s=LM_GPU_INDEX_SAMPLE_S, num_workers=0, pin_memory=False,
                non_blocking=True, sample_bytes=0, dataset_samples=LM_EPOCH_SAMPLES),
           Loop(item_calls=1, progress_bar=False, log_every=200, cudnn_benchmark=False)),
    # recommendation/train.py + recoder/model.py: the batch collated in the loop (num_data_workers=0,
    # REC_COLLATE_SAMPLE_S per user) and copied pageable (REC_SAMPLE_BYTES per user); loss.item()
    # and a tqdm bar (set_postfix + update) every step.
    "Recommendation": (Data(source="custom", per_sample_s=REC_COLLATE_SAMPLE_S, num_workers=0, pin_memory=False,
                            non_blocking=False, dataset_samples=REC_EPOCH_SAMPLES, sample_bytes=REC_SAMPLE_BYTES),
                       Loop(item_calls=1, progress_bar=True, log_every=0, cudnn_benchmark=False)),
    # rl/train.py: Pong stepped in the process, one environment step per frame of the 20-frame
    # rollout, and the CPU SharedAdam step spread over those frames (A3C_HOST_PER_FRAME_S: host
    # work with no gpucast source, so "custom"); each new frame .cuda()'d (pageable, blocking); per
    # iteration 20 action reads (action.cpu(): the graph holds them as syncs) and 16
    # param.grad.cpu() copies (utils.ensure_shared_grads), 36 host reads in all; "finished step"
    # printed every 100.
    "A3C": (Data(source="custom", per_sample_s=A3C_HOST_PER_FRAME_S, num_workers=0, pin_memory=False,
                 non_blocking=False),
            Loop(item_calls=36, progress_bar=False, log_every=100, cudnn_benchmark=False)),
    # cyclegan.py: n_cpu workers (8 by default), Resize 286 + RandomCrop 256 + flip, five .item() and
    # a status line every step.
    "CycleGAN": (Data(source="images", num_workers=8, pin_memory=False, non_blocking=False, image_size=(256, 256),
                      dataset_samples=6_287),
                 Loop(item_calls=5, progress_bar=False, log_every=1, cudnn_benchmark=False)),
}


# ----------------------------------------------------------------------------- the mapping
# (moved here from benchmarks/gavel_compare.py, which imports it through gpucast.cluster.gavel)

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
    # wikitext2 --batch_size N` (job_table.py lm()); defaults --model LSTM --emsize 200 --nhid 200
    # --nlayers 2 --dropout 0.2 --bptt 35 --clip 0.25 --lr 20, untied. Per step (train()):
    # data.t() / targets.t(), repackage_hidden (detach), model.zero_grad(), forward (embedding ->
    # dropout -> cuDNN LSTM -> dropout -> 200x33,278 decoder), CrossEntropyLoss over all
    # 35 x N positions, backward, clip_grad_norm_(0.25), torch.optim.SGD(lr 20).step() (no
    # momentum), total_loss += loss.item(). The batch is the DataLoader's (batch_size N) over
    # CorpusDataset, whose sample idx is column idx % N of bptt chunk idx // N: one step = one
    # 35 x N chunk of the batchified corpus, as batchify + get_batch would give.
    "LM": Mapping(
        model="lstm-lm-wikitext2-clipped",
        job=lambda b: dict(model="lstm-lm-wikitext2-clipped", batch_size=b, seq_len=35, optimizer="none"),
        evidence="job_table.py: language_modeling/main.py --cuda --data wikitext2 --batch_size N; "
                 "main.py defaults: LSTM 2x200, emsize 200, dropout 0.2, untied, bptt 35, clip 0.25, "
                 "SGD lr 20 without momentum; WikiText-2 vocabulary 33,278. The zoo workload is that "
                 "RNNModel with the script's clip_grad_norm_ (PyTorch 1.4's: per-parameter tensor "
                 "sums, one host read of clip_coef) and SGD update in the graph (optimizer 'none').",
        unknown="The clip and SGD ops are priced as autograd-engine ops (a script's Python costs a "
                "little more per op). The hidden state starts from zeros (two fills) where the "
                "script carries the previous step's, detached. The per-sample loader cost is "
                "Lucid's timing of the same CorpusDataset on torch 2.x, not of torch 1.4. Epoch "
                "ends (every 59,675 / N steps) print two lines and start a new iterator (epoch_s); "
                "no evaluation runs inside the timed loop.",
        fields_note="bN, seq 35, clip + plain sgd in graph"),
    # Gavel: recommendation/train.py + recoder: DynamicAutoencoder(hidden_layers=[200],
    # activation_type='tanh', noise_prob=0.5, sparse=False) (recoder/nn.py), Recoder(
    # optimizer_type='adam', loss='logistic', user_based=False): Adam(lr 1e-3, weight decay 2e-5
    # on all but biases), BCEWithLogitsLoss(reduction='sum') / batch size; train(batch_size N,
    # negative_sampling=True, num_data_workers=0). Per step (recoder/model.py _train):
    # optimizer.zero_grad(), the batch collated by BatchCollator in the loop, sparse
    # indices/values/users/items .to(device), to_dense() on the GPU, forward, loss, backward,
    # optimizer.step(), loss.item(), tqdm set_postfix + update.
    "Recommendation": Mapping(
        model="recoder-ml20m",
        job=lambda b: dict(model="recoder-ml20m", batch_size=b, input_shape=(73,), optimizer="adam"),
        evidence="job_table.py: recommendation/train.py --data_dir ml-20m/pro_sg/ --batch_size N; "
                 "train.py: recoder DynamicAutoencoder [200] tanh with noise 0.5 and dense (not "
                 "sparse) item embeddings, Adam, logistic loss, negative sampling, "
                 "num_data_workers=0; recoder-ml20m is that model over ML-20M's 20,108 items "
                 "(VAE-CF preprocessing) with 73 interactions per user (10.0M / 136,677).",
        unknown="Negative sampling: a batch's columns are only the items its users rated, fewer "
                "than 20,108 at small batches (not established without the data): the zoo job "
                "uses all 20,108 (an upper bound on the GPU work). Adam's weight decay (one more "
                "kernel per weight) is not in the graph. The collate's host cost is timed on torch "
                "2.x, not 1.4 (torch.LongTensor from numpy arrays converts element by element in "
                "both). At the stored commit recoder/model.py hands Gavel's iterator "
                "synthetic_data=True (the first batch reused, no collate after it); whether the "
                "profiler's runs had it is not established: modelled as collating every step, as "
                "the script does without the iterator.",
        fields_note="bN, 20108 items, 73 ratings/user, adam"),
    # Gavel: rl/main.py + train.py (dgriff777/rl_a3c_pytorch, "Hogwild training was far
    # superior"): `--env PongDeterministic-v4 --workers 4 --amsgrad True` (job_table.py a3c()),
    # --num-steps 20. main.py keeps shared_model = A3Clstm on the CPU (share_memory) with a
    # SharedAdam(amsgrad) over its parameters and starts 4 train() processes, all on the job's
    # one GPU (gpu_ids = [local_rank]); the iterations counted are worker 0's (processes[0].join()).
    # One iteration of train(): load_state_dict(shared_model.state_dict()) (the 16 CPU
    # parameters copied to the GPU model), up to 20 action_train() calls (forward of one 1x80x80
    # frame on the GPU, softmax, log_softmax, entropy, multinomial, gather, env.step(action.cpu()
    # .numpy()), the next frame .cuda()), one bootstrap forward, the GAE loop over the 20 steps on
    # 1x1 GPU tensors, backward on the GPU, ensure_shared_grads (param.grad.cpu() for the 16
    # parameters), optimizer.step() on the CPU model.
    "A3C": Mapping(
        model="a3c-atari-80",
        job=lambda b: dict(model="a3c-atari-80", batch_size=20, input_shape=(1, 80, 80), optimizer="none"),
        evidence="job_table.py: rl/main.py --env PongDeterministic-v4 --workers 4 --amsgrad True; "
                 "train.py: an iteration is one rollout of --num-steps 20 frames of worker 0, each "
                 "frame a GPU forward and a host read of the sampled action, then one bootstrap "
                 "forward, the GAE loop and one backward on the GPU; the optimizer is a SharedAdam "
                 "on the CPU copy of the model (optimizer 'none' on the GPU). a3c-atari-80 is "
                 "dgriff777's A3Clstm (model.py: 4 conv + max-pool on 1x80x80, LSTMCell 1024->512, "
                 "3,249,639 parameters).",
        unknown="The CPU SharedAdam step has no gpucast field: it is custom host time per frame "
                "(timed on torch 2.x with the A3Clstm's shapes, benchmarks/gavel_host_costs.py). "
                "NOT MODELLED: copying the 13 MB of weights to the GPU (load_state_dict) and the "
                "13 MB of gradients back (only their 16 + 16 calls' cost is priced, the 16 "
                "gradient copies as host reads); the 3 other Hogwild processes sharing the GPU "
                "(time-sliced CUDA contexts) and the host; Gavel's wrapper work per frame beyond "
                "the environment-step prior (crop, two cv2 resizes, running normalisation); "
                "episode resets. Gavel's hosts are not known.",
        fields_note="rollout 20, 1x80x80, CPU adam as host time"),
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
