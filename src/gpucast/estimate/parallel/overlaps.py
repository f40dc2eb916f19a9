"""The pipeline's sends and the distributed optimizer's collectives hidden behind compute, as Megatron-Core runs them.

* **Pipeline sends** (``parallel.pp_overlap``; Megatron-Core's ``overlap_p2p_comm``): under the
  interleaved schedule the send and receive of the next chunk's activation or gradient run on
  their own stream while the current chunk computes. Megatron-Bridge turns it on wherever the
  virtual pipeline degree is above 1 and batches the sends instead otherwise (its
  ``CommOverlapConfig``: ``overlap_p2p_comm = vp_size > 1``), so a ``megatron`` plan does the same
  unless the job says otherwise. Of a micro-batch's ``2 v`` sends the first stays exposed and the
  rest hide while its compute lasts (:func:`overlapped_s`).
* **Data-parallel collectives of the distributed optimizer** (``parallel.dp_overlap``;
  ``overlap_grad_reduce`` and ``overlap_param_gather`` of Megatron-Core's
  ``DistributedDataParallelConfig``): the gradients' reduce-scatter is cut into one chunk per
  layer and each chunk issued as its layer's backward ends; the updated weights' all-gather is cut
  the same way and each chunk waited for just before its layer's forward in the next step.
  "This overlap method exposes only one DP communication chunk" (Megatron-Bridge, *Communication
  Overlap*); with pipeline parallelism a chunk is the layers of one virtual stage. Exposed:
  ``max(C / n, C - T)`` for ``n`` chunks of ``C`` seconds beside ``T`` seconds of the last
  micro-batch's backward (reduce-scatter) or of the first micro-batch's forward (all-gather)
  (:func:`dp_exposed_s`). Default on for a ``megatron`` plan with the distributed optimizer
  (``zero1``), as the recipes run it; off elsewhere (DDP and DeepSpeed keep their own models:
  :func:`gpucast.estimate.parallel.collectives.dp_step`).

Not modelled: the SMs the overlapped collectives take from the compute, the all-gather of the
first step (nothing to overlap with), delayed reduction of the embedding's gradients.
"""

from __future__ import annotations


def overlapped_s(comm_s: float, chunks: int, compute_s: float) -> float:
    """Exposed seconds of ``chunks`` equal pieces of ``comm_s`` issued beside ``compute_s`` of
    compute: the first exposed, the rest hidden while the compute lasts."""
    if chunks <= 0 or comm_s <= 0:
        return 0.0
    first = comm_s / chunks
    return first + max(0.0, comm_s - first - compute_s)


def pp_enabled(par, framework: str) -> bool:
    """Whether the pipeline's sends overlap compute (module docstring)."""
    if (par.pipeline or 1) <= 1:
        return False
    if par.pp_overlap is not None:
        return bool(par.pp_overlap)
    return framework == "megatron" and (par.virtual_pipeline or 1) > 1


def dp_enabled(par, framework: str) -> bool:
    """Whether the distributed optimizer's collectives overlap compute (module docstring)."""
    if par.dp_overlap is not None:
        return bool(par.dp_overlap)
    return framework == "megatron" and par.sharding == "zero1"


def dp_chunks(blocks: int, virtual: int, pipeline: int) -> int:
    """The chunks a rank's data-parallel collective is cut into: one per layer, one per virtual
    stage under pipeline parallelism."""
    if pipeline > 1:
        return max(1, virtual)
    return max(1, blocks)


def dp_exposed_s(comm_s: float, chunks: int, compute_s: float) -> float:
    """Exposed seconds of a chunked data-parallel collective beside ``compute_s`` (module docstring)."""
    if comm_s <= 0:
        return 0.0
    return max(comm_s / max(chunks, 1), comm_s - compute_s)


def notes(par) -> list[str]:
    out = []
    if par.pp_overlap and (par.pipeline or 1) <= 1:
        out.append("parallel.pp_overlap has no pipeline sends to overlap (pipeline 1): off")
    return out
