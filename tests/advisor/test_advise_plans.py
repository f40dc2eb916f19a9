"""gpucast.advisor's search of parallel plans (gpucast.advisor.plans): what is tried, the bounds,
the options' numbers against ``predict`` of the same plan, the recommendation, errors, the CLI.

Real captures of Hugging Face Llama configs on the meta device: a small one (hidden 1024, 8
layers, 16 heads) for most checks, a Llama-3-8B-shaped one where the point is that one GPU does
not hold it. Prices are a user price table written by the test, or the packaged ``cloud-2024``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

import gpucast
from gpucast import Job
from gpucast.advisor import FITS, NO, RISKY, AdviseError, advise
from gpucast.advisor.prices import parse
from gpucast.hardware import get_gpu
from gpucast.plan import replace_parallel

SMALL = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
LLAMA_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)
PRICES = parse([{"gpu": "h100", "usd_per_gpu_hour": 2.5, "provider": "test"},
                {"gpu": "l4", "usd_per_gpu_hour": 0.5, "provider": "test"}], "test")


def small(batch_size: int = 2, seq_len: int = 1024, grad_accum: int = 4, **parallel) -> Job:
    """Global batch: batch_size x grad_accum x 8 GPUs (64 by default)."""
    return Job.from_hf_config(SMALL, batch_size=batch_size, seq_len=seq_len, precision="bf16", optimizer="adamw",
                              gpus=8, parallel=dict(sharding="fsdp-full", grad_accum=grad_accum, **parallel))


def predict_plan(job: Job, gpu: str, gpus: int, micro: int, accum: int, tensor: int = 1, pipeline: int = 1,
                 sharding: str = "ddp", recompute: str = "none"):
    """``gpucast.predict`` of one plan of ``job``, built here from its fields."""
    par = replace_parallel(job.parallel, tensor=tensor, pipeline=pipeline, sharding=sharding, recompute=recompute,
                           grad_accum=accum)
    return gpucast.predict(job.with_(batch_size=micro, gpus=gpus, parallel=par), gpu)


def predict_option(job: Job, o):
    pl = o.plan
    return predict_plan(job.with_(precision=o.precision), o.gpu, o.gpus, o.batch_size, o.accumulation, pl.tensor,
                        pl.pipeline, pl.sharding, pl.recompute)


@pytest.fixture(scope="module")
def searched():
    progress = []
    a = advise(small(), ["h100"], prices=PRICES, max_gpus=16, samples_per_epoch=6400,
               progress=lambda done, total: progress.append((done, total)))
    return a, progress


# ------------------------------------------------------------------ the 8B model: one GPU does not hold it
def test_an_8b_llama_is_advised_a_plan_that_fits_and_one_gpu_ddp_is_shown_not_to():
    job = Job.from_hf_config(LLAMA_8B, batch_size=1, seq_len=4096, precision="bf16", optimizer="adamw", gpus=8,
                             parallel=dict(sharding="fsdp-full", grad_accum=4))
    a = advise(job, ["h100"], counts=[1, 8, 16], shardings=["ddp", "fsdp-full"], tensors=[1], pipelines=[1],
               samples_per_epoch=3200)  # the packaged cloud-2024 prices (they price the H100)
    assert a.plans and a.prices.name == "cloud-2024"
    best = a.best
    assert best is not None and best.memory_fit == FITS
    assert best.memory_interval[1] <= best.gpu_memory_bytes == get_gpu("h100").memory_bytes
    assert best.gpus >= 8 and best.plan.sharding == "fsdp-full" and best.global_batch == 32
    plain = [o for o in a.options if o.gpus == 1 and o.plan.sharding == "ddp" and o.plan.recompute == "none"]
    assert plain and all(o.memory_fit == NO and o.memory_bytes > o.gpu_memory_bytes for o in plain)
    assert all(o.global_batch == 32 for o in a.options)  # the user's global batch: 1 x 4 x 8
    d = a.to_dict()
    assert d["plans"] is True and d["options"][d["recommended"]]["plan"]["sharding"] == "fsdp-full"
    assert any(o["gpus"] == 1 and o["memory_fit"] == "no" for o in d["options"])


# ------------------------------------------------------------------ what is tried and what each option says
def test_counts_beyond_one_node_and_small_counts_when_one_gpu_holds_the_job(searched):
    a, _ = searched
    assert a.plans
    assert {o.gpus for o in a.options} == {1, 2, 4, 8, 16}  # 1 fits: 2 and 4 are added; 8 and 16 by default
    by_count = {o.gpus: o.plan.nodes for o in a.options}
    assert by_count == {1: 1, 2: 1, 4: 1, 8: 1, 16: 2}
    assert any(o.plan.sharding == "fsdp-hybrid" for o in a.options if o.gpus == 16)
    assert not any(o.plan.sharding == "fsdp-hybrid" for o in a.options if o.gpus <= 8)
    assert len({o.id for o in a.options}) == len(a.options)
    # The small model fits one GPU without recompute: more model parallelism has nothing to buy.
    assert {(o.plan.tensor, o.plan.pipeline) for o in a.options} == {(1, 1)}


def test_every_plan_keeps_the_global_batch_and_is_priced_as_gpus_times_time(searched):
    a, _ = searched
    for o in a.options:
        pl = o.plan
        assert pl.tensor * pl.pipeline * pl.data == o.gpus
        assert o.batch_size * o.accumulation * pl.data == o.global_batch == 64
        assert o.epoch_s == pytest.approx(6400 / 64 * o.step_time_s)
        assert o.cost_per_epoch == pytest.approx(o.epoch_s * o.gpus * 2.5 / 3600)
        assert o.epoch_interval_s[0] <= o.epoch_s <= o.epoch_interval_s[1]
        if pl.data == 1:
            assert pl.sharding == "ddp"  # a lone replica has nothing to shard: tried once


def test_a_plan_option_is_the_prediction_of_that_plan(searched):
    a, _ = searched
    split = advise(small(), ["h100"], prices=PRICES, counts=[16], tensors=[2], pipelines=[2], shardings=["zero1"],
                   recomputes=["selective"], samples_per_epoch=6400)  # tensor 2 x pipeline 2 x data 4
    assert {(o.plan.tensor, o.plan.pipeline, o.plan.data) for o in split.options} == {(2, 2, 4)}
    hybrid = next(o for o in a.options if o.plan.sharding == "fsdp-hybrid")
    for o in (a.best, hybrid, *split.options):
        p = predict_option(small(), o)
        assert p.step_time_s == pytest.approx(o.step_time_s)
        assert p.memory_peak_bytes == o.memory_bytes
        assert p.plan["tokens_per_s_per_gpu"] == pytest.approx(o.plan.tokens_per_s_per_gpu)
        assert p.plan["mfu"] == pytest.approx(o.plan.mfu)
        assert p.plan["global_batch"] == o.global_batch


def test_the_progress_reaches_its_total_and_the_notes_count_the_bounds(searched):
    a, progress = searched
    dones = [d for d, _ in progress]
    assert dones == sorted(dones) and progress[-1][0] == progress[-1][1] > len(a.options)
    counted = next(n for n in a.notes if n.endswith("considered"))
    assert counted == f"{len(a.options)} plans predicted of {progress[-1][1]} considered"
    # A small model fits without recompute, so more recompute is never tried (it is only slower).
    assert {o.plan.recompute for o in a.options} == {"none"}
    assert any(n.endswith("surely fits and is faster at the same price") for n in a.notes)
    assert any("more tensor x pipeline parallelism than fitting needs" in n for n in a.notes)


def test_more_model_parallelism_is_tried_one_level_up_for_lighter_recompute_only():
    job = small(batch_size=8, seq_len=4096, grad_accum=8)  # global batch 512
    a = advise(job, ["l4"], prices=PRICES, counts=[8], batches=[8, 16], shardings=["ddp"], tensors=[1, 2, 4],
               pipelines=[1], samples_per_epoch=5120)
    one = {(o.batch_size, o.plan.recompute): o.memory_fit for o in a.options if o.plan.tensor == 1}
    two = [o for o in a.options if o.plan.tensor == 2]
    assert one[(8, "none")] == RISKY and one[(8, "full")] == FITS  # 8 x 4,096 tokens: just about fit 24 GB
    assert one[(16, "none")] == NO and one[(16, "full")] != NO
    assert two and not any(o.plan.tensor == 4 for o in a.options)  # one level beyond, no more
    safe = {b: min(("none", "selective", "full").index(rc) for (bb, rc), f in one.items() if bb == b and f == FITS)
            for b in (8, 16) if any(bb == b and f == FITS for (bb, rc), f in one.items())}
    for o in two:  # only what tensor 1 could not surely fit: lighter recompute at that micro-batch
        assert ("none", "selective", "full").index(o.plan.recompute) < safe.get(o.batch_size, 3)


# ------------------------------------------------------------------ the bounds are right about memory
def test_plans_left_out_for_memory_do_not_fit_when_predicted():
    job = small(batch_size=8, seq_len=4096, grad_accum=8)  # global batch 8 x 8 x 8 = 512
    a = advise(job, ["l4"], prices=PRICES, counts=[8, 16], batches=[4, 8, 16, 32], shardings=["ddp"], tensors=[1],
               pipelines=[1], recomputes=["none"], samples_per_epoch=5120)
    got = {(o.gpus, o.batch_size): o.memory_fit for o in a.options}
    assert got.get((16, 16)) == NO  # 16 x 4,096 tokens of activations do not fit 24 GB
    left_out = [(n, b) for n in (8, 16) for b in (4, 8, 16, 32) if (n, b) not in got]
    # a larger micro-batch of a plan that does not fit; the same plan on fewer GPUs
    assert set(left_out) == {(16, 32), (8, 16), (8, 32)}
    assert any(n.startswith("2 plans not tried: the same plan with a smaller micro-batch") for n in a.notes)
    assert any(n.startswith("1 plans not tried: the same plan does not fit on more GPUs") for n in a.notes)
    capacity = get_gpu("l4").memory_bytes
    for n, b in left_out:
        assert predict_plan(job, "l4", n, b, 512 // (b * n)).memory_peak_bytes > capacity, (n, b)


def test_impossible_plans_are_skipped_with_their_reason_and_the_run_goes_on():
    job = small(grad_accum=6)  # global batch 2 x 6 x 8 = 96: divisible by 3
    a = advise(job, ["h100"], prices=PRICES, counts=[48], tensors=[3], pipelines=[1], shardings=["zero1"],
               samples_per_epoch=960)
    assert not a.options and a.recommended is None
    assert any(n.startswith("6 plans skipped: field 'parallel.tensor' (3) must divide the 16 attention heads")
               for n in a.notes), a.notes
    b = advise(job, ["h100"], prices=PRICES, counts=[16], tensors=[1], pipelines=[2, 16], shardings=["zero3"],
               recomputes=["none"], samples_per_epoch=960)
    reasons = " | ".join(b.notes)
    assert "zero3 cannot run with pipeline parallelism" in reasons
    assert "more stages than the 8 layers" in reasons
    assert not b.options and "no option fits" in b.message


def test_the_bound_on_predictions_is_kept_and_said():
    a = advise(small(), ["h100"], prices=PRICES, counts=[8, 16], max_plans=3, samples_per_epoch=6400)
    assert len(a.options) == 3
    assert any("over the bound of 3 predictions" in n for n in a.notes)


# ------------------------------------------------------------------ the choice applies to plans unchanged
def test_a_deadline_picks_the_cheapest_plan_that_meets_it_and_a_budget_the_fastest(searched):
    a, _ = searched
    fitting = [o for o in a.options if o.memory_fit != NO]
    runs = sorted(o.run_s for o in fitting)
    deadline = runs[len(runs) // 4]
    d = advise(small(), ["h100"], prices=PRICES, max_gpus=16, samples_per_epoch=6400, deadline_s=deadline)
    ok = [o for o in d.options if o.memory_fit == FITS and o.run_s <= deadline]
    assert d.best.run_s <= deadline and d.best.cost_per_run == min(o.cost_per_run for o in ok)
    assert d.best.gpus > 1  # the cheapest plan (1 GPU) is too slow for this deadline
    budget = sorted(o.cost_per_run for o in fitting)[len(fitting) // 2]
    b = advise(small(), ["h100"], prices=PRICES, max_gpus=16, samples_per_epoch=6400, budget_usd=budget)
    ok = [o for o in b.options if o.memory_fit == FITS and o.cost_per_run <= budget]
    assert b.best.cost_per_run <= budget and b.best.run_s == min(o.run_s for o in ok)


def test_only_each_counts_fastest_fitting_plan_can_be_on_the_front(searched):
    a, _ = searched
    fastest = defaultdict(lambda: float("inf"))
    for o in a.options:
        if o.memory_fit != NO:
            fastest[o.gpus] = min(fastest[o.gpus], o.epoch_s)
    assert a.front
    for o in a.front_options:
        assert o.epoch_s == fastest[o.gpus]


# ------------------------------------------------------------------ bad requests
@pytest.mark.parametrize("kwargs, words", [
    (dict(shardings=["zero9"]), "unknown sharding 'zero9'"),
    (dict(tensors=[0]), "tensor degrees must be integers between 1 and 4096"),
    (dict(pipelines=[2.5]), "pipeline degrees must be integers"),
    (dict(recomputes=["some"]), "unknown recompute 'some'"),
    (dict(counts=[1024]), "GPU count 1024 is above max_gpus 512"),
    (dict(batches=[3]), "micro-batch 3 does not divide the global batch 64"),
    (dict(max_plans=0), "max_plans must be a positive integer"),
    (dict(max_gpus=0), "max_gpus must be an integer between 1 and 4096"),
    (dict(contexts=[0]), "context degrees must be integers"),
    (dict(experts=[-1]), "expert degrees must be integers"),
    (dict(global_batch=0), "the global batch must be a positive integer"),
    (dict(global_batch=64, keep_global_batch=False), "a global batch is kept by definition"),
])
def test_impossible_plan_requests_are_one_error_line(kwargs, words):
    with pytest.raises(AdviseError) as exc:
        advise(small(), ["h100"], prices=PRICES, samples_per_epoch=640, **kwargs)
    assert words in str(exc.value) and "\n" not in str(exc.value)


MOE = dict(model_type="qwen3_moe", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
           num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=32,
           num_experts_per_tok=4, vocab_size=4096)


def test_the_search_takes_context_expert_and_virtual_degrees_and_a_global_batch():
    job = Job.from_hf_config(MOE, batch_size=1, seq_len=2048, precision="bf16", optimizer="adamw", gpus=8,
                             parallel=dict(sharding="zero1", grad_accum=1, framework="megatron"))
    a = advise(job, ["h100"], prices=PRICES, samples_per_epoch=4096, counts=[8, 16], tensors=[1], pipelines=[1, 2],
               contexts=[1, 2], experts=[1, 8], virtual_pipelines=[1, 2], recomputes=["none"], batches=[1],
               global_batch=32, max_plans=200)
    shapes = {(o.gpus, o.plan.pipeline, o.plan.context, o.plan.expert, o.plan.virtual_pipeline) for o in a.options}
    assert any(e == 8 for *_, e, _ in shapes)        # expert parallelism was tried
    for o in a.options:
        pl = o.plan
        # every plan keeps the 32 sequences asked for: micro-batch x accumulation x d, d = gpus / (t p c)
        assert o.batch_size * o.accumulation * (o.gpus // (pl.tensor * pl.pipeline * pl.context)) == 32
        assert pl.virtual_pipeline == 1 or pl.pipeline > 1
        # a plan's numbers are predict's of that plan
        par = dict(tensor=pl.tensor, pipeline=pl.pipeline, sharding=pl.sharding, recompute=pl.recompute,
                   grad_accum=o.accumulation, framework="megatron", context=pl.context, expert=pl.expert,
                   virtual_pipeline=pl.virtual_pipeline)
        p = gpucast.predict(job.with_(gpus=o.gpus, batch_size=o.batch_size, parallel=par), "h100")
        assert o.step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
        shares = pl.shares(o.step_time_s)
        assert shares["EP"] > 0 if pl.expert > 1 else shares["EP"] == 0
    labels = [o.plan.label for o in a.options]
    assert any(" e8" in lb for lb in labels) and not any(" e1" in lb for lb in labels)


def test_plan_options_need_the_plan_search():
    with pytest.raises(AdviseError, match="shardings applies to the plan search"):
        advise("mlp-small", ["t4"], shardings=["ddp"], samples_per_epoch=640)
    a = advise(Job("mlp-small", batch_size=64), ["t4"], plans=True, counts=[1, 2], samples_per_epoch=6400,
               prices=parse([{"gpu": "t4", "usd_per_gpu_hour": 0.35}], "test"))
    assert a.plans and a.options and all(o.plan is not None for o in a.options)
    assert all(o.plan.tensor == 1 and o.plan.pipeline == 1 for o in a.options)  # an MLP has no blocks to split
    assert any("has no repeated blocks" in n for n in a.notes)


# ------------------------------------------------------------------ the command
CMD = [sys.executable, "-m", "gpucast.cli", "advise"]


def _small_cli(tmp_path, *args):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(SMALL))
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  - {gpu: h100, usd_per_gpu_hour: 2.5, provider: mine}\n")
    return subprocess.run([*CMD, "--hf-config", str(cfg), "-b", "2", "--seq-len", "1024", "--precision", "bf16",
                           "--optimizer", "adamw", "--gpus", "8", "--prices", str(prices), "--samples-per-epoch",
                           "6400", *args], capture_output=True, text=True, timeout=600)


def test_advise_plans_prints_plan_columns_and_json(tmp_path):
    r = _small_cli(tmp_path, "--plans", "--counts", "1,8,16", "--tensors", "1,2", "--pipelines", "1", "--batches", "1")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for head in ("t/p/d", "sharding", "recompute", "tok/s/GPU", "MFU %", "GiB/GPU", "nodes", "where the step goes",
                 "TP", "CP", "EP", "PP", "DP", "bubble"):
        assert head in out
    assert "recommended: h100 x" in out and "plans predicted of" in out
    j = _small_cli(tmp_path, "--set", "parallel.sharding=fsdp-full", "--counts", "8,16", "--tensors", "1",
                   "--pipelines", "1", "--batches", "1", "--global-batch", "32768tok",
                   "--json")  # a job with a parallel group: plans without --plans
    assert j.returncode == 0, j.stderr
    d = json.loads(j.stdout)
    assert d["plans"] is True
    best = d["options"][d["recommended"]]
    assert best["memory_fit"] != "no" and best["global_batch"] == 32  # 32,768 tokens of 1,024-token sequences
    assert {o["gpus"] for o in d["options"]} == {8, 16}
    assert {(o["batch_size"], o["accumulation"]) for o in d["options"]} == {(1, 4), (1, 2)}  # 8 x 1 x 4, 16 x 1 x 2
    assert set(best["plan"]) >= {"tensor", "pipeline", "data", "sharding", "recompute", "nodes", "mfu",
                                 "tokens_per_s_per_gpu", "step_breakdown_s"}


@pytest.mark.parametrize("args, words", [
    (["--plans", "--shardings", "zero9"], "unknown sharding 'zero9'"),
    (["--plans", "--tensors", "two"], "--tensors 'two'"),
    (["--shardings", "ddp"], "shardings applies to the plan search"),
    (["--plans", "--max-plans", "0"], "max_plans must be a positive integer"),
    (["--plans", "--global-batch", "1000tok"], "not a whole number of the job's 1024-token sequences"),
    (["--plans", "--global-batch", "many"], "--global-batch 'many'"),
    (["--plans", "--sequence-parallel", "maybe"], "--sequence-parallel 'maybe': give on, off or on,off"),
    (["--sequence-parallel", "on"], "sequence_parallel applies to the plan search"),
])
def test_bad_plan_flags_are_one_error_line_and_exit_2(tmp_path, args, words):
    r = _small_cli(tmp_path, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], r.stderr


def test_an_nvl72_rack_takes_tensor_degrees_beyond_eight_gpus_and_an_hgx_node_does_not():
    # Independent reason: a GB200 NVL72 rack is one NVLink domain of 72 GPUs (the GPU spec's
    # nvlink_domain, NVIDIA's GB200 NVL72 datasheet); an H100 HGX node has 8 behind its NVSwitches.
    prices = parse([{"gpu": "gb200", "usd_per_gpu_hour": 10.5}, {"gpu": "h100", "usd_per_gpu_hour": 2.5}], "test")
    a = advise(small(grad_accum=1), ["gb200", "h100"], prices=prices, samples_per_epoch=6400, counts=[16],
               tensors=[16], pipelines=[1], recomputes=["none"], batches=[2], shardings=["zero1"], global_batch=2)
    assert {(o.gpu, o.plan.tensor) for o in a.options} == {("gb200", 16)}
    (o,) = a.options
    assert o.plan.nodes == 1 and o.plan.gpus_per_node == 72


def test_the_search_tries_sequence_parallelism_on_and_off_where_asked():
    job = small(grad_accum=1, framework="megatron")
    kw = dict(prices=PRICES, samples_per_epoch=6400, counts=[8], pipelines=[1], recomputes=["none"], batches=[2],
              shardings=["zero1"], sequence_parallel=[True, False])
    a = advise(job, ["h100"], tensors=[2], **kw)
    assert {(o.plan.tensor, o.plan.sequence) for o in a.options} == {(2, True), (2, False)}
    one = advise(job, ["h100"], tensors=[1], **kw)     # one tensor rank has no sequence to split: one plan
    assert [(o.plan.tensor, o.plan.sequence) for o in one.options] == [(1, False)]
    for o in a.options:
        par = dict(tensor=o.plan.tensor, pipeline=1, sharding="zero1", recompute="none", grad_accum=o.accumulation,
                   framework="megatron", sequence=o.plan.sequence)
        p = gpucast.predict(job.with_(gpus=8, batch_size=o.batch_size, parallel=par), "h100")
        assert o.step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
    assert any(o.plan.label.endswith(" sp") or " sp" in o.plan.label for o in a.options if o.plan.sequence)
    with pytest.raises(AdviseError, match="sequence parallelism must be true or false"):
        advise(job, ["h100"], prices=PRICES, samples_per_epoch=6400, sequence_parallel=["yes"])


def test_a_moe_model_s_plans_try_expert_parallelism_unasked():
    # MOE has 32 routed experts: the degrees tried unasked are 1 and those of the ladder dividing 32 (8, 16,
    # 32), each where it divides a pipeline stage's GPUs (8 GPUs: 1, 8; 16 GPUs: 1, 8, 16).
    job = Job.from_hf_config(MOE, batch_size=1, seq_len=2048, precision="bf16", optimizer="adamw", gpus=8,
                             parallel=dict(sharding="zero1", grad_accum=1, framework="megatron"))
    a = advise(job, ["h100"], prices=PRICES, samples_per_epoch=4096, counts=[8, 16], tensors=[1], pipelines=[1],
               recomputes=["none"], batches=[1], global_batch=32, max_plans=200)
    assert {(o.gpus, o.plan.expert) for o in a.options} == {(8, 1), (8, 8), (16, 1), (16, 8), (16, 16)}
    dense = advise(small(grad_accum=1), ["h100"], prices=PRICES, samples_per_epoch=6400, counts=[8], tensors=[1],
                   pipelines=[1], recomputes=["none"], batches=[2], shardings=["zero1"])
    assert {o.plan.expert for o in dense.options} == {1}
