"""The CLI for jobs that span many GPUs: ``--set parallel.*``/``adapter.*`` and job files describe
them, the plan is printed and in ``--json``, and every bad combination is one ``error:`` line with
exit code 2 (real processes, started together)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_cli import _gpucast

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

SMALL = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}
JOB = """\
model: hf:llama
hf_config: '{cfg}'
batch_size: 2
seq_len: 64
precision: bf16
optimizer: adamw
gpus: 16
parallel:
  sharding: fsdp-full
  recompute: full
  grad_accum: 2
  network: roce-1600
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-parallel")
    cfg = d / "small.json"
    cfg.write_text(json.dumps(SMALL))
    job = d / "job.yaml"
    job.write_text(JOB.format(cfg=json.dumps(SMALL, sort_keys=True, separators=(",", ":"))))
    base = ["predict", "--hf-config", cfg, "--seq-len", "64", "-b", "2", "--precision", "bf16", "--optimizer", "adamw",
            "--gpu", "h100", "--no-cache"]
    todo = {
        "set": base + ["--gpus", "8", "--set", "parallel.tensor=2", "--set", "parallel.pipeline=2",
                       "--set", "parallel.grad_accum=4", "--json"],
        "table": base + ["--gpus", "16", "--set", "parallel.sharding=zero3", "--set", "parallel.gpus_per_node=4"],
        "job": ["predict", "--job", job, "--gpu", "a100-40gb", "--json", "--no-cache"],
        "explain": ["explain", "--job", job, "--gpu", "a100-40gb"],
        "lora": base + ["--precision", "amp-bf16", "--set", "adapter.kind=lora", "--set", "adapter.rank=4", "--json"],
        "err_heads": base + ["--gpus", "3", "--set", "parallel.tensor=3"],
        "err_layers": base + ["--gpus", "8", "--set", "parallel.pipeline=8"],
        "err_divisible": base + ["--gpus", "6", "--set", "parallel.tensor=4"],
        "err_sharding": base + ["--gpus", "8", "--set", "parallel.sharding=zero4"],
        "err_network": base + ["--gpus", "8", "--set", "parallel.network=ib"],
        "err_framework": base + ["--gpus", "8", "--set", "parallel.framework=jax"],
        "err_master": base + ["--gpus", "4", "--set", "parallel.master_weights=remainders"],
        "err_group": base + ["--set", "paralel.tensor=2"],
        "err_adapter": base + ["--set", "adapter.kind=dora"],
        "err_targets": base + ["--set", "adapter.kind=lora", "--set", "adapter.targets=nothing_here"],
    }
    with ThreadPoolExecutor(len(todo)) as pool:
        futures = {k: pool.submit(_gpucast, args, d) for k, args in todo.items()}
        return {k: f.result() for k, f in futures.items()}


def test_set_describes_a_plan_and_json_carries_it(runs):
    p = runs["set"].json()
    pl = p["plan"]
    assert (pl["tensor"], pl["pipeline"], pl["data"], pl["grad_accum"]) == (2, 2, 2, 4)
    assert p["job"]["parallel"] == {"tensor": 2, "pipeline": 2, "grad_accum": 4}
    assert pl["global_batch"] == 2 * 4 * 2
    assert set(pl["step_breakdown_s"]) >= {"compute_s", "tensor_parallel_comm_s", "pipeline_bubble_s"}
    assert pl["framework"] == "megatron" and pl["framework_host_s"] > 0  # tensor parallelism: Megatron-LM's


def test_the_table_prints_the_plan_line(runs):
    r = runs["table"]
    assert r.rc == 0, str(r)
    assert "plan (h100): 4 nodes x 4 GPUs" in r.stdout and "zero3" in r.stdout and "MFU" in r.stdout


def test_a_job_file_holds_the_parallel_group(runs):
    p = runs["job"].json()
    assert p["plan"]["sharding"] == "fsdp-full" and p["plan"]["nodes"] == 2 and p["plan"]["recompute"] == "full"
    assert p["plan"]["links"]["network"].startswith("roce")


def test_explain_shows_the_step_breakdown_and_stages(runs):
    r = runs["explain"]
    assert r.rc == 0, str(r)
    for text in ("One optimizer step", "recompute", "data parallel comm", "Per pipeline stage", "busiest GPU",
                 "framework: fsdp"):
        assert text in r.stdout, text


def test_adapters_from_the_command_line(runs):
    p = runs["lora"].json()
    assert p["job"]["adapter"] == {"kind": "lora", "rank": 4}
    assert p["fits_in_memory"]


@pytest.mark.parametrize("name,words", [
    ("err_heads", "must divide the 4 attention heads"),
    ("err_layers", "more stages than the 4 layers"),
    ("err_divisible", "must be a multiple of parallel.tensor x parallel.pipeline"),
    ("err_sharding", "parallel.sharding"),
    ("err_network", "parallel.network"),
    ("err_framework", "parallel.framework"),
    ("err_master", "needs parallel.sharding zero1, zero2 or zero3"),
    ("err_group", "--set takes GROUP.FIELD=VALUE"),
    ("err_adapter", "adapter.kind"),
    ("err_targets", "match no Linear layer"),
])
def test_bad_combinations_are_one_error_line_and_exit_2(runs, name, words):
    r = runs[name]
    assert r.rc == 2, str(r)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], str(r)
