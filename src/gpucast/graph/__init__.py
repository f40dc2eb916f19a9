"""Graph capture and per-op cost rules: what a step runs, independent of any GPU."""

from gpucast.graph.trace import MEMORY_CLASSES, PHASES, MemoryReport, OpRecord, Trace

__all__ = ["MEMORY_CLASSES", "PHASES", "MemoryReport", "OpRecord", "Trace", "capture"]


def capture(job):
    """Trace one step of ``job`` on the meta device (see ``gpucast.graph.tracer``)."""
    from gpucast.graph.tracer import capture as _capture

    return _capture(job)
