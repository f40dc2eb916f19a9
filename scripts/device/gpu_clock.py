"""The SM clock for the device scripts (kernel_times.py, serving.py): gpucast's own NVML boundary
(:mod:`gpucast.profile.nvml`) from the checkout's ``src``, nothing installed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def open_nvml():
    """gpucast's NVML backend on GPU 0 (``sm_clock_mhz()``: None where NVML refuses), or None without NVML."""
    from gpucast.profile.nvml import GpuUnavailable, open_backend

    try:
        return open_backend(0)
    except GpuUnavailable:
        return None
