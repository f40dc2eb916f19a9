"""The NVML boundary.

``test_open_backend_without_gpu_is_one_line`` runs the real ``pynvml`` against this machine (no
GPU, no driver): nothing is faked. The other tests monkeypatch functions of ``pynvml`` itself,
i.e. the NVIDIA driver library behind it, which is the hardware boundary: they raise pynvml's own
``NVMLError`` to simulate a missing library, a missing device or a refused reading.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

pynvml = pytest.importorskip("pynvml")

from fakes import FakeNvml  # noqa: E402
from gpucast.profile.nvml import GpuUnavailable, NvmlBackend, PynvmlBackend, open_backend  # noqa: E402


def _gpu_present() -> bool:
    try:
        open_backend().close()
    except GpuUnavailable:
        return False
    return True


def test_open_backend_without_gpu_is_one_line():
    try:
        backend = open_backend()
    except GpuUnavailable as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.strip() == msg and msg
        assert msg.startswith("no NVIDIA GPU")
        assert isinstance(exc, RuntimeError)
    else:  # pragma: no cover - only on a GPU machine
        backend.close()
        pytest.skip("a GPU is present here; this test checks the no-GPU path")


@pytest.mark.skipif(not _gpu_present(), reason="needs an NVIDIA GPU (real NVML)")
def test_real_backend_reads_sane_values():  # pragma: no cover - only on a GPU machine
    with PynvmlBackend(0) as b:
        assert b.device_name() and b.driver_version()
        assert b.memory_total() > 1 << 30
        assert 0 <= b.utilization_gpu() <= 100
        assert 0 < b.memory_used() <= b.memory_total()
        clock, power = b.sm_clock_mhz(), b.power_w()
        assert clock is None or clock > 0
        assert power is None or power > 0
        assert b.process_memory([]) == 0


def test_importing_the_module_does_not_import_pynvml():
    code = "import sys, gpucast.profile.nvml, gpucast.profile.sampler, gpucast.profile.dataset; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _raise(code):
    def f(*a, **k):
        raise pynvml.NVMLError(code)

    return f


def test_missing_library_maps_to_one_line(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(GpuUnavailable) as info:
        PynvmlBackend(0)
    assert str(info.value) == "no NVIDIA GPU: NVML could not be initialised (libnvidia-ml.so.1 not found)"
    assert info.value.__cause__ is None  # no chained NVML traceback


def test_driver_not_loaded_maps_to_one_line(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(GpuUnavailable, match=r"^no NVIDIA GPU: .*driver not loaded\)$"):
        open_backend()


class _Driver:
    """Monkeypatches pynvml's device functions: a scripted stand-in for the NVIDIA driver (the
    hardware boundary) on a machine with no GPU. Values are synthetic."""

    def __init__(self, monkeypatch, count=1):
        self.shutdowns = 0
        self.power_mw = 412_345
        self.procs = [SimpleNamespace(pid=10, usedGpuMemory=3 << 30),
                      SimpleNamespace(pid=11, usedGpuMemory=1 << 30),
                      SimpleNamespace(pid=12, usedGpuMemory=None)]
        p = monkeypatch.setattr
        p(pynvml, "nvmlInit", lambda: None)
        p(pynvml, "nvmlShutdown", self._shutdown)
        p(pynvml, "nvmlDeviceGetCount", lambda: count)
        p(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: ("handle", i))
        p(pynvml, "nvmlDeviceGetName", lambda h: b"NVIDIA H200")
        p(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(total=150 << 30, used=20 << 30, free=130 << 30))
        p(pynvml, "nvmlSystemGetDriverVersion", lambda: "570.86.15")
        p(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=87, memory=40))
        p(pynvml, "nvmlDeviceGetClockInfo", lambda h, which: 1980 if which == pynvml.NVML_CLOCK_SM else 0)
        p(pynvml, "nvmlDeviceGetPowerUsage", lambda h: self.power_mw)
        p(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: list(self.procs))

    def _shutdown(self):
        self.shutdowns += 1


def test_zero_devices_is_one_line_and_shuts_down(monkeypatch):
    drv = _Driver(monkeypatch, count=0)
    with pytest.raises(GpuUnavailable) as info:
        open_backend()
    assert str(info.value) == "no NVIDIA GPU: NVML reports 0 devices"
    assert drv.shutdowns == 1


def test_bad_index(monkeypatch):
    drv = _Driver(monkeypatch, count=2)
    with pytest.raises(GpuUnavailable, match="index 2"):
        PynvmlBackend(2)
    assert drv.shutdowns == 1


def test_handle_error_at_open_is_gpu_unavailable(monkeypatch):
    drv = _Driver(monkeypatch)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", _raise(pynvml.NVML_ERROR_GPU_IS_LOST))
    with pytest.raises(GpuUnavailable) as info:
        PynvmlBackend(0)
    assert "\n" not in str(info.value) and "device 0" in str(info.value)
    assert drv.shutdowns == 1


def test_readings_and_units(monkeypatch):
    drv = _Driver(monkeypatch)
    b = open_backend(0)
    assert isinstance(b, NvmlBackend)
    assert b.device_name() == "NVIDIA H200"  # bytes from old pynvml decoded
    assert b.memory_total() == 150 << 30
    assert b.driver_version() == "570.86.15"
    assert b.utilization_gpu() == 87
    assert b.memory_used() == 20 << 30
    assert b.sm_clock_mhz() == 1980
    assert b.power_w() == pytest.approx(412.345)  # NVML reports milliwatts
    # only the watched pids, and a process whose memory NVML cannot report counts as nothing
    assert b.process_memory([10, 12, 99]) == 3 << 30
    assert b.process_memory([10, 11]) == 4 << 30
    assert b.process_memory([]) == 0
    b.close()
    b.close()
    assert drv.shutdowns == 1


def test_optional_reading_errors_degrade(monkeypatch):
    _Driver(monkeypatch)
    b = PynvmlBackend(0)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", _raise(pynvml.NVML_ERROR_NOT_SUPPORTED))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetClockInfo", _raise(pynvml.NVML_ERROR_NOT_SUPPORTED))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", _raise(pynvml.NVML_ERROR_NO_PERMISSION))
    assert b.power_w() is None
    assert b.sm_clock_mhz() is None
    assert b.process_memory([10]) == 0
    # a required reading still raises: the sampler decides
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", _raise(pynvml.NVML_ERROR_NOT_SUPPORTED))
    with pytest.raises(pynvml.NVMLError):
        b.utilization_gpu()
    b.close()


def test_gpu_unavailable_is_always_one_line():
    assert str(GpuUnavailable("no NVIDIA GPU:\n  driver\tgone  ")) == "no NVIDIA GPU: driver gone"


def test_fake_satisfies_the_protocol():
    assert isinstance(FakeNvml(), NvmlBackend)
