"""How a job spans GPUs (:class:`Parallel`) and whether it trains adapters (:class:`Adapter`).

Two more groups of :class:`gpucast.job.Job` beside ``data``/``loop``/``stack`` and with their
habits (:class:`gpucast.surroundings._Spec`): built from a mapping, unset fields omitted from the
job's key, ``--set parallel.tensor=2`` on the CLI, the same names in job files and over HTTP.

``parallel`` (unset: one replica, plain DDP over ``gpus`` inside one node, as before it existed):

* ``tensor``: Megatron-style tensor-parallel degree *t* (splits each layer's matmuls, attention
  heads and the vocabulary; two all-reduces per layer in forward and two in backward);
* ``pipeline``: pipeline-parallel degree *p* (layers in *p* contiguous stages, 1F1B schedule,
  bubble ``(p-1)/(m+p-1)`` with *m* = ``grad_accum`` micro-batches);
* ``virtual_pipeline``: interleaved 1F1B with *v* model chunks per pipeline rank (Megatron-LM's
  virtual pipeline stages, Narayanan et al. 2021, sec. 2.2): the bubble shrinks to ``(p-1)/v``
  micro-batch slots and each micro-batch crosses ``v`` times as many stage boundaries; the layers
  must split evenly into ``p * v`` chunks (checked with the model), and it needs ``pipeline`` > 1;
* ``sequence``: sequence parallelism (Korthikanti et al. 2022): under tensor parallelism the layer
  norms, dropouts and residual adds run on a *t*-th of the sequence and their activations are held
  once, the all-reduces become reduce-scatters and all-gathers (unset: on with ``tensor`` > 1 under
  Megatron, as its recipes run; :mod:`gpucast.estimate.parallel.sequence`);
* ``tp_overlap``: the tensor-parallel collectives overlapped with the GEMMs, chunk by chunk
  (Transformer Engine's ``tp_comm_overlap``; needs sequence parallelism; unset: on under Megatron
  on Hopper and later, as NVIDIA's recipes run it, off elsewhere as Megatron-LM;
  :mod:`gpucast.estimate.parallel.sequence`);
* ``context``: context-parallel degree *c* (training): each sequence split over *c* ranks, keys and
  values passed round a ring (:mod:`gpucast.estimate.parallel.context`); the sequence must split
  into ``2 c`` equal chunks (checked with the model);
* data parallelism is what is left: ``d = gpus / (t * p * c)`` (serving: ``d`` replicas of the
  deployment behind a load balancer);
* ``sharding``: what the *d* data-parallel replicas shard (:data:`SHARDINGS`; the table of what
  each shards and when it gathers is :mod:`gpucast.estimate.parallel.sharding`);
* ``recompute``: activation checkpointing, ``none`` | ``selective`` (the attention core only,
  Korthikanti et al. 2022) | ``full`` (every layer keeps only its input and runs its forward again
  in backward);
* ``recompute_modules``: what ``selective`` recomputes, Megatron-Core's ``--recompute-modules``
  (:data:`RECOMPUTE_MODULES`; unset: ``core_attn``, the attention core); setting it implies
  ``selective``;
* ``first_stage_layers`` / ``last_stage_layers``: layers of the first and the last pipeline stage, the
  rest evenly over the others (Megatron-Core's ``--decoder-first/last-pipeline-num-layers``: a lighter
  first stage for the embedding, a lighter last one for the head, the loss and MTP); unset: an
  even split, the first stages taking the remainder;
* ``pipeline_layout``: Megatron-Core's ``--pipeline-model-parallel-layout``, which layers (``t``), the
  embedding (``E``), MTP depths (``m``) and the loss (``L``) each virtual stage holds, stages
  separated by ``|`` (``Et*3|(tt|)*29,m|L``; unset ``virtual_pipeline``: its stages over
  ``pipeline``); ``embedding_in_split`` / ``loss_in_split``: the embedding / the loss counted as a
  layer in the even split (``--account-for-embedding/loss-in-pipeline-split``);
  :mod:`gpucast.pipeline_layout`;
* ``mtp_layers``: multi-token-prediction depths on the last stage (DeepSeek-V3's MTP modules,
  Megatron-Core's ``--mtp-num-layers``; unset: the config's ``num_nextn_predict_layers`` under
  Megatron, 0 elsewhere, as transformers' model files build none), each costed as the last layer
  and the head again;
* ``offload``: layers of each pipeline stage whose saved activations go to host memory (training;
  Megatron-Core's ``--cpu-offloading-num-layers``; unset: 0;
  :mod:`gpucast.estimate.parallel.offload`);
* ``grad_accum``: micro-batches per optimizer step (``batch_size`` is the micro-batch);
* ``framework``: the trainer whose Python runs around the model, :data:`FRAMEWORKS` (unset:
  ``megatron`` with tensor or pipeline parallelism, ``deepspeed`` for ZeRO, ``fsdp`` for FSDP,
  ``torch`` for DDP; the host time each adds is :mod:`gpucast.estimate.parallel.framework`'s);
* ``expert``: expert-parallel degree *e* of a mixture-of-experts model. Served (``mode: serve``):
  its experts spread whole over groups of the tensor-parallel ranks (*e* divides *t*;
  :mod:`gpucast.estimate.serving.experts`). Trained: Megatron-Core's expert parallelism with its
  MoE parallel folding, the experts over *e* ranks, each token's hidden state sent to its experts'
  ranks and back by all-to-alls (:mod:`gpucast.estimate.parallel.experts`); ``e x expert_tensor``
  must divide ``gpus / pipeline`` (checked here) and *e* the model's experts (checked with the model);
* ``attention_dp``: attention data-parallel over the tensor-parallel ranks of a served model
  (TensorRT-LLM's ``enable_attention_dp``, SGLang's ``--enable-dp-attention``; vLLM's
  ``--data-parallel-size d --enable-expert-parallel`` is ``tensor: d`` with it): each rank keeps every
  weight but the routed experts' and serves its own requests from its own KV cache; the MoE layers
  stay spread over the ranks (``expert``), the tokens gathered to them and their outputs scattered
  back (:mod:`gpucast.estimate.serving.stages`); unset: off;
* ``expert_tensor``: expert-tensor-parallel degree of training (each expert's width split over
  that many ranks; unset: the tensor degree, Megatron-LM's default); serving's is ``tensor / expert``;
* ``expert_dispatcher``: how a MoE layer's tokens reach their experts' ranks (training; and serving
  under ``attention_dp``, where unset is TensorRT-LLM's all-gather / reduce-scatter and ``alltoall`` /
  ``deepep`` the wide-EP all-to-alls),
  :data:`EXPERT_DISPATCHERS`: ``alltoall`` (Megatron-Core's default: one copy per token and expert)
  or ``deepep`` (DeepEP's kernels: one copy per token and node across nodes, forwarded over NVLink);
* ``pp_overlap``: the pipeline's sends hidden behind compute (Megatron-Core's ``overlap_p2p_comm``;
  unset: on under Megatron with a virtual pipeline, as Megatron-Bridge sets it);
  ``dp_overlap``: the distributed optimizer's reduce-scatter and all-gather cut per layer and
  hidden behind the backward and the next forward (``overlap_grad_reduce``/``overlap_param_gather``;
  unset: on for ``zero1`` under Megatron); :mod:`gpucast.estimate.parallel.overlaps`;
* ``ep_overlap``: the expert-parallel all-to-alls hidden behind another micro-batch's compute
  (Megatron-Core's ``--overlap-moe-expert-parallel-comm``; unset: off, its default);
* ``cuda_graphs``: the transformer layers captured and replayed as CUDA graphs (training; Megatron-Core's
  ``--cuda-graph-impl transformer_engine``; unset: off; not with ZeRO-3/FSDP, which gather weights each
  micro-batch): their host dispatch, Python and in-layer collectives' calls become a graph launch a
  layer and direction (:mod:`gpucast.estimate.parallel.graphs`);
* ``fp8_param``: the FP8 layers' weights kept in FP8, with no bf16 copy, and all-gathered in FP8
  (training at ``fp8`` or ``mxfp8``; Megatron-Core's ``--fp8-param-gather``; unset: on under Megatron
  except ``blockwise`` scaling, as Megatron-Bridge's presets set it;
  :mod:`gpucast.estimate.parallel.fp8_params`);
* ``optimizer_moments``: the dtype Adam's two moments are kept in, :data:`OPTIMIZER_MOMENTS` (training;
  Megatron-Core's ``--use-precision-aware-optimizer`` with ``--exp-avg-dtype``/``--exp-avg-sq-dtype``,
  Transformer Engine's ``FusedAdam``; ``fp8`` with a scale per tensor; unset: ``fp32``), any optimizer's
  state in that dtype;
* ``master_weights``: the optimizer's master copy of the weights beside the model's half-precision ones,
  :data:`MASTER_WEIGHTS` (training under ZeRO / Megatron's distributed optimizer at a half-precision
  or Transformer Engine precision; unset: ``fp32``): ``fp16`` (``--main-params-dtype fp16``) or
  ``remainders``, the 16 bits an fp32 weight has beyond its bf16 copy (Megatron-Core's
  ``store_param_remainders``, on by default under the precision-aware optimizer; Apex's
  ``DistributedFusedAdam(store_param_remainders=True)``, which NeMo 1.x's ``distributed_fused_adam``
  sets for bf16 models), which needs bf16 weights; bytes per parameter in
  :mod:`gpucast.estimate.parallel.sharding`;
* ``grad_dtype``: the dtype the gradients are kept and reduced in beside half-precision weights,
  :data:`GRAD_DTYPES` (training under ZeRO / Megatron's distributed optimizer, as ``master_weights``;
  Megatron-Core's ``grad_reduce_in_fp32``, which Megatron-LM forces on for bf16 and Megatron-Bridge's
  recipes set, while their performance configurations and NeMo 1.x's ``grad_sync_dtype: bf16`` do not;
  unset: the weights' half dtype, 2 bytes);
* ``gpus_per_node`` (unset: the GPU's NVLink domain, 72 on a GB200/GB300 NVL72 rack, else 8; up to
  72) and ``network``, the links
  between nodes: ``KIND-GBIT`` with KIND in :data:`NETWORK_KINDS`, Gbit/s per node (``roce-1600``: 1,600 Gbit/s per node), or per GPU
  with ``/gpu`` (``ib-400/gpu``: a 400 Gbit/s NIC per GPU, 3,200 Gbit/s per 8-GPU node). Unset:
  :func:`default_network` for the GPU.

``adapter`` (unset: every parameter trains):

* ``kind``: ``lora`` | ``qlora`` (LoRA over 4-bit NF4 base weights, QLoRA, Dettmers et al. 2023);
* ``rank``: the adapters' rank *r* (16);
* ``targets``: module-name patterns (``fnmatch`` on the last name, or the dotted path) of the
  ``nn.Linear`` layers that get adapters; default :data:`DEFAULT_TARGETS`, the attention
  projections of the common architectures.

This module checks each field's shape and the combinations that need no model (``gpus`` divisible
by ``tensor * pipeline``, in :func:`check_job`); what needs the model (heads divisible by the
tensor degree, stages no more than layers) is checked when the plan is estimated. It does not
import torch. One module of this size because the two groups' fields, what each means and the checks
that need no model are one spec: a field's documentation, its shape and its combinations are read and
changed together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from gpucast.formats import FP8_PARAM_RECIPES
from gpucast.pipeline_layout import LayoutError
from gpucast.pipeline_layout import parse as layout_stages
from gpucast.surroundings import SpecError, _is_int, _Spec

# The training framework whose Python runs around the model (gpucast.estimate.parallel.framework).
FRAMEWORKS = ("megatron", "deepspeed", "fsdp", "torch")
SHARDINGS = ("ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid")
RECOMPUTE = ("none", "selective", "full")
# Megatron-Core's --recompute-modules (gpucast.graph.blocks.RECOMPUTE_MODULES, kept in step by a test).
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts")
# How a trained mixture-of-experts layer sends tokens to its experts' ranks (gpucast.estimate.parallel.experts).
EXPERT_DISPATCHERS = ("alltoall", "deepep")
NETWORK_KINDS = ("ib", "roce", "eth", "efa")
# The optimizer's state dtypes (Megatron-Core's OptimizerConfig; gpucast.estimate.parallel.sharding's bytes).
OPTIMIZER_MOMENTS = ("fp32", "bf16", "fp16", "fp8")
MASTER_WEIGHTS = ("fp32", "fp16", "remainders")
GRAD_DTYPES = ("fp32", "half")
# The precisions whose trained weights are bf16 (what master_weights: remainders completes to fp32), and
# with fp16 those whose weights are half precision beside an fp32 master (sharding.HALF's).
BF16_WEIGHTS = ("amp-bf16", "bf16", "fp8", "mxfp8", "nvfp4")
HALF_WEIGHTS = BF16_WEIGHTS + ("amp-fp16", "fp16")
ADAPTER_KINDS = ("lora", "qlora")
# The attention projections of common architectures (the names PEFT's per-model defaults use:
# q_proj/v_proj for Llama-likes, query/value for BERT, c_attn for GPT-2, Wqkv for MPT), all four
# projections where an architecture names them apart.
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "c_attn", "Wqkv",
                   "qkv_proj", "out_proj")
_NETWORK_RE = re.compile(r"^(?P<kind>[a-z]+)-(?P<gbit>\d+(\.\d+)?)(?P<per>/gpu|/node)?$")
MAX_DEGREE = 4096

# The largest NVLink domain a plan's "node" may be: a GB200/GB300 NVL72 rack, 72 GPUs behind NVLink
# switches (NVIDIA GB200 NVL72 specifications: "72 Blackwell GPUs ... a single NVLink domain").
MAX_NVLINK_DOMAIN = 72


@dataclass(frozen=True)
class Network:
    """A parsed ``parallel.network``: the kind and Gbit/s per node."""

    kind: str
    node_gbit: float
    spelled: str

    @property
    def node_gbs(self) -> float:
        """GB/s per node, one direction."""
        return self.node_gbit / 8.0


def parse_network(text: str, gpus_per_node: int = 8) -> Network:
    """``roce-1600`` -> 1,600 Gbit/s per node; ``ib-400/gpu`` -> 400 x ``gpus_per_node``."""
    m = _NETWORK_RE.match(text.strip().lower()) if isinstance(text, str) else None
    if m is None or m["kind"] not in NETWORK_KINDS or float(m["gbit"]) <= 0:
        raise SpecError(f"field 'parallel.network' must be KIND-GBIT[/gpu] with KIND one of "
                        f"{', '.join(NETWORK_KINDS)} (e.g. roce-1600, ib-400/gpu), got {text!r}")
    gbit = float(m["gbit"]) * (gpus_per_node if m["per"] == "/gpu" else 1)
    return Network(kind=m["kind"], node_gbit=gbit, spelled=text.strip().lower())


def default_network(nvlink_gbs: float, nic_gbit: float | None = None) -> str:
    """The network a cluster of this GPU usually has: the GPU spec's NIC per GPU where it names one
    (``nic_gbit``: 800 Gbit/s ConnectX-8 on the B300/GB300 systems), else one 400 Gbit/s NDR NIC per
    GPU with NVLink 4 and 5 (DGX H100/H200/B200 reference architectures), one 200 Gbit/s HDR NIC per
    GPU with NVLink 3 (DGX A100 SuperPOD), 100 Gbit/s Ethernet per node otherwise (PCIe servers)."""
    if nic_gbit:
        return f"ib-{nic_gbit:g}/gpu"
    if nvlink_gbs >= 900:
        return "ib-400/gpu"
    if nvlink_gbs >= 600:
        return "ib-200/gpu"
    return "eth-100"


# Parallel's integer fields: (lowest, highest, what an error says the field must be).
_INT_FIELDS = {
    **{name: (1, MAX_DEGREE, f"an integer between 1 and {MAX_DEGREE}")
       for name in ("tensor", "pipeline", "grad_accum", "expert", "virtual_pipeline", "context", "expert_tensor")},
    "first_stage_layers": (1, 100_000, "a number of layers (1 or more)"),
    "last_stage_layers": (1, 100_000, "a number of layers (1 or more)"),
    "mtp_layers": (0, 16, "an integer between 0 and 16"),
    "offload": (0, MAX_DEGREE, f"an integer between 0 and {MAX_DEGREE} (layers)"),
    "gpus_per_node": (1, MAX_NVLINK_DOMAIN, f"an integer between 1 and {MAX_NVLINK_DOMAIN}"),
}
_BOOL_FIELDS = ("sequence", "tp_overlap", "ep_overlap", "pp_overlap", "dp_overlap", "embedding_in_split",
                "loss_in_split", "attention_dp", "fp8_param", "cuda_graphs")


@dataclass(frozen=True)
class Parallel(_Spec):
    """How the job spans GPUs (module docstring)."""

    _NAME = "parallel"
    tensor: int | None = None
    pipeline: int | None = None
    sharding: str | None = None
    recompute: str | None = None
    grad_accum: int | None = None
    gpus_per_node: int | None = None
    network: str | None = None
    # Out of the repr, as Stack.loss: the simulator's truth draws each job's error from a hash of
    # its fields' repr (gpucast.cluster.truth._unit_normal); a new field there would redraw them.
    framework: str | None = field(default=None, repr=False)
    expert: int | None = field(default=None, repr=False)
    virtual_pipeline: int | None = field(default=None, repr=False)
    sequence: bool | None = field(default=None, repr=False)
    context: int | None = field(default=None, repr=False)
    tp_overlap: bool | None = field(default=None, repr=False)
    expert_tensor: int | None = field(default=None, repr=False)
    expert_dispatcher: str | None = field(default=None, repr=False)
    ep_overlap: bool | None = field(default=None, repr=False)
    recompute_modules: tuple[str, ...] | None = field(default=None, repr=False)
    offload: int | None = field(default=None, repr=False)
    pp_overlap: bool | None = field(default=None, repr=False)
    mtp_layers: int | None = field(default=None, repr=False)
    first_stage_layers: int | None = field(default=None, repr=False)
    last_stage_layers: int | None = field(default=None, repr=False)
    dp_overlap: bool | None = field(default=None, repr=False)
    pipeline_layout: str | None = field(default=None, repr=False)
    embedding_in_split: bool | None = field(default=None, repr=False)
    loss_in_split: bool | None = field(default=None, repr=False)
    attention_dp: bool | None = field(default=None, repr=False)
    fp8_param: bool | None = field(default=None, repr=False)
    cuda_graphs: bool | None = field(default=None, repr=False)
    optimizer_moments: str | None = field(default=None, repr=False)
    master_weights: str | None = field(default=None, repr=False)
    grad_dtype: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.recompute_modules, str):
            object.__setattr__(self, "recompute_modules",
                               tuple(t.strip() for t in self.recompute_modules.split(",") if t.strip()))
        elif isinstance(self.recompute_modules, list):
            object.__setattr__(self, "recompute_modules", tuple(self.recompute_modules))
        self._check("recompute_modules", self.recompute_modules is None or (
            len(self.recompute_modules) > 0 and all(m in RECOMPUTE_MODULES for m in self.recompute_modules)),
            f"a non-empty list of {', '.join(RECOMPUTE_MODULES)}")
        self._check("expert_dispatcher", self.expert_dispatcher is None or self.expert_dispatcher in EXPERT_DISPATCHERS,
                    f"one of {', '.join(EXPERT_DISPATCHERS)}")
        self._check("framework", self.framework is None or self.framework in FRAMEWORKS,
                    f"one of {', '.join(FRAMEWORKS)}")
        self._check("optimizer_moments", self.optimizer_moments is None or self.optimizer_moments in OPTIMIZER_MOMENTS,
                    f"one of {', '.join(OPTIMIZER_MOMENTS)}")
        self._check("master_weights", self.master_weights is None or self.master_weights in MASTER_WEIGHTS,
                    f"one of {', '.join(MASTER_WEIGHTS)}")
        self._check("grad_dtype", self.grad_dtype is None or self.grad_dtype in GRAD_DTYPES,
                    f"one of {', '.join(GRAD_DTYPES)}")
        for name, (lo, hi, what) in _INT_FIELDS.items():
            v = getattr(self, name)
            self._check(name, v is None or (_is_int(v) and lo <= v <= hi), what)
        for name in _BOOL_FIELDS:
            self._check(name, getattr(self, name) is None or isinstance(getattr(self, name), bool), "true or false")
        self._check("sharding", self.sharding is None or self.sharding in SHARDINGS, f"one of {', '.join(SHARDINGS)}")
        self._check("recompute", self.recompute is None or self.recompute in RECOMPUTE, f"one of {', '.join(RECOMPUTE)}")
        if self.pipeline_layout is not None:
            self._check("pipeline_layout", isinstance(self.pipeline_layout, str) and len(self.pipeline_layout) <= 4096,
                        "a layout string such as 'Et*3|(tt|)*29,m|L'")
            try:
                layout_stages(self.pipeline_layout)
            except LayoutError as exc:
                raise SpecError(f"field 'parallel.pipeline_layout': {exc}") from None
        if self.network is not None:
            if not isinstance(self.network, str):
                self._check("network", False, "KIND-GBIT[/gpu], e.g. roce-1600 or ib-400/gpu")
            parse_network(self.network)
            object.__setattr__(self, "network", self.network.strip().lower())

    def resolved(self, gpu=None) -> "Parallel":
        """Every field set: the defaults (module docstring) under the job's own values, those that
        depend on the GPU from its spec (``gpu``, a :class:`gpucast.hardware.GpuSpec`): ``gpus_per_node``
        its NVLink domain (``nvlink_domain``: 72 on a GB200/GB300 NVL72) or 8, ``network``
        :func:`default_network` of its NVLink rate and NIC."""
        nvlink_gbs, nvlink_domain = getattr(gpu, "nvlink_gbs", 0.0), getattr(gpu, "nvlink_domain", None)
        out = self.merged(Parallel(tensor=1, pipeline=1, sharding="ddp",
                                   recompute="selective" if self.recompute_modules else "none", grad_accum=1,
                                   gpus_per_node=nvlink_domain or 8,
                                   network=default_network(nvlink_gbs, getattr(gpu, "nic_gbit", None)),
                                   virtual_pipeline=self._layout_chunks(), context=1))
        return out if out.recompute_modules or out.recompute != "selective" else replace(
            out, recompute_modules=("core_attn",))

    def _layout_chunks(self) -> int:
        """Virtual stages per pipeline rank a layout implies (1 without one, or when they do not divide)."""
        if not self.pipeline_layout:
            return 1
        n, p = len(layout_stages(self.pipeline_layout)), self.pipeline or 1
        return n // p if n % p == 0 else 1

    def network_spec(self) -> Network:
        return parse_network(self.network, self.gpus_per_node or 8)


@dataclass(frozen=True)
class Adapter(_Spec):
    """Parameter-efficient fine-tuning: LoRA adapters, over 4-bit base weights for QLoRA."""

    _NAME = "adapter"
    kind: str | None = None
    rank: int | None = None
    targets: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.targets, str):
            object.__setattr__(self, "targets", tuple(t.strip() for t in self.targets.split(",") if t.strip()))
        elif isinstance(self.targets, list):
            object.__setattr__(self, "targets", tuple(self.targets))
        self._check("kind", self.kind in ADAPTER_KINDS, f"one of {', '.join(ADAPTER_KINDS)}")
        self._check("rank", self.rank is None or (_is_int(self.rank) and 1 <= self.rank <= 65536),
                    "an integer between 1 and 65536")
        self._check("targets", self.targets is None or (
            len(self.targets) > 0 and all(isinstance(t, str) and t.strip() and "\n" not in t for t in self.targets)),
            "a non-empty list of module-name patterns")

    def resolved(self) -> "Adapter":
        return self.merged(Adapter(kind=self.kind, rank=16, targets=DEFAULT_TARGETS))


def _check_layout(par, mode: str) -> None:
    """A custom pipeline layout or split (:mod:`gpucast.pipeline_layout`): training only, one way at a
    time, as many stages as the pipeline's virtual stages."""
    split = bool(par.embedding_in_split or par.loss_in_split)
    if not (par.pipeline_layout or split):
        return
    name = "pipeline_layout" if par.pipeline_layout else "embedding_in_split'/'loss_in_split"
    if mode != "train":
        raise SpecError(f"field 'parallel.{name}' lays out a training pipeline: it applies to mode 'train'")
    if par.first_stage_layers is not None or par.last_stage_layers is not None:
        raise SpecError(f"field 'parallel.{name}' and 'parallel.first_stage_layers'/'last_stage_layers' both split "
                        f"the layers: set one")
    if par.pipeline_layout and split:
        raise SpecError("field 'parallel.pipeline_layout' places the embedding and the loss itself: drop "
                        "'parallel.embedding_in_split'/'loss_in_split'")
    if par.pipeline_layout:
        n, p = len(layout_stages(par.pipeline_layout)), par.pipeline or 1
        if n != p * (par.virtual_pipeline or par._layout_chunks()):
            raise SpecError(f"field 'parallel.pipeline_layout' has {n} stages, not pipeline x virtual_pipeline "
                            f"({p} x {par.virtual_pipeline or 1})")


