"""CPU activation offloading (``parallel.offload``): the saved activations of some layers held in host memory.

Megatron-Core's ``--cpu-offloading`` with ``--cpu-offloading-num-layers N`` (Transformer Engine's
``get_cpu_offload_context``): as the forward makes them, the activations *N* layers of a stage
save for their backward are copied to pinned host memory on a side stream, and copied back before
their backward. On the stage's rank, per micro-batch:

* **memory** (:func:`kept_blocks`): ``blocks - N`` layers' saved activations stay on the GPU for
  each micro-batch in flight, plus one offloaded layer's in transit (TE double-buffers the layer
  being copied), counted with the backward's transient (:mod:`.activations`);
* **time** (:func:`exposed_s`): the offloaded bytes cross the host link once each way, at
  ``host_link_gbs`` x ``host_link_efficiency`` (the GPU's PCIe link,
  :class:`gpucast.estimate.constants.EstimatorConfig`), the device-to-host copies beside the
  forward's compute and the host-to-device ones beside the backward's:
  ``max(0, D / B - F) + max(0, D / B - G)`` for ``D`` bytes, ``F`` and ``G`` seconds of forward and
  backward kernels.

Not modelled: host memory, the copies sharing a PCIe switch with the NICs or with other GPUs,
weight offloading, the layer-wise prefetch's ordering under interleaved pipelines.
"""

from __future__ import annotations


def kept_blocks(blocks: int, offload: int) -> float:
    """Layers whose saved activations stay on the GPU for every micro-batch in flight."""
    return float(max(0, blocks - max(0, offload)))


def offloaded_blocks(blocks: int, offload: int) -> int:
    return min(max(0, offload), blocks)


def exposed_s(nbytes: float, host_link_gbs: float, efficiency: float, fwd_s: float, bwd_s: float) -> float:
    """Exposed seconds of a micro-batch's offload copies of ``nbytes`` each way (module docstring)."""
    if nbytes <= 0:
        return 0.0
    copy = nbytes / (host_link_gbs * 1e9 * efficiency)
    return max(0.0, copy - fwd_s) + max(0.0, copy - bwd_s)
