"""Jobs with a parallel plan or adapters over real HTTP: the schema takes the groups, the answer
is the Python API's, and every impossible plan is a 422 with one line."""

from __future__ import annotations

import pytest

import gpucast
from gpucast.job import Job

SMALL = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=4, vocab_size=1000)
BASE = {"hf_config": SMALL, "batch_size": 2, "seq_len": 64, "precision": "bf16", "optimizer": "adamw", "gpu": "h100"}


def test_a_plan_round_trips_through_the_schema(client):
    parallel = {"tensor": 2, "pipeline": 2, "sharding": "zero1", "recompute": "selective", "grad_accum": 4,
                "gpus_per_node": 4, "network": "ib-400/gpu"}
    r = client.post("/v1/predict", json={**BASE, "gpus": 16, "parallel": parallel})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job"]["parallel"] == parallel
    plan = body["plan"]
    assert (plan["tensor"], plan["pipeline"], plan["data"], plan["nodes"]) == (2, 2, 4, 4)
    assert plan["sequence"] is True   # Megatron's default under tensor parallelism
    direct = gpucast.predict(Job.from_hf_config(SMALL, batch_size=2, seq_len=64, precision="bf16",
                                                optimizer="adamw", gpus=16, parallel=parallel), "h100").to_dict()
    assert body == direct


def test_sequence_parallelism_can_be_turned_off_over_http(client):
    parallel = {"tensor": 2, "sequence": False}
    r = client.post("/v1/predict", json={**BASE, "gpus": 2, "parallel": parallel})
    assert r.status_code == 200, r.text
    assert r.json()["job"]["parallel"] == parallel and r.json()["plan"]["sequence"] is False


def test_an_expert_parallel_plan_over_http(client):
    moe = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
               vocab_size=256)
    parallel = {"expert": 4, "expert_tensor": 1, "sharding": "zero1", "framework": "megatron"}
    r = client.post("/v1/predict", json={**BASE, "hf_config": moe, "gpus": 4, "parallel": parallel})
    assert r.status_code == 200, r.text
    plan = r.json()["plan"]
    assert (plan["expert"], plan["expert_tensor"], plan["expert_data"]) == (4, 1, 1)
    assert plan["step_breakdown_s"]["expert_parallel_comm_s"] > 0


