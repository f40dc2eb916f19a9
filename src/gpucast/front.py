"""The front door's functions: each imports the module that does the work when it is called, so
``import gpucast`` stays cheap (:mod:`gpucast` hands them on)."""

from __future__ import annotations


def predict(job, gpu="a100-80gb", config=None, env=None, window_s=None, learned=None):
    """Predict ``job`` on ``gpu`` (:func:`gpucast.api.predict`)."""
    from gpucast.api import predict as _predict

    return _predict(job, gpu, config, env, window_s, learned)


def explain(job, gpu="a100-80gb", config=None, env=None, window_s=None, learned=None):
    """A prediction with its breakdown (:func:`gpucast.api.explain`)."""
    from gpucast.api import explain as _explain

    return _explain(job, gpu, config, env, window_s, learned)


def advise(job, gpus=None, **options):
    """GPU type, count, batch, precision and sharing, with time and money per epoch (:func:`gpucast.advisor.advise`)."""
    from gpucast.advisor import advise as _advise

    return _advise(job, gpus, **options)


def pack(jobs, gpu="a100-80gb", config=None, env=None):
    """Several one-GPU jobs on one GPU, every sharing mode compared (:func:`gpucast.advisor.pack.pack`)."""
    from gpucast.advisor.pack import pack as _pack

    return _pack(jobs, gpu, config, env)


def load_environment(path):
    """A calibrated Environment from a ``gpucast calibrate`` file (pass it as ``env=``); see
    :func:`gpucast.learn.artifacts.load_environment`. Messages about the file's version go to ``warnings``."""
    import warnings

    from gpucast.learn.artifacts import load_environment as _load

    env, messages = _load(path)
    for m in messages:
        warnings.warn(m, stacklevel=2)
    return env
