"""gpucast: predict a deep-learning job's GPU utilization, peak memory and step time from its graph.

>>> import gpucast
>>> p = gpucast.predict(gpucast.Job("resnet50", batch_size=64), gpu="a100-80gb")
>>> p.gpu_util_pct, p.memory_peak_bytes, p.step_time_s  # doctest: +SKIP
>>> env = gpucast.load_environment("env.yaml")  # from `gpucast calibrate`  # doctest: +SKIP
>>> gpucast.predict(gpucast.Job("resnet50"), gpu="a100-80gb", env=env).model_version  # doctest: +SKIP
"""

from gpucast.version import __version__  # noqa: E402

from gpucast.job import Job, JobError  # noqa: E402
from gpucast.prediction import Prediction  # noqa: E402


def predict(job, gpu="a100-80gb", config=None, env=None, window_s=None, learned=None):
    """Predict ``job`` on ``gpu`` (see :func:`gpucast.api.predict`)."""
    from gpucast.api import predict as _predict

    return _predict(job, gpu, config, env, window_s, learned)


def explain(job, gpu="a100-80gb", config=None, env=None, window_s=None, learned=None):
    """A prediction with its breakdown (see :func:`gpucast.api.explain`)."""
    from gpucast.api import explain as _explain

    return _explain(job, gpu, config, env, window_s, learned)


def advise(job, gpus=None, **options):
    """Which GPU type, how many, what batch and precision, and whether to share, with time and
    money per epoch: an :class:`~gpucast.advisor.Advice` (see :func:`gpucast.advisor.advise`)."""
    from gpucast.advisor import advise as _advise

    return _advise(job, gpus, **options)


def pack(jobs, gpu="a100-80gb", config=None, env=None):
    """Several one-GPU jobs on one GPU: time-slicing, HAMi core limits, MPS, MPS replicas or a MIG
    layout, each job's slowdown and which keeps the most of their speed, and why: a
    :class:`~gpucast.advisor.pack.Packing` (see :func:`gpucast.advisor.pack.pack`)."""
    from gpucast.advisor.pack import pack as _pack

    return _pack(jobs, gpu, config, env)


def load_environment(path):
    """A calibrated Environment from a ``gpucast calibrate`` file (pass it as ``env=``); see
    :func:`gpucast.learn.artifacts.load_environment`. Messages about the file's version go to
    ``warnings``."""
    import warnings

    from gpucast.learn.artifacts import load_environment as _load

    env, messages = _load(path)
    for m in messages:
        warnings.warn(m, stacklevel=2)
    return env


__all__ = ["Job", "JobError", "Prediction", "predict", "explain", "advise", "pack", "load_environment",
           "__version__"]
