"""The hardware boundary: a small protocol over NVML, and the real backend on nvidia-ml-py.

``NvmlBackend`` is every NVML reading the harness uses, and nothing more. ``PynvmlBackend``
implements it over ``pynvml`` (the ``nvidia-ml-py`` package) for one device; tests substitute a
fake for it and only for it (``tests/profile/fakes.py``), because the machines that run the tests
have no GPU.

What is read, and what it means:

* ``utilization_gpu``: NVML ``utilization.gpu``, the percent of the driver's last sample period
  during which at least one kernel was executing. The driver itself averages over that period
  (between 1/6 s and 1 s depending on the GPU), so it says nothing about SM occupancy, and reading
  it faster than the period returns repeated values.
* ``memory_used``: device-wide used memory, every process (and the driver's reservations) included.
* ``process_memory``: the sum of ``usedGpuMemory`` of the listed *compute* processes whose pid is
  one of ``pids``. NVML reports pids of the host's PID namespace: inside a container the worker's
  own pid usually does not match, and the sum is then 0 (not a measurement; the sampler reports it
  as null). Graphics and MPS-client processes are not counted.
* ``sm_clock_mhz``: the current SM clock. ``power_w``: board power as NVML reports it (on Ampere
  and newer GPUs other than GA100 the driver returns a one-second average, not an instantaneous
  value).

Not modelled: MIG instances (utilization is not reported per MIG instance; on a MIG device
``utilization_gpu`` raises), NVML field values, ECC, throttle reasons, PCIe and NVLink counters.
Device ``index`` is NVML's own numbering, which ignores ``CUDA_VISIBLE_DEVICES``: the caller maps
(:func:`nvml_index`).

Errors: anything that prevents opening the device (no library, no driver, no device, bad index)
raises :class:`GpuUnavailable` with one line. After opening, the optional readings (SM clock,
power, process list) degrade to ``None`` / ``0`` when NVML refuses them; the required ones
(utilization, memory used) raise ``pynvml.NVMLError`` and the sampler decides what to do.
``pynvml`` is imported lazily so that importing this module needs no NVIDIA software.
"""

from __future__ import annotations

import os
from typing import Iterable, Protocol, runtime_checkable

__all__ = ["GpuUnavailable", "NvmlBackend", "PynvmlBackend", "open_backend", "nvml_index", "ScriptedNvml",
           "FAKE_NVML_ENV"]

FAKE_NVML_ENV = "GPUCAST_PROFILE_FAKE_NVML"


