"""Precision ``fp8``: Transformer Engine's recipe at capture (gpucast.graph.fp8) and its cost.

What the recipe implies, checked on a real transformers Llama traced on the meta device: the linear
layers' GEMMs become FP8 GEMMs with the same FLOPs (flop_counter's ``_scaled_mm`` formula against its
``mm``), the head stays bf16, each FP8 GEMM's operands are cast first, the saved linear inputs take
1 byte instead of 2, and an FP8 GEMM on an H100 runs at the FP8 peak (faster than bf16) while a GPU
without FP8 tensor cores costs it at the fp16 rate and says so.
"""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.advisor.search import runs
from gpucast.api import trace
from gpucast.hardware import get_gpu

CONFIG = dict(model_type="llama", hidden_size=512, intermediate_size=2048, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=8, vocab_size=32000)


def _job(precision, mode="train"):
    return Job.from_hf_config(CONFIG, batch_size=2, seq_len=512, precision=precision, mode=mode)


@pytest.fixture(scope="module")
def traces():
    return trace(_job("amp-bf16")), trace(_job("fp8"))


def test_the_linear_layers_run_fp8_gemms_with_the_same_flops(traces):
    bf16, fp8 = traces
    gemm = lambda t: sum(o.flops for o in t.ops if o.category == "matmul")  # noqa: E731
    assert gemm(fp8) == gemm(bf16)
    scaled = [o for o in fp8.ops if o.op == "_scaled_mm"]
    # 2 layers x 7 linears (q, k, v, o, gate, up, down): one GEMM forward, two backward
    assert sum(o.phase == "fwd" for o in scaled) == 14 and sum(o.phase == "bwd" for o in scaled) == 28
    assert {o.dtype for o in scaled if o.phase == "fwd"} == {"float8_e4m3fn"}
    assert {o.dtype for o in scaled if o.phase == "bwd"} == {"float8_e5m2"}


def test_the_head_stays_in_bf16(traces):
    _, fp8 = traces
    head = [o for o in fp8.ops if o.op == "mm" and 32000 in (o.out_shapes[0] if o.out_shapes else ())]
    assert head and all(o.dtype == "bfloat16" for o in head)


def test_each_fp8_gemm_casts_its_operands(traces):
    _, fp8 = traces
    casts = [o for o in fp8.ops if o.op == "_to_copy" and o.dtype.startswith("float8")]
    # forward: input and weight per layer; backward: the output gradient per layer
    assert len([o for o in casts if o.phase == "fwd"]) == 2 * 14
    assert len([o for o in casts if o.phase == "bwd"]) == 14


def test_saved_linear_inputs_take_one_byte(traces):
    bf16, fp8 = traces
    assert fp8.memory.at_backward_start["activations"] < bf16.memory.at_backward_start["activations"]


BIG = dict(CONFIG, hidden_size=2048, intermediate_size=8192, num_attention_heads=16, num_key_value_heads=16)


def test_fp8_runs_faster_where_the_gpu_has_fp8_tensor_cores_and_the_gemms_are_large():
    def busy(config, precision):
        job = Job.from_hf_config(config, batch_size=4, seq_len=2048, precision=precision)
        return gpucast.predict(job, "h100").gpu_busy_s

    assert busy(BIG, "fp8") < 0.95 * busy(BIG, "amp-bf16")
    # small GEMMs: the casts and transposes cost more than the faster GEMMs save (why TE's FP8 pays
    # off on large models only)
    assert busy(CONFIG, "fp8") > busy(CONFIG, "amp-bf16")
    job_fp8 = _job("fp8")
    h100_fp8 = gpucast.predict(job_fp8, "h100")
    a100 = gpucast.predict(job_fp8, "a100-80gb")
    assert any("no FP8 tensor cores" in n for n in a100.notes)
    assert not any("no FP8 tensor cores" in n for n in h100_fp8.notes)


def test_an_fp8_gemm_is_costed_at_the_fp8_peak():
    e = gpucast.explain(_job("fp8", mode="infer"), "h100")
    ops = list(zip(e.trace.ops, e.estimate.kernel_times.compute))
    fp8 = max((t for o, t in ops if o.op == "_scaled_mm"), default=0)
    assert fp8 > 0
    h100 = get_gpu("h100")
    assert h100.sustained_tflops("fp8") == pytest.approx(2 * h100.sustained_tflops("bf16"), rel=1e-3)


def test_the_advisor_offers_fp8_only_where_it_runs():
    assert runs(get_gpu("h100"), "fp8") and runs(get_gpu("l40s"), "fp8") and runs(get_gpu("b200"), "fp8")
    assert not runs(get_gpu("a100-80gb"), "fp8") and not runs(get_gpu("v100-16gb"), "fp8")


def test_current_scaling_reads_each_cast_tensor_once_more():
    # Float8CurrentScaling reduces a tensor's amax before casting it: one amax reduction per cast,
    # reading the tensor the cast reads; delayed and blockwise scale inside the cast kernel
    def casts(recipe):
        j = _job("fp8").with_(stack={"fp8_recipe": recipe})
        return trace(j)

    delayed, current, blockwise = casts("delayed"), casts("current"), casts("blockwise")
    fp8_casts = [o for o in current.ops if o.op == "_to_copy" and o.dtype.startswith("float8")]
    amaxes = [o for o in current.ops if o.op == "amax"]
    assert len(amaxes) == len(fp8_casts) > 0
    assert sorted(o.bytes_read for o in amaxes) == sorted(o.bytes_read for o in fp8_casts)
    assert not any(o.op == "amax" for o in delayed.ops + blockwise.ops)
    assert len(delayed.ops) == len(blockwise.ops)
    slow, fast = (gpucast.predict(_job("fp8").with_(stack={"fp8_recipe": r}), "h100").step_time_s
                  for r in ("current", "delayed"))
    assert slow > fast


def test_a_scaling_recipe_needs_precision_fp8():
    from gpucast.job import JobError

    with pytest.raises(JobError, match="stack.fp8_recipe' applies to precision fp8"):
        gpucast.predict(_job("bf16").with_(stack={"fp8_recipe": "current"}), "h100")


def test_a_model_that_adds_into_an_fp8_linear_s_output_in_place_captures():
    # Llama-4's MoE adds the routed experts' output into its shared expert's in place; the FP8 linear's
    # output must not be a view made inside its autograd Function (PyTorch refuses that in-place add).
    cfg = dict(model_type="llama4_text", hidden_size=256, intermediate_size=512, intermediate_size_mlp=512,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=64, vocab_size=1024,
               num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=1)
    job = Job.from_hf_config(cfg, batch_size=1, seq_len=256, precision="fp8", optimizer="adamw")
    t = trace(job)
    assert any(o.op == "_scaled_mm" and o.phase == "fwd" for o in t.ops)
    assert any(o.op == "_scaled_mm" and o.phase == "bwd" for o in t.ops)
