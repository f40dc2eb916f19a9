"""Fitting the Environment (gpucast.learn.fit) and the shared-data adapters (gpucast.learn.shared_sets).

* A synthetic fixture (named so): rows that gpucast itself predicted with known constants; the
  fit, started from the priors, must recover those constants.
* The real MLP set (data/measured/gpumemnet-mlp, a sample of 120 rows, 30 per architecture):
  fitted on three architectures, the fourth's utilization and memory must be predicted better
  than by the model before surroundings and better than by the mean of the fitting rows; the
  comparison is between errors computed here, not against a number copied from a run.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucast import Job
from gpucast.estimate.environment import Environment
from gpucast.learn import metrics
from gpucast.learn.fit import Fitter, group_cv, legacy_env, legacy_job
from gpucast.learn.shared_sets import GAVEL_SURROUNDINGS, MLP_DATA, MLP_LOOP, MLP_STACK, MeasuredRow, gavel_rows, mlp_rows

from tests.measured_data import GAVEL_JSON, MLP_CSV


def _synthetic_rows(env: Environment) -> list[MeasuredRow]:
    """MLP jobs whose 'measurements' are gpucast's own predictions under ``env`` (synthetic)."""
    import gpucast

    rows = []
    for i, (width, depth, batch) in enumerate([(64, 2, 16), (64, 2, 512), (256, 3, 64), (256, 3, 1024),
                                               (1024, 2, 32), (1024, 4, 256), (2048, 2, 128), (512, 6, 700)]):
        def model_fn(width=width, depth=depth):
            import torch.nn as nn

            layers = []
            for _ in range(depth):
                layers += [nn.Linear(width, width), nn.ReLU()]
            return nn.Sequential(*layers, nn.Linear(width, 10))

        def input_fn(b, width=width):
            import torch

            return (torch.randn(b, width),)

        job = Job.from_module(model_fn, input_fn, batch_size=batch, optimizer="adam", name=f"synthetic-mlp-{i}",
                              data=MLP_DATA, loop=MLP_LOOP, stack=MLP_STACK)
        p = gpucast.predict(job, "a100-40gb", env=env)
        rows.append(MeasuredRow(job=job, gpu="a100-40gb", group=f"g{i % 2}", label=f"synthetic {i}",
                                util_pct=p.gpu_util_pct, memory_mib=p.memory_peak_bytes / 2**20))
    return rows


def test_fit_recovers_known_constants_from_synthetic_rows_made_by_gpucast():
    # NVML's tick 0 here: with it the counter reads the short gaps an idle kernel lengthens as busy
    # anyway, and idle_kernel_s would hardly show in the utilization rows
    base = Environment.priors().replace(nvml_tick_s=0.0)
    truth = base.replace(memory_sample_s=14e-6, progress_bar_s=300e-6, idle_kernel_s=9e-6,
                         cuda_context_eager_extra_bytes=1200 * 2**20)
    params = ("memory_sample_s", "progress_bar_s", "idle_kernel_s", "cuda_context_eager_extra_bytes")
    f = Fitter(_synthetic_rows(truth))
    start = f.predict(base)
    assert metrics.util_metrics(start.util_pct, f.util)["mae"] > 2  # the priors are really off
    # weak priors: eight rows must say where the constants are, not the published spreads
    env, info = f.fit(np.arange(len(f.rows)), params, priors=base, max_nfev=200, prior_weight=0.01)
    for name in params:
        assert getattr(env, name) == pytest.approx(getattr(truth, name), rel=0.15), (name, info)
    fitted = f.predict(env)
    assert metrics.util_metrics(fitted.util_pct, f.util)["mae"] < 0.5


def test_held_out_architectures_beat_the_old_model_and_the_mean():
    rows = mlp_rows(MLP_CSV)
    by_group: dict[str, list] = {}
    for r in rows:
        by_group.setdefault(r.group, []).append(r)
    sample = [r for g in sorted(by_group) for r in by_group[g][:30]]
    f = Fitter(sample)
    held, floor = group_cv(f, ("memory_sample_s", "progress_bar_s", "idle_kernel_s", "item_s",
                               "cuda_context_eager_extra_bytes"))
    old = Fitter(sample, traces=f.traces, jobs=[legacy_job(r.job) for r in sample]).predict(legacy_env())
    ours = metrics.util_metrics(held.util_pct, f.util)
    assert ours["mae"] < metrics.util_metrics(old.util_pct, f.util)["mae"]
    assert ours["mae"] < metrics.util_metrics(floor["util_pct"], f.util)["mae"]
    assert ours["rmsle"] < metrics.util_metrics(floor["util_pct"], f.util)["rmsle"]
    assert metrics.mape(held.memory_mib, f.memory) < metrics.mape(old.memory_mib, f.memory)
    assert metrics.mape(held.memory_mib, f.memory) < metrics.mape(floor["memory_mib"], f.memory)


def test_mlp_rows_are_the_published_models():
    rows = mlp_rows(MLP_CSV, limit=5)
    import csv

    from gpucast.api import trace

    with open(MLP_CSV) as fh:
        first = next(csv.DictReader(fh))
    tr = trace(rows[0].job)
    assert tr.parameters == int(first["parameters"])  # the README: sum of in*out + out of the Linears
    assert rows[0].util_pct == float(first["util_pct"]) and rows[0].memory_mib == float(first["memory_max_mib"])
    assert rows[0].job.batch_size == int(first["batch_size"])


def test_gavel_rows_cover_every_mapped_job_type_with_its_loader():
    rows = gavel_rows(GAVEL_JSON)
    assert {r.group for r in rows} == set(GAVEL_SURROUNDINGS)
    assert len(rows) == 78
    assert all(r.step_time_s > 0 and r.job.data is not None for r in rows)


def test_a_per_set_nuisance_takes_each_sets_host_and_leaves_the_shared_constants_at_the_truth():
    # Two 'clusters' of the same synthetic MLP jobs: one on hosts twice as slow as the reference.
    # The per-set host factor must find each cluster's host; the packaged environment keeps the
    # host at its prior (a cluster never measured), and a shared constant is still recovered.
    base = Environment.priors().replace(nvml_tick_s=0.0)
    truth = base.replace(progress_bar_s=300e-6)
    a = Fitter(_synthetic_rows(truth))
    b = Fitter(_synthetic_rows(truth.replace(host_time_factor=2.0)))
    a.sets[:], b.sets[:] = "fast", "slow"
    both = Fitter.concat([a, b])
    env, info = both.fit(np.arange(len(both.rows)), ("progress_bar_s",), priors=base, max_nfev=200,
                         prior_weight=0.01, per_set=("host_time_factor",))
    hosts = {s: v["host_time_factor"] for s, v in info["per_set"].items()}
    assert hosts["slow"] / hosts["fast"] == pytest.approx(2.0, rel=0.15)
    assert env.host_time_factor == base.host_time_factor
    assert env.progress_bar_s * hosts["fast"] == pytest.approx(300e-6, rel=0.2)
    # Without the nuisance one shared constant has to explain both clusters: a worse fit.
    _, shared = both.fit(np.arange(len(both.rows)), ("progress_bar_s",), priors=base, max_nfev=200,
                         prior_weight=0.01)
    assert shared["cost"] > info["cost"]
