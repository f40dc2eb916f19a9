"""``gpucast calibrate`` on measured serving rows: each engine's host time per iteration
(gpucast.learn.serving_fit), written into the environment and used by every prediction with it.

* Real rows: vLLM static batches of two 7B models on one A100-40GB from LLM-Inference-Bench
  (data/measured/llm-inference-bench-a100, BSD-3): the fit does not make the rows' error worse, the
  held-out-by-model error is reported, and a prediction with the written environment moves a run's
  latency by its iterations times the change of host time (the closed form of a per-iteration cost).
* Recovery: rows whose figures are the model's own predictions at a host time of 7 ms (made here,
  not measured: a check of the fitting machinery alone) give back 7 ms, from wall times and from
  tokens per second (the reciprocal path) alike.
* Bad rows and files are one line naming the column or constant.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import yaml

import gpucast
from gpucast import Job
from gpucast.estimate.environment import Environment
from gpucast.learn import artifacts
from gpucast.learn.rows import RowsError, from_records
from gpucast.learn.serving_fit import fit_serving
from tests.measured_data import LLM_INFERENCE

LLAMA2_7B = dict(model_type="llama", hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_size=4096,
                 intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                 vocab_size=32000, max_position_embeddings=4096)
MISTRAL_7B = dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
                  sliding_window=4096)
CONFIGS = {"meta-llama/Llama-2-7b-hf": LLAMA2_7B, "mistralai/Mistral-7B-v0.1": MISTRAL_7B}


def _job(cfg, batch, n_in, n_out, engine="vllm"):
    return Job.from_hf_config(cfg, batch_size=batch, precision="fp16", mode="serve",
                              serve=dict(input_len=n_in, output_len=n_out, engine=engine,
                                         **({"engine_version": "0.6"} if engine == "vllm" else {})))  # 2024's vLLM


def _measured_rows():
    out = []
    for r in csv.DictReader(LLM_INFERENCE.open()):
        if (r["framework"] == "vLLM" and r["model"] in CONFIGS and r["gpus"] == "1" and r["batch_size"] in ("1", "16")
                and r["input_len"] in ("128", "1024")):
            job = _job(CONFIGS[r["model"]], int(r["batch_size"]), int(r["input_len"]), int(r["output_len"]))
            out.append({"gpu": "a100-40gb", "job": job.to_json(), "group": r["model"], "latency_s": float(r["latency_s"])})
    return out


def _gpucast(*args, cwd):
    return subprocess.run([sys.executable, "-m", "gpucast.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_calibrate_on_measured_vllm_rows_writes_a_host_time_that_predict_uses(tmp_path):
    recs = _measured_rows()
    assert len(recs) >= 6 and len({r["group"] for r in recs}) == 2
    path = tmp_path / "serving.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    out = tmp_path / "cluster.yaml"
    r = _gpucast("calibrate", str(path), "--out", str(out), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    fit = doc["fit"]["serving"]["vllm"]
    assert fit["rows"] == len(recs) and fit["groups"] == 2
    assert fit["mdape_after"] <= fit["mdape_before"] + 0.005
    assert fit["mdape_held_out_by_group"] is not None
    host = doc["constants"]["serving_host_s"]["vllm"]
    env, _ = artifacts.load_environment(out)
    assert env.serving_host("vllm") == host
    job = _job(LLAMA2_7B, 16, 1024, 1024)
    plain, fitted = gpucast.predict(job, "a100-40gb"), gpucast.predict(job, "a100-40gb", env=env)
    moved = fitted.serving["latency_s"] - plain.serving["latency_s"]
    assert moved == pytest.approx(plain.serving["iterations"] * (host - fit["prior_s"]), rel=0.01, abs=1e-4)


@pytest.mark.parametrize("figure", ["latency_s", "output_tokens_per_s", "tpot_s"])
def test_the_fit_recovers_the_host_time_the_figures_were_made_with(figure):
    truth = Environment.default().with_params({"serving_host_s:vllm": 0.007})
    recs = []
    for cfg, name in ((LLAMA2_7B, "llama"), (MISTRAL_7B, "mistral")):
        for batch, n in ((1, 128), (16, 512)):
            job = _job(cfg, batch, n, n)
            made = gpucast.predict(job, "a100-40gb", env=truth).serving[figure]
            recs.append({"gpu": "a100-40gb", "job": job.to_json(), "group": name, figure: made})
    fit = fit_serving(from_records(recs, "made"), Environment.default())
    assert fit.engines["vllm"].fitted_s == pytest.approx(0.007, abs=2e-4)
    assert fit.engines["vllm"].mdape_after < 0.01


def test_bad_serving_rows_are_one_line_naming_the_column():
    serve = _job(LLAMA2_7B, 1, 128, 128).to_json()
    train = Job(model="resnet18", batch_size=8).to_json()
    cases = [({"gpu": "a100-40gb", "job": train, "latency_s": 1.0}, "latency_s", "mode 'serve'"),
             ({"gpu": "a100-40gb", "job": serve, "latency_s": -1.0}, "latency_s", "positive"),
             ({"gpu": "a100-40gb", "job": serve, "step_time_s": 0.1}, "step_time_s", "serving run"),
             ({"gpu": "a100-40gb", "job": serve}, "latency_s", "needs one of")]
    for rec, col, words in cases:
        with pytest.raises(RowsError) as e:
            from_records([rec], "rows.csv")
        msg = str(e.value)
        assert "\n" not in msg and f"column {col!r}" in msg and words in msg, msg


@pytest.mark.parametrize("text,words", [
    ("serving_host_s: {vllm: -0.001}", "between 0 and 10"),
    ("serving_host_s: {tgi: 0.001}", "not an engine"),
    ("serving_host_s: 0.001", "must map engines"),
])
def test_a_bad_serving_host_time_in_an_environment_file_is_one_line(tmp_path, text, words):
    path = tmp_path / "env.yaml"
    path.write_text(f"gpucast_environment: 1\ngpucast_version: 0.1.0\nconstants:\n  {text}\n")
    with pytest.raises(artifacts.EnvironmentFileError, match=words):
        artifacts.load_environment(path)
