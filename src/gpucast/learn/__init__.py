"""Learning from measurements (DESIGN.md's ``learn`` layer).

So far: adapters that express the measured rows of ``../shared/data`` as gpucast jobs with the
loaders and loops their scripts really had (:mod:`~gpucast.learn.shared_sets`), the fit of the
Environment's constants with published priors and group-held-out evaluation
(:mod:`~gpucast.learn.fit`), and the error metrics and floors (:mod:`~gpucast.learn.metrics`).
Nothing runs on import; fitting is explicit (``scripts/fit_environment.py``).
"""
