"""achieved.yaml's constants know where they came from (gpucast.estimate.achieved_sources), a GPU of
another generation takes its own architecture's figures, and FP32 GEMMs run on the CUDA cores at
their architecture's SGEMM share (gpucast.estimate.achieved.matmul_family)."""

from __future__ import annotations

import copy

import pytest

from gpucast.estimate import achieved
from gpucast.estimate.achieved_sources import applied, problems
from gpucast.hardware import catalog, get_gpu

HOPPER = ("h100", "h200", "gh200")


def test_every_entry_names_its_provenance_and_no_gpu_takes_another_generations_fit():
    assert problems() == []


def test_every_entry_of_the_file_has_measured_on_gpus_or_derived():
    from gpucast.estimate.achieved_sources import _entries

    entries = list(_entries())
    assert len(entries) > 30
    for where, _, e in entries:
        assert any(e.get(k) for k in ("measured_on", "gpus", "derived")), where
        assert e.get("source"), where


@pytest.fixture
def table_with_a_hopper_fit_in_reference(monkeypatch):
    """The packaged table with one of our H200 measurements put in the reference row, as
    conv_depthwise was before (synthetic: a test of the check, not a constant)."""
    t = copy.deepcopy(achieved._table())
    t["reference"]["conv_depthwise"] = dict(t["architectures"]["hopper"]["conv_depthwise"])
    monkeypatch.setattr(achieved, "_table", lambda: t)
    return t


def test_a_hopper_measurement_in_the_reference_row_is_refused(table_with_a_hopper_fit_in_reference):
    found = problems()
    assert any(p.startswith("reference.conv_depthwise:") for p in found), found
    assert any(p.startswith("a100-40gb (ampere) takes conv_depthwise from reference") for p in found), found
    assert not any(p.startswith("h200 ") for p in found)


def test_unless_the_entry_says_why_it_holds_elsewhere(table_with_a_hopper_fit_in_reference):
    table_with_a_hopper_fit_in_reference["reference"]["conv_depthwise"]["architecture_independent"] = "a reason"
    assert problems() == []


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb", "v100-16gb", "t4", "l4", "rtx-3090", "a10", "k80"])
def test_no_gpu_of_another_generation_takes_a_constant_measured_on_our_h200(name):
    gpu = get_gpu(name)
    for row in applied(gpu):
        if "h200" in row.measured_on:
            assert row.derived or row.architecture_independent, (name, row)
    # its depthwise convolutions and reductions: the architecture-level model, not the H200's fit
    rows = {r.family: r for r in applied(gpu)}
    assert rows["conv_depthwise"].level != "hopper" and rows["conv_depthwise"].derived
    assert rows["batchnorm"].value is None and rows["layernorm"].value is None


def test_hopper_gpus_keep_their_constants():
    # every family but FP32 GEMMs (new) at the values Hopper had before provenance was recorded
    before = {"matmul": 0.84, "matmul_fp8": 0.72, "conv": 0.48, "conv_depthwise": 0.027,
              "conv_depthwise_backward": 0.018, "rnn": 0.45, "other": 0.50}
    for att, fwd, bwd in (("flash2", 0.36, 0.28), ("flash3", 0.61, 0.48), ("cudnn", 0.61, 0.49)):
        f = achieved.fractions("hopper", att, "9.0")
        assert {k: f[k] for k in before} == before
        assert (f["attention"], f["attention_backward"]) == (fwd, bwd)
    caps = achieved.bandwidth_caps("hopper", "9.0")
    # batchnorm_bf16 refitted at a block per channel (gate revision 33: 2.5 over all SMs -> 4.3 over min(SMs, C))
    assert caps == {k: v * 1e9 for k, v in {"batchnorm": 6.8, "batchnorm_bf16": 4.3, "layernorm": 17.3,
                                            "softmax": 17.0, "transpose": 16.6,
                                            "transpose_fp32": 33.2}.items()}
    for name in HOPPER:
        rows = {r.family: r for r in applied(get_gpu(name))}
        assert rows["matmul_fp32"].level == "hopper" and rows["matmul_fp32"].measured_on == ("h200",)


