"""A :class:`~gpucast.prediction.Prediction` with chosen numbers, for the translations' tests.

The scheduler translations (Ray, HAMi, Slurm, gpucast.integrations.resources) read only the GPU,
utilization, the memory interval, ``gpus``, ``fits_in_memory`` and the parallel plan's ``nodes``
and ``gpus_per_node``; the other fields hold placeholders. The memory interval is
``[0.8, 1.0] x mem_hi`` with the point value at 0.9. ``nodes`` (with ``gpus`` > 1) makes it the
prediction of a job with a parallel plan: ``plan`` holds the GPUs, ``gpus_per_node`` and ``nodes``
as :func:`gpucast.predict` reports them.
"""

from __future__ import annotations

import math

from gpucast.prediction import Prediction


def made_prediction(util: float = 30.0, mem_hi: int = 2**30, *, gpus: int = 1, fits: bool = True,
                    gpu: str = "a100-80gb", nodes: int | None = None, gpus_per_node: int = 8) -> Prediction:
    job = {"model": "resnet50", "batch_size": 32, "gpus": gpus}
    plan = {}
    if nodes is not None:
        assert nodes == max(1, math.ceil(gpus / gpus_per_node)), "a plan's nodes follow its GPUs"
        job["parallel"] = {"sharding": "fsdp-full", "gpus_per_node": gpus_per_node}
        plan = {"gpus": gpus, "gpus_per_node": gpus_per_node, "nodes": nodes, "tensor": 1, "pipeline": 1,
                "data": gpus, "sharding": "fsdp-full"}
    return Prediction(
        job=job, job_key="k", gpu=gpu, gpu_util_pct=util,
        gpu_util_interval=(util - 5, util + 5), memory_peak_bytes=int(mem_hi * 0.9),
        memory_interval=(int(mem_hi * 0.8), int(mem_hi)), step_time_s=0.1, step_time_interval=(0.08, 0.12),
        gpu_busy_s=0.03, host_time_s=0.05, flops=1, bytes=1, kernels=1, ops=1, parameters=1,
        memory_allocated_peak_bytes=1, fits_in_memory=fits, bottleneck="compute-bound", bottleneck_reason="",
        op_coverage=1.0, time_coverage=1.0, uncosted_ops={}, model_version="analytic-test", samples_per_s=1.0,
        plan=plan)
