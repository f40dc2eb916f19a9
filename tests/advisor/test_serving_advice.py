"""``advise --serve`` (gpucast.advisor.serving): the cheapest deployment that meets the targets, and why
the others do not (real predictions of a small Llama-shaped decoder)."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig

from gpucast.advisor.serving import advise_serving
from gpucast.job import Job, JobError

SMALL = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=2, vocab_size=4096, max_position_embeddings=4096).to_dict()


def _job(**serve):
    return Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                              serve=dict(input_len=256, output_len=32, request_rate=20.0, num_requests=60, **serve))


def test_the_answer_is_the_cheapest_feasible_option():
    a = advise_serving(_job(), ["l4", "a100-80gb", "h100"], tensors=(1, 2), tpot_s=0.5)
    assert len(a.options) == 6
    feasible = [o for o in a.options if o.feasible]
    assert feasible and a.best is not None
    best = a.options[a.best]
    assert best.usd_per_million_tokens == min(o.usd_per_million_tokens for o in feasible)
    # a price per million tokens is the GPUs' hourly price over the tokens of an hour
    assert best.usd_per_million_tokens == pytest.approx(
        best.usd_per_gpu_hour * best.tensor / (best.output_tokens_per_s * 3600) * 1e6)
    assert best.gpu in a.message and "cheapest" in a.message


def test_an_impossible_target_is_refused_with_its_reason():
    a = advise_serving(_job(), ["a100-80gb"], tensors=(1,), ttft_s=1e-6)
    assert a.best is None and "TTFT" in a.options[0].why and "no deployment" in a.message


def test_only_serving_jobs_are_advised():
    with pytest.raises(JobError, match="mode 'serve'"):
        advise_serving(Job("resnet50"), ["a100-80gb"])


def _busy_job(rate=2000.0):
    return Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                              serve=dict(input_len=256, output_len=32, request_rate=rate, num_requests=400,
                                         engine_version="0.11"))   # its steps not hidden behind 0.14's host work


def test_replicas_share_a_load_one_deployment_cannot_meet():
    from gpucast.api import predict

    job = _busy_job()
    alone = advise_serving(job, ["l4"], tensors=(1,), tpot_s=0.004)
    assert alone.best is None and "TPOT" in alone.options[0].why and alone.options[0].replicas == 1
    fleet = advise_serving(job, ["l4"], tensors=(1,), tpot_s=0.004, replicas=16)
    o = fleet.options[fleet.best]
    assert 1 < o.replicas <= 16 and f"{o.replicas} replicas of 1 x l4" in fleet.message
    # one replica serves a Poisson stream at the rate over the replicas (a Poisson stream split at random)
    one = predict(job.with_(serve=dict(job.serve.to_dict(), engine="vllm", request_rate=2000.0 / o.replicas)), "l4")
    assert o.tpot_p90_s == pytest.approx(one.serving["tpot_p90_s"])
    assert o.output_tokens_per_s == pytest.approx(o.replicas * one.serving["output_tokens_per_s"])
    # ... and the fleet costs its replicas' GPUs for the tokens they generate together
    assert o.usd_per_million_tokens == pytest.approx(
        o.usd_per_gpu_hour * o.replicas / (o.output_tokens_per_s * 3600) * 1e6)
    # the fewest that do: one replica fewer misses the target
    fewer = predict(job.with_(serve=dict(job.serve.to_dict(), engine="vllm",
                                         request_rate=2000.0 / (o.replicas - 1))), "l4")
    assert fewer.serving["tpot_p90_s"] > 0.004


def test_more_replicas_are_not_tried_for_what_they_cannot_mend():
    # an impossible target holds at any count: the search stops at the most replicas it may try;
    # a GPU without a price is not a matter of load: one replica, no more
    a = advise_serving(_busy_job(), ["l4"], tensors=(1,), ttft_s=1e-6, replicas=4)
    assert a.best is None and a.options[0].replicas == 4
    calls = []

    def counting(job, gpu):
        from gpucast.api import predict
        calls.append(job)
        return predict(job, gpu)
    b = advise_serving(_busy_job(), ["l4"], tensors=(1,), tpot_s=0.004, replicas=8, predict=counting,
                       provider="nowhere")
    assert b.best is None and len(calls) == 1 and "no price" in b.options[0].why


def test_a_replica_takes_its_share_of_each_kind_of_load():
    from gpucast.advisor.serving import replica_share

    closed = Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                                serve=dict(input_len=64, output_len=8, concurrency=10))
    assert replica_share(closed, 4).serve.concurrency == 3  # ceil(10 / 4)
    static = Job.from_hf_config(SMALL, batch_size=10, precision="bf16", mode="serve",
                                serve=dict(input_len=64, output_len=8))
    assert replica_share(static, 4).batch_size == 3
    assert replica_share(_busy_job(), 5).serve.request_rate == pytest.approx(400.0)
    assert replica_share(static, 1) is static


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, 5000])
def test_a_bad_replica_count_is_refused(bad):
    with pytest.raises(JobError, match="--replicas"):
        advise_serving(_busy_job(), ["l4"], replicas=bad)


MOE = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
           vocab_size=256, max_position_embeddings=2048)


def test_a_mixture_of_experts_model_is_tried_with_attention_dp_and_expert_parallelism():
    job = Job.from_hf_config(MOE, batch_size=1, precision="bf16", mode="serve",
                             serve=dict(input_len=128, output_len=16, concurrency=64, num_requests=128))
    a = advise_serving(job, ["h100"], tensors=(1, 2, 4))
    shapes = sorted((o.tensor, o.layout) for o in a.options)
    # one GPU runs one way; two and four GPUs each as tensor parallel and as DEP (the DEP of one is the TP)
    assert shapes == [(1, "tp"), (2, "dep"), (2, "tp"), (4, "dep"), (4, "tp")]
    assert all(o.why != "meets the targets" or o.feasible for o in a.options)
    dense = advise_serving(_job(), ["h100"], tensors=(1, 2))
    assert {o.layout for o in dense.options} == {"tp"}
    with pytest.raises(JobError, match="--layouts"):
        advise_serving(job, ["h100"], tensors=(2,), layouts=["ep"])


def test_a_disaggregated_fleet_is_one_deployment_split_into_prefill_and_decode():
    from gpucast.api import predict

    job = _busy_job(rate=400.0)
    a = advise_serving(job, ["l4"], tensors=(1,), tpot_s=0.01, replicas=8, layouts=["pd"])
    assert all(o.layout == "pd" for o in a.options)
    o = a.options[0]
    if o.replicas == 1:   # a split needs two replicas: one alone is never the answer
        assert not o.feasible and "2 replicas" in o.why
        return
    assert 1 <= o.prefill_replicas < o.replicas
    # the option is the one deployment's own run: all r x t GPUs, the whole load, serve.prefill_replicas
    whole = predict(job.with_(gpus=o.replicas, serve=dict(job.serve.to_dict(), engine="vllm",
                                                          prefill_replicas=o.prefill_replicas)), "l4")
    assert o.output_tokens_per_s == pytest.approx(whole.serving["output_tokens_per_s"])
    assert o.usd_per_million_tokens == pytest.approx(
        o.usd_per_gpu_hour * o.replicas / (o.output_tokens_per_s * 3600) * 1e6)


def test_a_drafting_job_is_tried_with_its_drafter_and_without():
    from gpucast.api import predict

    def at(rate):
        return Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                                  serve=dict(input_len=256, output_len=64, request_rate=rate, num_requests=60,
                                             spec_method="eagle3", spec_tokens=3, spec_acceptance=2.5))
    a = advise_serving(at(2.0), ["h100"], tensors=(1,))
    assert sorted(str(o.spec) for o in a.options) == ["None", "eagle3"]
    drafted = next(o for o in a.options if o.spec == "eagle3")
    plain = next(o for o in a.options if o.spec is None)
    # each option is its own job's prediction: the drafter's, and the job without serve.spec_method
    job = at(2.0)
    off = job.with_(serve=dict(job.serve.to_dict(), engine="vllm", spec_method=None, spec_tokens=None,
                               spec_acceptance=None))
    assert plain.tpot_p90_s == pytest.approx(predict(off, "h100").serving["tpot_p90_s"])
    assert drafted.tpot_p90_s == pytest.approx(
        predict(job.with_(serve=dict(job.serve.to_dict(), engine="vllm")), "h100").serving["tpot_p90_s"])
    # at a light load 2.5 tokens a step beat one: the drafter's steps give a shorter time per token
    assert drafted.tpot_p90_s < plain.tpot_p90_s


def test_a_draft_model_job_is_tried_without_its_drafter_too():
    drafter = dict(SMALL, num_hidden_layers=1)
    job = Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                             serve=dict(input_len=256, output_len=64, request_rate=2.0, num_requests=40,
                                        spec_method="draft", draft_model=drafter, spec_tokens=2, spec_acceptance=2.0))
    a = advise_serving(job, ["h100"], tensors=(1,))
    assert sorted(str(o.spec) for o in a.options) == ["None", "draft"]
    from gpucast.api import predict

    drafted = next(o for o in a.options if o.spec == "draft")
    own = predict(job.with_(serve=dict(job.serve.to_dict(), engine="vllm")), "h100").serving
    assert drafted.tpot_p90_s == pytest.approx(own["tpot_p90_s"]) and own["memory"]["draft_weight_bytes"] > 0


def test_acceptance_carried_to_other_draft_counts_is_leviathans_closed_form():
    from gpucast.estimate.serving.speculative import acceptance_at

    p = 0.6   # each draft accepted with probability 0.6: a step emits (1 - p^(k+1)) / (1 - p) tokens
    at3 = (1 - p ** 4) / (1 - p)
    assert acceptance_at(at3, 3, 1) == pytest.approx(1 + p)
    assert acceptance_at(at3, 3, 6) == pytest.approx((1 - p ** 7) / (1 - p))
    assert acceptance_at(at3, 3, 3) == at3
    assert acceptance_at(4.0, 3, 7) == pytest.approx(8.0) and acceptance_at(1.0, 3, 7) == pytest.approx(1.0)


def test_draft_counts_are_tried_each_at_its_own_acceptance():
    from gpucast.api import predict
    from gpucast.estimate.serving.speculative import acceptance_at

    job = Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                             serve=dict(input_len=256, output_len=64, request_rate=2.0, num_requests=40,
                                        spec_method="eagle3", spec_tokens=3, spec_acceptance=2.5))
    a = advise_serving(job, ["h100"], tensors=(1,), spec_tokens=[1, 3, 5])
    assert [(o.spec, o.spec_tokens) for o in a.options] == [("eagle3", 1), ("eagle3", 3), ("eagle3", 5), (None, None)]
    one = a.options[0]
    own = predict(job.with_(serve=dict(job.serve.to_dict(), engine="vllm", spec_tokens=1,
                                       spec_acceptance=acceptance_at(2.5, 3, 1))), "h100").serving
    assert one.tpot_p90_s == pytest.approx(own["tpot_p90_s"])
    with pytest.raises(JobError, match="--spec-tokens"):
        advise_serving(_job(), ["h100"], tensors=(1,), spec_tokens=[2])
    with pytest.raises(JobError, match="--spec-tokens"):
        advise_serving(job, ["h100"], tensors=(1,), spec_tokens=[0])


def test_prefill_instances_are_tried_at_other_tensor_degrees_and_priced_by_their_gpus():
    job = _busy_job(rate=400.0)
    a = advise_serving(job, ["h100"], tensors=(1,), tpot_s=0.01, replicas=4, layouts=["pd"], prefill_tensors=[2])
    split = [o for o in a.options if o.prefill_replicas]
    for o in split:
        # its GPUs: the prefill instances at their degree, the decode ones at the plan's
        gpus = o.prefill_replicas * (o.prefill_tensor or o.tensor) + (o.replicas - o.prefill_replicas) * o.tensor
        assert o.gpu_count == gpus
        if o.usd_per_million_tokens is not None:
            assert o.usd_per_million_tokens == pytest.approx(
                o.usd_per_gpu_hour * gpus / (o.output_tokens_per_s * 3600) * 1e6)
    with pytest.raises(JobError, match="add pd"):
        advise_serving(job, ["h100"], tensors=(1,), prefill_tensors=[2])


def test_a_wider_prefill_instance_is_one_of_the_splits_tried():
    from gpucast.advisor import serving as adv

    seen = []

    def predict(job, gpu):
        seen.append((job.gpus, job.serve.prefill_replicas, job.serve.prefill_tensor))
        from gpucast.api import predict as real

        return real(job, gpu)
    adv.advise_serving(_busy_job(rate=400.0), ["h100"], tensors=(1,), replicas=4, layouts=["pd"],
                       prefill_tensors=[2], predict=predict, tpot_s=1e-6)
    # 4 replicas: 1 or 2 prefill instances, each at 1 GPU (the decode side's) or 2
    assert {(1 + 3, 1, None), (2 + 3, 1, 2), (2 + 2, 2, None), (4 + 2, 2, 2)} <= set(seen)