def test_the_levels_a_gpu_reads():
    assert achieved.fractions("ampere", None, "8.6")["matmul_fp32"] < achieved.fractions("ampere", None, "8.0")[
        "matmul_fp32"]
    assert achieved.fractions("ampere", None, "8.6")["matmul"] == achieved.fractions("ampere")["matmul"]
    assert [n for n, _ in achieved.levels("ampere", "8.6")] == ["sm 8.6", "reference"]
    assert [n for n, _ in achieved.levels("hopper", "9.0")] == ["hopper", "reference"]
    assert achieved.capability_key((8, 6)) == "8.6" and achieved.capability_key(None) is None


def test_every_catalog_gpu_has_a_row_per_family():
    from gpucast.surroundings import ATTENTION_KERNELS

    # attention and its backward once per kernel (FAMILIES counts each once)
    n = len(achieved.FAMILIES) + 2 * (len(ATTENTION_KERNELS) - 1) + len(achieved.MEMORY_FAMILIES)
    for gpu in catalog().values():
        rows = applied(gpu)
        assert len(rows) == n
        assert all(r.value is None or 0 < r.value for r in rows)
        assert all(r.value is None or r.unit != "of peak" or r.value <= 1 for r in rows)


# --- FP32 GEMMs on the CUDA cores


def _mm_seconds(gpu, precision="fp32", stack=None, n=8192):
    from gpucast.estimate.constants import DEFAULT
    from gpucast.estimate.kernels import kernel_times
    from gpucast.graph.trace import MemoryReport, OpRecord, Trace

    rec = OpRecord(0, "fwd", "mm", "matmul", ((n, n), (n, n)), ((n, n),), "float32", 2 * n ** 3, 8 * n * n,
                   4 * n * n, 1)
    tr = Trace("t", "t", "infer", precision, 1, [rec], MemoryReport(0, 0, 0, "fwd", {}, {}), 0, 0, 0)
    return float(kernel_times(tr, get_gpu(gpu), precision, DEFAULT, stack).compute[0])


def test_an_fp32_matmul_runs_at_each_generations_fp32_peak_and_sgemm_share():
    from gpucast.estimate.constants import DEFAULT
    from gpucast.estimate.kernels import math_peak

    a100, h100 = get_gpu("a100-40gb"), get_gpu("h100")
    # the FP32 vector peaks at the SIMT clock: both hold their boost clock under SGEMM
    assert math_peak(a100, "matmul", "float32", "fp32", DEFAULT, "matmul_fp32") == pytest.approx(19.5e12)
    assert math_peak(h100, "matmul", "float32", "fp32", DEFAULT, "matmul_fp32") == pytest.approx(66.9e12)
    fa = achieved.fractions("ampere", None, "8.0")["matmul_fp32"]
    fh = achieved.fractions("hopper", None, "9.0")["matmul_fp32"]
    assert 0.9 <= fa <= 1.0 and 0.7 <= fh <= 0.85  # 16 vs 32 FP32 lanes per scheduler
    # a large GEMM (a full grid on both): time in inverse proportion to peak x share
    ratio = _mm_seconds("a100-40gb") / _mm_seconds("h100")
    assert ratio == pytest.approx((66.9 * fh) / (19.5 * fa), rel=0.06)


def test_tf32_is_the_jobs_choice_or_its_releases_default():
    from gpucast.surroundings import Stack

    fp32, tf32 = _mm_seconds("a100-40gb"), _mm_seconds("a100-40gb", "tf32")
    assert fp32 > 5 * tf32  # 156 TF32 tensor TFLOPS against 19.5 FP32
    # PyTorch 1.7-1.11 ran float32 matmuls in TF32 by default; 1.12 turned it off (cuDNN keeps it)
    assert _mm_seconds("a100-40gb", stack=Stack(torch="1.10")) == pytest.approx(tf32)
    assert _mm_seconds("a100-40gb", stack=Stack(torch="1.12")) == pytest.approx(fp32)
    assert _mm_seconds("a100-40gb", stack=Stack(torch="2.4")) == pytest.approx(fp32)
    # a GPU without TF32 runs SGEMM whatever the release
    assert _mm_seconds("v100-16gb", stack=Stack(torch="1.10")) == pytest.approx(_mm_seconds("v100-16gb"))
    assert achieved.matmul_family("matmul", "float32", False) == "matmul_fp32"
    assert achieved.matmul_family("matmul", "float32", True) == "matmul"
    assert achieved.matmul_family("matmul", "bfloat16", False) == "matmul"


