"""Gavel's published data, as the simulator names it: every public name of :mod:`gpucast.gavel`.

The mapping, the trace files and the measured throughputs moved to :mod:`gpucast.gavel`, below
both ``cluster`` and ``learn`` (``learn.shared_records`` reads the mapping too, and ``learn`` sits
below ``cluster``; docs/layering.md). This module keeps ``gpucast.cluster.gavel`` working for the
simulator's modules, the benchmarks and older code; it defines nothing of its own.
"""

from gpucast.gavel import *  # noqa: F401,F403 - the re-export is this module's job
from gpucast.gavel import (CATALOG_TO_GAVEL, GAVEL_GPUS, GAVEL_STACK, GAVEL_SURROUNDINGS, MAPPING, Mapping, data_dir,
                           job_fields, pair_throughputs, parse_key, solo_throughputs, split_job_type,
                           throughputs_path, trace_ids)

__all__ = ["CATALOG_TO_GAVEL", "GAVEL_GPUS", "GAVEL_STACK", "GAVEL_SURROUNDINGS", "MAPPING", "Mapping", "data_dir",
           "job_fields", "pair_throughputs", "parse_key", "solo_throughputs", "split_job_type", "throughputs_path",
           "trace_ids"]
