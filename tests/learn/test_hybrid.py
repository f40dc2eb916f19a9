"""The hybrid residual model end to end: trained on real rows (a sample of the MLP set), saved,
loaded and applied by ``predict(learned=...)`` and ``gpucast predict --learned``; ``gpucast learn
fit`` refuses to write a model that loses to the physics on held-out groups."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import gpucast
from gpucast.learn import artifacts
from gpucast.learn.evaluate import fit_hybrid


def test_a_trained_hybrid_round_trips_and_corrects_predictions(mlp_sample, tmp_path):
    model, meta = fit_hybrid(mlp_sample, "util_pct")
    assert meta["held_out"]["physics"]["n"] == meta["held_out"]["hybrid"]["n"] == len(mlp_sample.rows)
    artifacts.save_model(tmp_path / "h.json", model, meta)
    loaded, lmeta = artifacts.load_model(tmp_path / "h.json")
    assert f"{len(mlp_sample.rows)} rows: fewer than 300" in lmeta["version"]
    row = mlp_sample.rows[0]
    plain = gpucast.predict(row.job, row.gpu)
    fixed = gpucast.predict(row.job, row.gpu, learned=(loaded, lmeta))
    assert fixed.model_version == plain.model_version + "+" + lmeta["version"]
    from gpucast.learn.features import physics_matrix, reference_matrix
    from gpucast.estimate.environment import Environment

    X = np.hstack([physics_matrix(mlp_sample, Environment.default(), np.array([0])), reference_matrix(mlp_sample)[:1]])
    expect = model.predict(X, np.array([plain.gpu_util_pct]))[0]
    assert fixed.gpu_util_pct == pytest.approx(expect, abs=0.01)
    assert fixed.step_time_s == plain.step_time_s and any("physics said" in n for n in fixed.notes)


def test_model_files_of_another_kind_are_refused(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"gpucast_model": 9, "kind": "hybrid"}))
    with pytest.raises(artifacts.ModelFileError, match="not a format-1 gpucast hybrid"):
        artifacts.load_model(bad)
    with pytest.raises(artifacts.ModelFileError, match="cannot read model file"):
        artifacts.load_model(tmp_path / "absent.json")


def test_cli_learn_fit_writes_only_a_model_that_wins_unless_forced(tmp_path):
    # Made-up utilization (plumbing, not accuracy): the physics cannot know it, trees can't either
    lines = ["model,batch_size,data.source,gpu,util_pct,group"]
    rng = np.random.default_rng(0)
    for i in range(12):
        lines.append(f"mlp:{32 * (i + 1)}:{64 * (i % 3 + 1)};10,{8 * (i + 1)},device,t4,{rng.uniform(5, 95):.1f},g{i % 3}")
    (tmp_path / "rows.csv").write_text("\n".join(lines) + "\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "gpucast.cli", *a], capture_output=True, text=True,
                                    cwd=tmp_path, timeout=300)
    r = run("learn", "fit", "rows.csv", "--out", "h.json")
    if r.returncode == 1:  # it lost on held-out groups: refused, nothing written
        assert "not written: the hybrid does not beat the physics" in r.stderr and not (tmp_path / "h.json").exists()
        r = run("learn", "fit", "rows.csv", "--out", "h.json", "--force")
    assert r.returncode == 0, r.stderr
    r = run("predict", "mlp-small", "-g", "t4", "--learned", "h.json", "--json")
    assert r.returncode == 0, r.stderr
    assert "+hybrid-util_pct@" in json.loads(r.stdout)["model_version"]


def test_cli_learn_evaluate_prints_every_method_and_refuses_one_group(tmp_path):
    # Made-up numbers (plumbing: every method runs and is scored under the same split)
    lines = ["model,batch_size,data.source,gpu,step_time_s,group"]
    for i in range(9):
        lines.append(f"mlp:{64 * (i + 1)}:{128 * (i % 3 + 1)};10,{16 * (i + 1)},device,t4,{0.001 * (i + 2):.4f},g{i % 3}")
    (tmp_path / "rows.csv").write_text("\n".join(lines) + "\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "gpucast.cli", *a], capture_output=True, text=True,
                                    cwd=tmp_path, timeout=300)
    r = run("learn", "evaluate", "rows.csv", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"step_time_s"}
    assert set(doc["step_time_s"]) == {"floor", "reference", "physics", "physics+calibration", "hybrid"}
    assert all(v["n"] == 9 for v in doc["step_time_s"].values())
    (tmp_path / "one.csv").write_text("model,gpu,util_pct,group\nmlp-small,t4,50,a\nresnet50,t4,90,a\n")
    r = run("learn", "evaluate", "one.csv")
    assert r.returncode == 2 and "at least two groups" in r.stderr
