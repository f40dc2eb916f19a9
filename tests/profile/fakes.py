"""Test doubles for the hardware boundary of ``gpucast.profile``.

``FakeNvml`` is the only fake in the profile tests: it stands in for the GPU behind NVML, because
the machines that run these tests have no GPU and no NVIDIA driver. Everything above it (sampler,
runner, dataset) is the real code.
"""

from __future__ import annotations

import itertools
import threading


class FakeNvml:
    """Stands in for the hardware (an NVML device) on a machine with no GPU.

    Implements ``gpucast.profile.nvml.NvmlBackend`` with scripted readings, all synthetic:

    * ``util``, ``mem_used``: sequences; each call returns the next value and repeats the last one
      once the script is used up (pass ``cycle=True`` to loop instead).
    * ``processes``: ``{pid: bytes}`` of the compute processes NVML would list.
    * ``sm_clock``, ``power``: a number, ``None``, or an exception (class or instance) to raise on
      every read, to simulate a reading NVML refuses.
    * ``delay_s``: sleep inside ``utilization_gpu``, to simulate a slow driver call.

    Counts reads in ``calls`` (by method name); ``closed`` becomes True on ``close()``.
    """

    def __init__(
        self,
        util=(50,),
        mem_used=(1 << 30,),
        processes=None,
        sm_clock=1980,
        power=450.0,
        name="NVIDIA H200",
        memory_total=143_771 * 2**20,
        driver="570.00",
        cycle=False,
        delay_s=0.0,
    ):
        self._util = self._script(util, cycle)
        self._mem = self._script(mem_used, cycle)
        self.processes = dict(processes or {})
        self.sm_clock = sm_clock
        self.power = power
        self.name = name
        self.total = memory_total
        self.driver = driver
        self.delay_s = delay_s
        self.calls: dict[str, int] = {}
        self.closed = False
        self._lock = threading.Lock()

    @staticmethod
    def _script(values, cycle):
        values = list(values)
        if not values:
            raise ValueError("a script needs at least one value")
        if cycle:
            return itertools.cycle(values)
        return itertools.chain(values, itertools.repeat(values[-1]))

    def _count(self, name):
        with self._lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    @staticmethod
    def _value(v):
        if isinstance(v, BaseException) or (isinstance(v, type) and issubclass(v, BaseException)):
            raise v
        return v

    def device_name(self):
        return self.name

    def memory_total(self):
        return self.total

    def driver_version(self):
        return self.driver

    def utilization_gpu(self):
        self._count("utilization_gpu")
        if self.delay_s:
            import time

            time.sleep(self.delay_s)
        with self._lock:
            return self._value(next(self._util))

    def memory_used(self):
        self._count("memory_used")
        with self._lock:
            return self._value(next(self._mem))

    def process_memory(self, pids):
        self._count("process_memory")
        wanted = set(pids)
        return sum(b for pid, b in self.processes.items() if pid in wanted)

    def sm_clock_mhz(self):
        self._count("sm_clock_mhz")
        return self._value(self.sm_clock)

    def power_w(self):
        self._count("power_w")
        return self._value(self.power)

    def close(self):
        self.closed = True
