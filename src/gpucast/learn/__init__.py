"""Learning from measurements (DESIGN.md's ``learn`` layer), one job per module:

* :mod:`~gpucast.learn.rows`: the measured-row format (CSV/Parquet/JSONL) and its readers;
  :mod:`~gpucast.learn.shared_sets`: adapters for the measured sets (``data/measured`` in the repository);
* :mod:`~gpucast.learn.fit`: the Environment's log-space fit with priors (the engine);
  :mod:`~gpucast.learn.calibrate`: ``gpucast calibrate`` (which constants, cross-validation,
  the priors' weight, intervals); :mod:`~gpucast.learn.artifacts`: environment and model files;
* :mod:`~gpucast.learn.intervals`: split-conformal intervals and their group coverage;
* :mod:`~gpucast.learn.features`, :mod:`~gpucast.learn.models`: the reference-style regressor and
  the hybrid residual (LightGBM); :mod:`~gpucast.learn.apply`: a hybrid applied to a prediction;
* :mod:`~gpucast.learn.evaluate`: every method under one group-held-out split, few-shot curves;
  :mod:`~gpucast.learn.metrics`: the error metrics.

Nothing runs on import and nothing is trained at import: fitting is explicit (``gpucast
calibrate``, ``gpucast learn fit``, ``scripts/fit_environment.py``), artifacts are versioned files
with their data's provenance, and without them predictions are the default physics.
"""
