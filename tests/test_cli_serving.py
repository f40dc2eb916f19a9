"""The CLI for LLM deployments (``--mode serve``, ``--set serve.*``): the serving table, ``--json``'s
``serving`` object, and every bad input one ``error:`` line with exit code 2 (real processes)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_cli import _gpucast

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

SMALL = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 2048}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-serving")
    cfg = d / "small.json"
    cfg.write_text(json.dumps(SMALL))
    base = ["predict", "--hf-config", cfg, "--mode", "serve", "--precision", "bf16", "-b", "4", "--no-cache"]
    todo = {
        # vLLM 0.11's synchronous scheduler: this tiny model's GPU work would hide behind 0.14's 2 ms of host work
        "json": base + ["--set", "serve.input_len=128", "--set", "serve.output_len=16", "--set",
                        "serve.engine_version=0.11", "--gpu", "a100-40gb", "--gpu", "h100", "--json"],
        "table": base + ["--set", "serve.request_rate=20", "--set", "serve.num_requests=30", "--gpu", "l4"],
        "advise": ["advise", "--hf-config", cfg, "--mode", "serve", "--precision", "bf16", "-b", "4",
                   "--set", "serve.input_len=128", "--set", "serve.output_len=16", "-g", "a100-80gb,h100",
                   "--tensors", "1,2", "--tpot", "1", "--json"],
        "err_advise_target": ["advise", "--hf-config", cfg, "--mode", "serve", "--ttft", "-1"],
        "err_replicas": ["advise", "--hf-config", cfg, "--mode", "serve", "--replicas", "0"],
        "err_layouts": ["advise", "--hf-config", cfg, "--mode", "serve", "--precision", "bf16", "-g", "h100",
                        "--tensors", "2", "--layouts", "ep"],
        "advise_replicas": ["advise", "--hf-config", cfg, "--mode", "serve", "--precision", "bf16", "-b", "4",
                            "--set", "serve.input_len=128", "--set", "serve.output_len=16", "--set",
                            "serve.request_rate=8000", "--set", "serve.num_requests=200", "--set",
                            "serve.engine_version=0.11", "-g", "l4",
                            "--tensors", "1", "--tpot", "0.0033", "--replicas", "8"],
        "err_engine": base + ["--set", "serve.engine=tgi"],
        "err_length": base + ["--set", "serve.input_len=0"],
        "err_context": base + ["--set", "serve.input_len=2000", "--set", "serve.output_len=100"],
        "err_load": base + ["--set", "serve.concurrency=4", "--set", "serve.request_rate=2"],
        "err_zoo": ["predict", "resnet18-cifar", "--mode", "serve"],
        "err_group": ["predict", "resnet18-cifar", "--set", "serve.input_len=8"],
        "err_stages": base + ["--gpus", "4", "--set", "parallel.pipeline=4"],
        "err_expert": base + ["--gpus", "2", "--set", "parallel.tensor=2", "--set", "parallel.expert=2"],
        "err_expert_train": ["predict", "--hf-config", cfg, "--mode", "train", "-b", "4", "--gpus", "2",
                             "--set", "parallel.tensor=2", "--set", "parallel.expert=2"],
    }
    with ThreadPoolExecutor(len(todo)) as pool:
        futures = {k: pool.submit(_gpucast, args, d) for k, args in todo.items()}
        return {k: f.result() for k, f in futures.items()}


def test_json_carries_the_serving_answer_per_gpu(runs):
    a100, h100 = runs["json"].json()
    for p in (a100, h100):
        s = p["serving"]
        assert s["requests"] == 4 and s["finished"] == 4 and s["load"] == "static" and s["engine"] == "vllm"
        assert 0 < s["ttft_s"] < s["latency_s"] and s["tpot_s"] > 0 and s["kv_cache_tokens"] > 0
        assert p["job"]["serve"] == {"input_len": 128, "output_len": 16, "engine_version": "0.11"}   # text, as given
    assert h100["serving"]["latency_s"] < a100["serving"]["latency_s"]


def test_the_table_prints_the_serving_row(runs):
    r = runs["table"]
    assert r.rc == 0, str(r)
    assert "serving" in r.stdout and "poisson" in r.stdout and "TTFT" in r.stdout
    # the serving answer stands first; the GPU figures below it say they are one decode iteration's
    assert r.stdout.index("TTFT") < r.stdout.index("decode iteration ms")
    assert "step ms" not in r.stdout


def test_advise_serve_sizes_the_deployment(runs):
    a = runs["advise"].json()
    assert len(a["options"]) == 4 and a["best"] is not None
    best = a["options"][a["best"]]
    assert best["feasible"] and best["gpu"] in ("a100-80gb", "h100")
    assert best["usd_per_million_tokens"] == min(o["usd_per_million_tokens"] for o in a["options"] if o["feasible"])


def test_advise_serve_sizes_the_replicas_in_its_table(runs):
    r = runs["advise_replicas"]
    assert r.rc == 0, str(r)
    assert "replicas" in r.stdout and "replicas of 1 x l4" in r.stdout


@pytest.mark.parametrize("name, needle", [
    ("err_engine", "serve.engine"), ("err_length", "serve.input_len"), ("err_context", "more than the model's 2048"),
    ("err_load", "two kinds of load"), ("err_advise_target", "--ttft"), ("err_replicas", "--replicas"), ("err_layouts", "--layouts"), ("err_zoo", "Hugging Face decoder"), ("err_group", "applies to mode 'serve'"),
    ("err_stages", "at most the model's 2 layers"), ("err_expert", "has no experts"),
    ("err_expert_train", "parallel.expert"),
])
def test_bad_serving_input_is_one_error_line_and_exit_2(runs, name, needle):
    r = runs[name]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.rc == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], str(r)
