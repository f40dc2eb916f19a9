"""CUDA graphs for the training step's transformer layers (``parallel.cuda_graphs``): the host work they save.

Megatron-Core's ``--cuda-graph-impl transformer_engine`` captures each transformer layer's forward and
backward once (Transformer Engine's ``make_graphed_callables``, a graph per layer and micro-batch in
flight) and replays them: a layer then costs the host one call of the graphed callable and one
``cudaGraphLaunch`` a direction, not the dispatch of each of its ops (:func:`host_s`). What the graph
holds goes with it: the layer's own Python (Megatron's autograd Functions, the RNG tracker,
checkpointing's re-entry: ``layers=0`` in :func:`gpucast.estimate.parallel.framework.framework_host`)
and the c10d calls of the collectives inside the layer (tensor-, context- and expert-parallel,
captured as NCCL kernels). What stays on the host: the embedding and the head (outside the layers),
the schedule's per-micro-batch work, the pipeline's sends, the gradient hooks and the data-parallel
collectives, the optimizer.

The GPU's work is unchanged: the same kernels, back to back. So graphs matter where the host sets the
pace (small layers, short micro-batches, many ranks of thin tensor-parallel shards); a step already
bound by its kernels gains nothing, as NVIDIA's recipes show when they turn graphs on only for some
models.

Default: off (Megatron-Core's ``cuda_graph_impl: none``). Training only, and not with a sharding that
gathers the weights each micro-batch (ZeRO-3, FSDP: Megatron-Core does not graph those).

Not modelled: the graphs' memory (each graph's static inputs and outputs and its private memory pool,
kept for every micro-batch in flight: Megatron-Core documents a higher peak with graphs), the capture's
warm-up steps, ``--cuda-graph-scope`` (attention or MLP only; ``full_iteration``).
"""

from __future__ import annotations

import numpy as np


def host_s(host: np.ndarray, blocks: np.ndarray, n_fwd: int, n_re: int, launch_s: float) -> np.ndarray:
    """A stage's per-op host seconds with its transformer layers graphed: the ops of a layer (``blocks``
    >= 0, each op's layer) cost nothing, and each run of one layer's ops in the forward, the recompute
    and the backward (the first ``n_fwd`` ops, the next ``n_re``, the rest) costs ``launch_s`` on its
    first op."""
    out = np.where(blocks >= 0, 0.0, host)
    n = len(host)
    for lo, hi in ((0, n_fwd), (n_fwd, n_fwd + n_re), (n_fwd + n_re, n)):
        b = blocks[lo:hi]
        if not len(b):
            continue
        starts = np.flatnonzero((b >= 0) & np.concatenate(([True], b[1:] != b[:-1])))
        out[lo + starts] += launch_s
    return out
