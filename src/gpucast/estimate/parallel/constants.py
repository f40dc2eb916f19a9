"""Constants of the parallel-plan model: overlap of collectives with compute, framework buffers.

Each is a name, a value, a unit and its source, as :class:`gpucast.estimate.constants.EstimatorConfig`.
``gather_overlap`` and ``net_efficiency`` (:class:`gpucast.estimate.comm.CommConstants`) are the
two fitted on ``data/measured/llm-foundry-a100-40gb`` (in the repository) (``benchmarks/llm_foundry.py``), each with a
prior; the rest are published defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.constants import NamedConstants, _c


@dataclass(frozen=True)
class ParallelConstants(NamedConstants):
    _KIND = "parallel"

    gather_overlap: float = _c(
        0.80, "fraction",
        "Share of the compute of a micro-batch behind which FSDP / ZeRO-3 weight all-gathers and "
        "gradient reduce-scatters run (prefetch of the next unit on a second stream). Fitted on "
        "llm-foundry A100-40GB (78 rows, benchmarks/llm_foundry.py: FSDP FULL_SHARD, 8-128 GPUs, "
        "1,600 Gbit/s RoCE; jointly with the Environment's kernel_time_factor, Huber loss on log "
        "tokens/s, leave-one-size-out MdAPE 4.9 %): the rows leave it at its prior, since at that "
        "network FSDP's traffic hides behind compute at any value above ~0.3 "
        "(benchmarks/results/llm_foundry.md). Prior 0.8 +- 0.15: FSDP's forward/backward prefetch "
        "overlaps the next unit's collectives with the current unit's compute (PyTorch FSDP docs).")
    gathered_units: int = _c(
        2, "blocks",
        "FSDP holds the unit being computed and the prefetched next one gathered "
        "(forward_prefetch / BACKWARD_PRE, PyTorch FSDP docs; limit_all_gathers keeps it at two).")
    deepspeed_bucket_elements: int = _c(
        500_000_000, "elements",
        "DeepSpeed ZeRO reduce_bucket_size and allgather_bucket_size defaults (5e8; DeepSpeed config docs).")
    zero3_prefetch_elements: int = _c(
        50_000_000, "elements", "DeepSpeed stage3_prefetch_bucket_size default (5e7; DeepSpeed config docs).")
    nccl_buffer_bytes: int = _c(
        64 * 2**20, "bytes",
        "Device memory NCCL holds per communicator: NCCL_BUFFSIZE 4 MiB per channel and protocol "
        "buffers over its channels (NCCL environment-variable docs); an order of magnitude.")


DEFAULT_PARALLEL = ParallelConstants()