class GpuUnavailable(RuntimeError):
    """No usable NVIDIA GPU. ``str()`` is always one line (newlines and runs of spaces collapsed)."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


@runtime_checkable
class NvmlBackend(Protocol):
    """The NVML readings the harness uses, for one device."""

    def device_name(self) -> str:
        """NVML device name, e.g. ``"NVIDIA H200"`` (no UUID, no serial)."""

    def memory_total(self) -> int:
        """Total device memory, bytes."""

    def driver_version(self) -> str:
        """NVIDIA driver version string."""

    def utilization_gpu(self) -> int:
        """NVML ``utilization.gpu``, percent (averaged by the driver over its sample period)."""

    def memory_used(self) -> int:
        """Device-wide memory used, bytes."""

    def process_memory(self, pids: Iterable[int]) -> int:
        """Sum of bytes used by the listed compute processes among ``pids``; 0 if none listed."""

    def sm_clock_mhz(self) -> int | None:
        """Current SM clock in MHz, ``None`` when NVML does not report it."""

    def power_w(self) -> float | None:
        """Board power in watts, ``None`` when NVML does not report it."""

    def close(self) -> None:
        """Release NVML. Idempotent."""


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _nvml_reason(pynvml, exc) -> str:
    """A short reason for an NVMLError raised by nvmlInit."""
    value = getattr(exc, "value", None)
    if value == getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", object()):
        return "libnvidia-ml.so.1 not found"
    if value == getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", object()):
        return "NVIDIA driver not loaded"
    if value == getattr(pynvml, "NVML_ERROR_NO_PERMISSION", object()):
        return "no permission to access the NVIDIA device"
    return _reason(exc)


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """:class:`NvmlBackend` over ``pynvml`` for NVML device ``index``.

    Opening initialises NVML, checks the device exists and caches its name, total memory and the
    driver version; any failure there raises :class:`GpuUnavailable` (and shuts NVML down again).
    """

    def __init__(self, index: int = 0):
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - the package is a dependency
            raise GpuUnavailable(f"no NVIDIA GPU: nvidia-ml-py is not installed ({_reason(exc)})") from None
        self._nvml = pynvml
        self._index = index
        self._open = False
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuUnavailable(
                f"no NVIDIA GPU: NVML could not be initialised ({_nvml_reason(pynvml, exc)})"
            ) from None
        self._open = True
        try:
            count = pynvml.nvmlDeviceGetCount()
            if count == 0:
                raise GpuUnavailable("no NVIDIA GPU: NVML reports 0 devices")
            if not 0 <= index < count:
                raise GpuUnavailable(f"no NVIDIA GPU at index {index}: NVML reports {count} device(s)")
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._name = _text(pynvml.nvmlDeviceGetName(self._handle))
            self._memory_total = int(pynvml.nvmlDeviceGetMemoryInfo(self._handle).total)
            self._driver = _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as exc:
            self.close()
            raise GpuUnavailable(f"no NVIDIA GPU: NVML could not open device {index} ({_reason(exc)})") from None
        except GpuUnavailable:
            self.close()
            raise

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"PynvmlBackend(index={self._index}, name={getattr(self, '_name', None)!r}, {state})"

    # static, cached at open
    def device_name(self) -> str:
        return self._name

    def memory_total(self) -> int:
        return self._memory_total

    def driver_version(self) -> str:
        return self._driver

    # required readings: NVMLError propagates
    def utilization_gpu(self) -> int:
        return int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def memory_used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    # optional readings: NVMLError degrades
    def process_memory(self, pids: Iterable[int]) -> int:
        wanted = {int(p) for p in pids}
        if not wanted:
            return 0
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except self._nvml.NVMLError:
            return 0
        total = 0
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            if getattr(proc, "pid", None) in wanted and used is not None:
                total += int(used)
        return total

    def sm_clock_mhz(self) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except self._nvml.NVMLError:
            return None

    def power_w(self) -> float | None:
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0  # milliwatts
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass

    def __enter__(self) -> "PynvmlBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_backend(index: int = 0) -> NvmlBackend:
    """The real backend for NVML device ``index``; raises :class:`GpuUnavailable` (one line)."""
    return PynvmlBackend(index)


def nvml_index(torch_index: int) -> int:
    """NVML numbers devices ignoring ``CUDA_VISIBLE_DEVICES``; map torch's index through it.
    (UUID or MIG entries are not mapped: the torch index is used.)"""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [e.strip() for e in visible.split(",")]
        if torch_index < len(entries) and entries[torch_index].isdigit():
            return int(entries[torch_index])
    return torch_index


class ScriptedNvml:
    """A deterministic :class:`NvmlBackend` for no-GPU tests: a device named "gpucast fake GPU" (it maps
    to no catalog GPU) that a worker samples in place of the real one when ``GPUCAST_PROFILE_FAKE_NVML=1``
    (``FAKE_NVML_ENV``), so that a CPU run exercises the sampler.

    Utilization cycles 30, 60, 90 %; memory used grows 1 MiB a reading from 1 GiB; the
    process holds 512 MiB; 1500 MHz; 100 W. Not a measurement of anything."""

    UTIL = (30, 60, 90)

    def __init__(self) -> None:
        self.reads = 0

    def device_name(self) -> str:
        return "gpucast fake GPU"

    def memory_total(self) -> int:
        return 16 << 30

    def driver_version(self) -> str:
        return "0.0-fake"

    def utilization_gpu(self) -> int:
        self.reads += 1
        return self.UTIL[self.reads % len(self.UTIL)]

    def memory_used(self) -> int:
        return (1 << 30) + (min(self.reads, 1024) << 20)

    def process_memory(self, pids) -> int:
        return 512 << 20 if tuple(pids) else 0

    def sm_clock_mhz(self) -> int:
        return 1500

    def power_w(self) -> float:
        return 100.0

    def close(self) -> None:
        pass