def test_a_served_moe_with_attention_data_parallelism_over_http(client):
    moe = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
               vocab_size=256, max_position_embeddings=2048)
    parallel = {"tensor": 4, "expert": 4, "attention_dp": True}
    body = {"hf_config": moe, "batch_size": 16, "precision": "bf16", "mode": "serve", "gpu": "h100", "gpus": 4,
            "parallel": parallel, "serve": {"input_len": 64, "output_len": 8}}
    r = client.post("/v1/predict", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["job"]["parallel"] == parallel and r.json()["serving"]["attention_dp"] is True
    r = client.post("/v1/predict", json={**body, "mode": "train", "serve": None})
    assert r.status_code == 422 and "attention_dp" in str(r.json()["detail"])


def test_adapters_round_trip_through_the_schema(client):
    r = client.post("/v1/predict", json={**BASE, "precision": "amp-bf16",
                                         "adapter": {"kind": "lora", "rank": 4, "targets": ["q_proj", "v_proj"]}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job"]["adapter"] == {"kind": "lora", "rank": 4, "targets": ["q_proj", "v_proj"]}
    assert body["plan"] == {}  # adapters alone: one replica, no plan


@pytest.mark.parametrize("change,field", [
    ({"gpus": 4, "parallel": {"tensor": 3}}, "parallel.tensor"),
    ({"gpus": 6, "parallel": {"tensor": 4}}, "gpus"),
    ({"gpus": 8, "parallel": {"pipeline": 8}}, "parallel.pipeline"),
    ({"gpus": 4, "parallel": {"sharding": "zero4"}}, "sharding"),
    ({"gpus": 4, "parallel": {"network": "carrier-pigeon"}}, "parallel.network"),
    ({"gpus": 4, "parallel": {"pipeline": 2, "sharding": "zero3"}}, "parallel.sharding"),
    ({"gpus": 4, "parallel": {"virtual_pipeline": 2}}, "parallel.virtual_pipeline"),
    ({"gpus": 4, "parallel": {"pipeline": 2, "virtual_pipeline": 5}}, "parallel.virtual_pipeline"),
    ({"gpus": 4, "parallel": {"tensor": 2, "sequence": "yes"}}, "sequence"),
    ({"gpus": 3, "parallel": {"context": 3}}, "parallel.context"),
    ({"gpus": 2, "parallel": {"tensor": 2, "tp_overlap": "on"}}, "tp_overlap"),
    ({"gpus": 2, "parallel": {"expert": 2}}, "has no routed experts"),
    ({"gpus": 4, "parallel": {"expert": 4, "expert_tensor": 2}}, "parallel.expert"),
    ({"gpus": 4, "parallel": {"pipeline": 2, "pipeline_layout": "Et|t("}}, "parallel.pipeline_layout"),
    ({"gpus": 4, "parallel": {"pipeline": 2, "pipeline_layout": "Et|tL"}}, "parallel.pipeline_layout"),
    ({"gpus": 4, "parallel": {"pipeline": 2, "virtual_pipeline": 2, "loss_in_split": True}}, "loss_in_split"),
    ({"precision": "nvfp4"}, "nvfp4 needs FP4 tensor cores"),
    ({"gpus": 4, "parallel": {"tensor": 2}, "stack": {"kernels": "xla"}}, "kernels"),
    ({"adapter": {"kind": "dora"}}, "kind"),
    ({"adapter": {"kind": "lora", "targets": ["nothing_matches"]}}, "adapter"),
])
def test_impossible_plans_are_422_with_one_line(client, change, field):
    r = client.post("/v1/predict", json={**BASE, **change})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    text = detail if isinstance(detail, str) else str(detail)
    assert field in text and "\n" not in text


def test_advise_searches_plans_over_http(client):
    body = {**BASE, "gpus": 8, "parallel": {"sharding": "fsdp-full", "grad_accum": 2}, "gpu": ["h100"],
            "prices": [{"gpu": "h100", "usd_per_gpu_hour": 2.0}], "samples_per_epoch": 10_000,
            "shardings": ["fsdp-full", "zero1"], "tensors": [1, 2], "pipelines": [1], "recomputes": ["none"],
            "max_gpus": 16, "max_plans": 40}
    r = client.post("/v1/advise", json=body)
    assert r.status_code == 200, r.text
    advice = r.json()
    plans = [o for o in advice["options"] if o["plan"] is not None]
    assert plans and advice["recommended"] is not None
    best = advice["options"][advice["recommended"]]
    assert best["memory_fit"] != "no"
    # The shardings asked for, or one GPU (where no sharding applies: a small model's cheapest).
    assert {o["plan"]["sharding"] for o in plans if o["gpus"] > 1} <= {"fsdp-full", "zero1"}
    assert {o["gpus"] for o in plans} <= {1, 2, 4, 8, 16}
    too_many = client.post("/v1/advise", json={**body, "max_plans": 10_000})
    assert too_many.status_code == 422 and "max_plans" in too_many.text


def test_advise_takes_the_megatron_degrees_a_global_batch_and_sequence_parallelism_over_http(client):
    body = {**BASE, "gpus": 8, "parallel": {"sharding": "zero1", "grad_accum": 1, "framework": "megatron"},
            "gpu": ["h100"], "prices": [{"gpu": "h100", "usd_per_gpu_hour": 2.0}], "samples_per_epoch": 10_000,
            "counts": [8], "tensors": [2], "pipelines": [2], "recomputes": ["none"], "batches": [2],
            "shardings": ["zero1"], "contexts": [2], "virtual_pipelines": [2],
            "sequence_parallel": [True, False], "global_batch": 16, "max_plans": 60}
    r = client.post("/v1/advise", json=body)
    assert r.status_code == 200, r.text
    plans = [o["plan"] for o in r.json()["options"] if o["plan"] is not None]
    assert {p["sequence"] for p in plans} == {True, False}
    assert all((p["tensor"], p["pipeline"], p["context"], p["virtual_pipeline"]) == (2, 2, 2, 2) for p in plans)
    for o in r.json()["options"]:   # every plan keeps the 16 sequences: micro-batch x accumulation x d
        p = o["plan"]
        assert o["batch_size"] * o["accumulation"] * (o["gpus"] // (p["tensor"] * p["pipeline"] * p["context"])) == 16
    bad = client.post("/v1/advise", json={**body, "sequence_parallel": ["on"]})
    assert bad.status_code == 422 and "sequence_parallel" in bad.text
    many = client.post("/v1/advise", json={**body, "contexts": list(range(1, 20))})
    assert many.status_code == 422 and "contexts" in many.text


def test_a_recipe_s_bf16_layers_over_http(client):
    # The same job over HTTP and through the API: the first block kept in bf16 (stack.bf16_layers).
    body = {**BASE, "precision": "fp8", "gpus": 2, "parallel": {"tensor": 2}, "gpu": "h100",
            "stack": {"bf16_layers": [1, 0]}}
    r = client.post("/v1/predict", json=body)
    assert r.status_code == 200, r.text
    direct = gpucast.predict(Job.from_hf_config(SMALL, batch_size=2, seq_len=64, precision="fp8", optimizer="adamw",
                                                gpus=2, parallel={"tensor": 2}, stack={"bf16_layers": "1,0"}), "h100")
    assert r.json()["step_time_s"] == direct.step_time_s
    whole = client.post("/v1/predict", json={**body, "stack": {}})
    assert whole.json()["step_time_s"] != direct.step_time_s
    bad = client.post("/v1/predict", json={**body, "stack": {"bf16_layers": [1]}})
    assert bad.status_code == 422 and "bf16_layers" in bad.text
