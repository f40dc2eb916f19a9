"""How a deployment spans its GPUs: tensor-parallel ranks, pipeline stages, replicas, expert groups.

``gpus = tensor x pipeline x replicas`` (``parallel.tensor``, ``parallel.pipeline``; the replicas are
what is left, each a whole copy of the deployment behind a load balancer) and ``parallel.expert``
(expert parallelism inside the tensor-parallel group: :mod:`.experts`).

* **Pipeline stages** (``p``): the layers in ``p`` contiguous stages of ``ceil(layers / p)`` layers at
  most (vLLM's ``get_pp_indices`` splits them as evenly as it can); the first stage also holds the
  embedding, the last the head and the final norm. Each rank keeps its stage's weights and its
  stage's layers' KV cache. A batch passes the stages in turn, sending its hidden states and residual
  (two ``tokens x hidden`` tensors in the compute dtype, vLLM's ``IntermediateTensors``) from one to the
  next (:func:`gpucast.estimate.comm.collective_time`'s ``send-recv``, over NVLink inside a node).
  Engines with their own scheduler keep ``p`` batches in flight (vLLM V1's batch queue of
  ``pipeline_parallel_size`` batches, ``vllm/v1/engine/core.py``; v0's virtual engines before it;
  SGLang's and TensorRT-LLM's pipeline micro-batches alike): the running requests are split over
  ``p`` streams, each with ``1/p`` of the sequences (``max_num_seqs``) and of the cache, and each
  stream's iteration takes the whole model's time (its batch visits every stage), stretched by the
  stages' imbalance ``p x ceil(layers/p) / layers`` when the layers do not divide (the largest stage
  sets the pace of the cycle), plus ``p - 1`` sends and the engine's host work once. TensorRT-LLM
  (``Engine.micro_batch_loop``) differs twice: its ``max_batch_size`` caps each micro-batch, not all of
  them (its capacity scheduler admits ``max_batch_size x pp``), and every rank's loop prepares each
  micro-batch on the host before that stage's kernels, with no overlap scheduler, so a stream's iteration
  is ``p x`` (a stage's share of the GPU time + a send + the host's work, a fixed part and a part per
  sequence: :data:`~.engines.PP_HOST_PER_SEQUENCE_S`). ``hf`` (``device_map`` over the GPUs, accelerate's
  naive pipeline) runs one batch through the stages one after another: the same time without the
  imbalance, each GPU busy for its stage only.
* **Replicas** (``r``): requests go round-robin to the replicas in arrival order (a load balancer's
  default); each replica is simulated on its own share.
* **Attention data parallelism** (``parallel.attention_dp``; TensorRT-LLM's ``enable_attention_dp``:
  "all GEMM weights are replicated on every GPU; the KV-cache is partitioned, because different user
  requests are routed to different DP ranks", its ``docs/source/features/parallel-strategy.md``): each
  of the ``t`` ranks is a scheduler of its own (its ``max_num_seqs``, its KV cache, requests dealt to
  it round-robin; the ranks of a large group span nodes past ``gpus_per_node``), holding every weight but
  the routed experts', which stay spread over the ranks
  (``expert``; ``t / expert`` ways of each expert's width). The ranks step together: every MoE layer
  takes all ranks' tokens (:mod:`.iteration`). A pipeline stage's ranks are ``t`` streams then, each
  ``p`` deep.

Not modelled: pipelines whose stages hold unequal layer counts by choice (``VLLM_PP_LAYER_PARTITION``),
a load balancer that routes by load or by prefix, attention-DP ranks out of step (one rank's long
prefill holding the others' MoE layers: the ranks are taken as balanced, as TensorRT-LLM's attention-DP
balancing aims for), redundant experts (EPLB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucast.estimate.comm import Group, Links, collective_time
from gpucast.job import JobError

ACTIVATION_BYTES = 2   # the hidden states a stage sends, in fp16/bf16
SENT_TENSORS = 2       # vLLM's IntermediateTensors between stages: hidden_states and residual


@dataclass(frozen=True)
class Layout:
    """The deployment's degrees (module docstring)."""

    tensor: int
    pipeline: int
    replicas: int
    expert: int
    layers: int
    attention_dp: bool = False

    @property
    def dp(self) -> int:
        """Attention data-parallel ranks of a tensor group: schedulers of their own (module docstring)."""
        return self.tensor if self.attention_dp else 1

    @property
    def attention_tensor(self) -> int:
        """The ranks the attention and the dense layers are split over (1 under attention DP)."""
        return 1 if self.attention_dp else self.tensor

    @property
    def stage_layers(self) -> int:
        return -(-self.layers // self.pipeline)

    @property
    def stage_share(self) -> float:
        """The largest stage's share of the layers."""
        return self.stage_layers / self.layers

    @property
    def imbalance(self) -> float:
        """How much longer the pipeline's cycle is than with evenly split layers (>= 1)."""
        return self.pipeline * self.stage_layers / self.layers

    @property
    def streams(self) -> int:
        """Batches in flight per replica."""
        return self.pipeline


def layout(job, shape: dict) -> Layout:
    """The job's degrees, checked against the model (one error line each)."""
    par = job.parallel
    t = (par.tensor or 1) if par is not None else 1
    p = (par.pipeline or 1) if par is not None else 1
    e = (par.expert or 1) if par is not None else 1
    dp = bool(par is not None and par.attention_dp)
    if shape["heads"] % t and not dp:
        raise JobError(f"field 'parallel.tensor' ({t}) must divide the model's {shape['heads']} attention heads")
    if p > shape["layers"]:
        raise JobError(f"field 'parallel.pipeline' ({p}) must be at most the model's {shape['layers']} layers")
    if e > 1:
        if not shape["experts"]:
            raise JobError("field 'parallel.expert' applies to mixture-of-experts models; this one has no experts")
        if t % e:
            raise JobError(f"field 'parallel.expert' ({e}) must divide parallel.tensor ({t}): the experts are "
                           f"spread over the tensor-parallel ranks")
        if shape["experts"] % e:
            raise JobError(f"field 'parallel.expert' ({e}) must divide the model's {shape['experts']} experts")
    return Layout(tensor=t, pipeline=p, replicas=max(1, job.gpus // (t * p)), expert=e, layers=shape["layers"],
                  attention_dp=dp)


def stage_weights(weights_per_rank: int, parameters: int, shape: dict, lay: Layout) -> int:
    """A rank's weight bytes under pipeline stages: its stage's layers plus the embedding or the head
    (tied embeddings are kept on both ends), from the whole model's bytes per tensor-parallel rank."""
    if lay.pipeline == 1:
        return weights_per_rank
    per_param = weights_per_rank / max(1, parameters)
    end = shape["vocab"] * shape["hidden"] * per_param   # the embedding's (or the head's) bytes on a rank
    body = max(0.0, weights_per_rank - (1 if shape.get("tied") else 2) * end)
    return int(body * lay.stage_share + end)


def stage_kv(kv_token_per_rank: int, lay: Layout) -> int:
    """Per-rank KV bytes of one token: the stage's layers' share."""
    return int(math.ceil(kv_token_per_rank * lay.stage_share))


def send_time(tokens: int, hidden: int, lay: Layout, links: Links, gpus_per_node: int) -> float:
    """Seconds to pass ``tokens`` tokens' hidden states and residual from one stage to the next."""
    if lay.pipeline <= 1 or tokens <= 0:
        return 0.0
    per_node = 2 if lay.tensor * lay.pipeline <= gpus_per_node else 1
    return collective_time("send-recv", tokens * hidden * ACTIVATION_BYTES * SENT_TENSORS,
                           Group(2, per_node, concurrent=lay.tensor if per_node == 1 else 1), links)


def staged(model, lay: Layout, send, sequential: bool, micro_batch_loop: bool):
    """An iteration cost (``model``'s :meth:`~.iteration.IterationModel.cost`, ``wall, busy`` of the whole model on
    one tensor-parallel group) as a pipeline stream runs it (module docstring): ``busy`` becomes one GPU's, its
    stage's share."""
    if lay.pipeline <= 1:
        return model.cost
    p, stretch = lay.pipeline, (1.0 if sequential else lay.imbalance)
    engine = model.engine

    def run(ntok, ndec, dctx, ptok, pctx, npre=1):
        gpu, busy = model.device_cost(ntok, ndec, dctx, ptok, pctx, npre)
        if micro_batch_loop:   # every stage prepares the micro-batch on the host, then runs its kernels and sends
            host = engine.host_per_iteration_s + engine.pp_host_per_sequence_s * (ndec + (npre if ptok else 0))
            return p * (gpu * stretch / p + send(ntok) + host), busy * lay.stage_share
        return gpu * stretch + (p - 1) * send(ntok) + engine.host_per_iteration_s, busy * lay.stage_share

    return run


def split(order: np.ndarray, k: int) -> list[np.ndarray]:
    """Request indices (in arrival ``order``) dealt round-robin into ``k`` streams."""
    return [np.sort(order[i::k]) for i in range(k)]


def shares(total: int, k: int) -> list[int]:
    """``total`` split into ``k`` near-equal whole parts (the larger first)."""
    return [total // k + (1 if i < total % k else 0) for i in range(k)]
