"""gpucast: predict a deep-learning job's GPU utilization, peak memory and step time from its graph.

>>> import gpucast
>>> p = gpucast.predict(gpucast.Job("resnet50", batch_size=64), gpu="a100-80gb")
>>> p.gpu_util_pct, p.memory_peak_bytes, p.step_time_s  # doctest: +SKIP

The front door: its functions (:mod:`gpucast.front`) import their modules when called, so ``import gpucast``
stays cheap.
"""

from gpucast.version import __version__  # noqa: E402
from gpucast.job import Job, JobError  # noqa: E402
from gpucast.prediction import Prediction  # noqa: E402
from gpucast.front import advise, explain, load_environment, pack, predict  # noqa: E402

__all__ = ["Job", "JobError", "Prediction", "predict", "explain", "advise", "pack", "load_environment", "__version__"]
