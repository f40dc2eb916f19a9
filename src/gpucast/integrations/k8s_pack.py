"""The Kubernetes requests of an arrangement of ``gpucast pack`` (:mod:`gpucast.advisor.pack`): each
job's container limits and what the node's GPU must be configured as.

* ``timeslice`` — the NVIDIA device plugin's time-slicing (``sharing.timeSlicing`` with N
  replicas of ``nvidia.com/gpu``): each job ``nvidia.com/gpu: 1``;
* ``timeslice+hami`` — HAMi's vGPUs: each job ``nvidia.com/gpu: 1``, ``nvidia.com/gpucores`` =
  100 / N and ``nvidia.com/gpumem`` = its predicted peak in MiB (rounded up);
* ``mps`` — MPS without limits: each job ``nvidia.com/gpu: 1`` on a GPU whose MPS daemon the
  operator runs with no client limits (the device plugin's MPS sharing always sets them: that is
  ``mps:N``);
* ``mps:N`` — the device plugin's MPS sharing (``sharing.mps`` with N replicas): each job
  ``nvidia.com/gpu: 1``, limited to 1/N of the SMs by the plugin;
* ``mig`` — the layout applied to the GPU (the GPU operator's MIG manager, "mixed" strategy): each
  job its slice's resource, ``nvidia.com/mig-3g.40gb: 1``
  (:func:`gpucast.integrations.kubernetes.mig_resource`).
"""

from __future__ import annotations

import math
from typing import Sequence

from gpucast.integrations.kubernetes import GPUCORES, GPUMEM, MIB, mig_resource

GPU = "nvidia.com/gpu"


def requests(mode: str, gpu: str, memory_bytes: Sequence[int],
             slices: Sequence[str] | None = None) -> tuple[list[dict[str, str]], str]:
    """Each job's container limits (quantities as strings, as Kubernetes writes them) and the GPU's
    configuration, for the jobs (their predicted peaks ``memory_bytes``) sharing one ``gpu`` in
    ``mode`` (module docstring; ``slices``: each job's MIG profile under ``mig``)."""
    n = len(memory_bytes)
    if mode == "timeslice":
        return [{GPU: "1"} for _ in memory_bytes], f"device plugin sharing.timeSlicing: {GPU} x {n} replicas"
    if mode == "timeslice+hami":
        return ([{GPU: "1", GPUCORES: str(100 // n), GPUMEM: str(math.ceil(m / MIB))} for m in memory_bytes],
                "HAMi device plugin and scheduler (vGPUs)")
    if mode == "mps":
        return [{GPU: "1"} for _ in memory_bytes], "an MPS daemon without client limits (run by the operator)"
    if mode.startswith("mps:"):
        return [{GPU: "1"} for _ in memory_bytes], f"device plugin sharing.mps: {GPU} x {mode[4:]} replicas"
    if mode == "mig":
        if slices is None or len(slices) != n:
            raise ValueError("a MIG arrangement needs each job's slice")
        return ([{mig_resource(f"{gpu}:{s}"): "1"} for s in slices],
                f"MIG layout {','.join(sorted(slices))} (GPU operator mig.config, mixed strategy)")
    raise ValueError(f"unknown arrangement {mode!r}")