def check_job(job) -> None:
    """The combinations that need no model: ``gpus`` must be a multiple of ``tensor * pipeline * context``."""
    par = job.parallel
    if par is None:
        return
    t, p, c = par.tensor or 1, par.pipeline or 1, par.context or 1
    if job.gpus % (t * p * c):
        what, prod = ("parallel.tensor x parallel.pipeline", f"{t} x {p}") if c == 1 else (
            "parallel.tensor x parallel.pipeline x parallel.context", f"{t} x {p} x {c}")
        raise SpecError(f"field 'gpus' ({job.gpus}) must be a multiple of {what} ({prod} = {t * p * c})")
    if c > 1 and job.mode != "train":
        raise SpecError("field 'parallel.context' splits a training sequence: it applies to mode 'train'")
    if (par.virtual_pipeline or 1) > 1 and (p == 1 or job.mode != "train"):
        raise SpecError("field 'parallel.virtual_pipeline' interleaves a training pipeline: it needs "
                        "parallel.pipeline > 1 and mode 'train'")
    _check_layout(par, job.mode)
    if job.mode != "train" and (par.grad_accum or 1) > 1:
        raise SpecError("field 'parallel.grad_accum' applies to training (mode 'train')")
    e, etp = par.expert or 1, par.expert_tensor or t
    if job.mode == "serve" and par.expert_tensor is not None:
        raise SpecError("field 'parallel.expert_tensor' applies to training: a served model's experts are split "
                        "tensor / expert ways")
    if par.attention_dp and job.mode != "serve":
        raise SpecError("field 'parallel.attention_dp' splits a served model's requests over its tensor-parallel "
                        "ranks: it applies to mode 'serve'")
    if job.mode == "infer" and e > 1:
        raise SpecError("field 'parallel.expert' applies to training and serving (mode 'train' or 'serve')")
    if job.mode == "train" and (job.gpus // p) % (e * etp):
        raise SpecError(f"field 'parallel.expert' x 'parallel.expert_tensor' ({e} x {etp} = {e * etp}) must divide "
                        f"the {job.gpus // p} GPUs of a pipeline stage (gpus / pipeline: Megatron-Core's "
                        f"expert x expert-tensor x expert-data ranks)")
    if par.recompute_modules and par.recompute not in (None, "selective"):
        raise SpecError(f"field 'parallel.recompute_modules' names what selective recompute recomputes: it needs "
                        f"parallel.recompute selective (got {par.recompute})")
    if (par.offload or 0) > 0 and job.mode != "train":
        raise SpecError("field 'parallel.offload' moves a training step's saved activations to the host: it "
                        "applies to mode 'train'")
    if par.fp8_param and (job.mode != "train" or job.precision not in FP8_PARAM_RECIPES):
        raise SpecError(f"field 'parallel.fp8_param' keeps the weights of Transformer Engine's FP8 layers in FP8: it "
                        f"applies to training at precision fp8 or mxfp8 (got {job.mode} at {job.precision})")
    if par.cuda_graphs and (job.mode != "train" or (par.sharding or "ddp") in ("zero3", "fsdp-full", "fsdp-grad-op",
                                                                                 "fsdp-hybrid")):
        raise SpecError(f"field 'parallel.cuda_graphs' replays a training step's layers as CUDA graphs: it applies to "
                        f"mode 'train' without a sharding that gathers weights each micro-batch (got {job.mode}, "
                        f"{par.sharding or 'ddp'})")
    if job.adapter is not None and job.mode != "train":
        raise SpecError("field 'adapter' applies to training (mode 'train')")
    _check_optimizer_states(par, job)


def _check_optimizer_states(par: Parallel, job) -> None:
    """``optimizer_moments``, ``master_weights`` and ``grad_dtype`` need a training step; the last two the
    ZeRO layout's half-precision weights beside an fp32 master."""
    changed = {name: getattr(par, name) not in (None, default) for name, default in
               (("optimizer_moments", "fp32"), ("master_weights", "fp32"), ("grad_dtype", "half"))}
    for name in changed:
        if changed[name] and job.mode != "train":
            raise SpecError(f"field 'parallel.{name}' sets the dtype of a training step's state: it applies to mode "
                            f"'train' (got {job.mode})")
    for name in ("master_weights", "grad_dtype"):
        if changed[name] and ((par.sharding or "ddp") not in ("zero1", "zero2", "zero3")
                              or job.precision not in HALF_WEIGHTS):
            raise SpecError(f"field 'parallel.{name}' sets a dtype beside half-precision weights and an fp32 master: "
                            f"it needs parallel.sharding zero1, zero2 or zero3 (Megatron's distributed optimizer, "
                            f"DeepSpeed's ZeRO) at a half or Transformer Engine precision (got {par.sharding or 'ddp'} "
                            f"at {job.precision}; DDP and FSDP keep their fp32 weights and gradients as the master)")
    if par.master_weights in (None, "fp32"):
        return
    if par.master_weights == "remainders" and job.precision not in BF16_WEIGHTS:
        raise SpecError(f"field 'parallel.master_weights' remainders complete bf16 weights to fp32: precision "
                        f"{job.precision} keeps no bf16 weights (use fp16 or fp32)")


def replace_parallel(par: Parallel | None, **changes) -> Parallel:
    """``par`` (or an empty group) with some fields changed, validated again."""
    return replace(par or Parallel(), **changes)
