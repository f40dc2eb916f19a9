"""A learned hybrid model applied to a prediction (``gpucast predict --learned FILE``).

The hybrid (:class:`~gpucast.learn.models.HybridResidual`, trained by ``gpucast learn fit``)
corrects one quantity of the physics prediction: the prediction's value becomes
``physics x exp(residual)`` and its interval the model's split-conformal one (from its
group-held-out residuals, when it had enough); the other quantities stay the physics'.
``model_version`` gains ``+hybrid-<quantity>@<digest>, N rows`` (and says when N is fewer than a
few hundred), and a note gives the physics value it replaced.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpucast.estimate.environment import Environment
from gpucast.learn.features import physics_features, reference_features
from gpucast.learn.intervals import interval


def apply(pred, learned, prepared, env: Environment | None = None):
    """``pred`` corrected by ``learned`` (a model and its meta), from the Prepared estimate that made it."""
    model, meta = learned
    env = env or Environment.default()
    job, gpu = prepared.job, prepared.gpu
    X = np.hstack([physics_features(prepared, env), reference_features(prepared.trace, job, gpu)])[None, :]
    q = model.quantity
    physics = {"util_pct": pred.gpu_util_pct, "memory_mib": pred.memory_peak_bytes / 2**20,
               "step_time_s": pred.step_time_s}[q]
    value = float(model.predict(X, np.array([physics]))[0])
    h = meta.get("halfwidth")
    notes = pred.notes + (f"{q} corrected by the learned hybrid {meta['version']}: physics said {physics:.4g}",)
    basis = pred.interval_basis
    changes: dict = {"model_version": f"{pred.model_version}+{meta['version']}", "notes": notes}
    if q == "util_pct":
        changes["gpu_util_pct"] = round(value, 2)
        if h:
            changes["gpu_util_interval"] = tuple(round(v, 2) for v in interval(q, value, h))
    elif q == "memory_mib":
        changes["memory_peak_bytes"] = int(value * 2**20)
        changes["fits_in_memory"] = changes["memory_peak_bytes"] <= gpu.memory_bytes
        if h:
            lo, hi = interval(q, value * 2**20, h)
            changes["memory_interval"] = (int(lo), int(hi))
    else:
        changes["step_time_s"] = value
        changes["samples_per_s"] = job.batch_size * job.gpus / value if value > 0 else 0.0
        if h:
            changes["step_time_interval"] = interval(q, value, h)
    if h:
        basis += f"; {q}: split-conformal 80% of the hybrid's {meta.get('halfwidth_rows', '?')} held-out rows"
    changes["interval_basis"] = basis
    return replace(pred, **changes)