def test_a_network_s_first_layer_is_the_stem_family_and_other_convolutions_are_not():
    from gpucast.estimate.achieved import family_of

    stem = ((32, 3, 224, 224), (64, 3, 7, 7))
    assert family_of("conv", "convolution", "float32", stem) == "conv_stem"
    grad = ((32, 64, 112, 112), (32, 3, 224, 224), (64, 3, 7, 7))
    assert family_of("conv", "convolution_backward", "float32", grad) == "conv_stem_backward"
    assert family_of("conv", "convolution", "float32", ((32, 64, 56, 56), (64, 64, 3, 3))) == "conv"
    # a grouped layer of 3 channels per group, a transposed layer out to an image: not a stem
    assert family_of("conv", "convolution", "float32", ((32, 96, 56, 56), (96, 3, 3, 3))) == "conv"
    assert family_of("conv", "convolution", "float32", ((32, 64, 32, 32), (64, 3, 4, 4))) == "conv"


def test_the_triton_kernel_runs_between_flash_attention_2_over_2_5_and_over_1_3():
    # FlashAttention-2 is 1.3-2.5x faster than the Triton FlashAttention on an A100 (Dao 2023, section 4.1)
    f = achieved.fractions("ampere", "triton")
    fa2 = achieved.fractions("ampere", "flash2")
    for fam in ("attention", "attention_backward"):
        assert fa2[fam] / 2.5 <= f[fam] <= fa2[fam] / 1.3
    assert {k: v for k, v in f.items() if not k.startswith("attention")} == {
        k: v for k, v in fa2.items() if not k.startswith("attention")}


# --- FP4 GEMMs (block-scaled, Blackwell)


def test_fp4_gemms_have_their_own_share_where_published_and_fp8s_elsewhere():
    assert achieved.family_of("matmul", "mm", "float4_e2m1fn_x2") == "matmul_fp4"
    assert achieved.family_of("matmul", "mm", "float8_e4m3fn") == "matmul_fp8"
    b200 = achieved.fractions("blackwell", None, "10.0")
    assert b200["matmul_fp4"] < b200["matmul_fp8"]
    # GPUs whose levels list no FP4 share take FP8's (Hopper has no FP4 tensor cores)
    hopper = achieved.fractions("hopper", None, "9.0")
    assert hopper["matmul_fp4"] == hopper["matmul_fp8"]
    # SM120's block-scaled MMAs are not sm100's kernels: their own entry
    assert achieved.lookup("matmul_fp4", "blackwell", "12.0")[0] == "sm 12.0"


def test_a_b200_runs_gemms_at_the_rate_ratios_published_between_formats():
    # vLLM's B200 GEMM benchmarks at M=16,384 on Llama-3.1-8B's N=6144 K=4096 against torch BF16 in the
    # same runs: CUTLASS FP8 1.62-1.68x (vllm-project/vllm PR #19566), NVFP4 2.67-2.87x at M=4,096-16,384
    # (PR #20646), where the datasheet peaks are 2x and 4x apart: each within 5 % of the range's middle
    from gpucast.estimate.constants import DEFAULT
    from gpucast.estimate.kernels import math_peak

    b200 = get_gpu("b200")
    f = achieved.fractions("blackwell", None, "10.0")

    def rate(dtype, precision, family):
        return math_peak(b200, "matmul", dtype, precision, DEFAULT, family) * f[family]

    bf16 = rate("bfloat16", "bf16", "matmul")
    assert rate("float8_e4m3fn", "fp8", "matmul_fp8") / bf16 == pytest.approx(1.65, rel=0.05)
    assert rate("float4_e2m1fn_x2", "nvfp4", "matmul_fp4") / bf16 == pytest.approx(2.77, rel=0.05)
