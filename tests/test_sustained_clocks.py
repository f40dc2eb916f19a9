"""The clock a power-capped card sustains: GpuSpec.sustained_clock_mhz, clock_factor, and its use.

What is checked is what the design implies, not numbers the code printed: the factor never
credits a card with more than its datasheet peak, the 70-72 W cards (T4, L4) get less than 1,
a card without the field gets exactly 1; the kernel-time model divides compute time (and only
compute time) by the factor, so a compute-bound job is slower by about the factor and a
memory-bound op not at all; user spec files take the field and refuse a bad value with one line.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml

from gpucast import Job
from gpucast.api import explain
from gpucast.estimate.constants import DEFAULT
from gpucast.estimate.kernels import math_peak
from gpucast.hardware import DTYPES, GpuSpec, catalog, get_gpu, load_spec_file


def _unclocked(spec: GpuSpec) -> GpuSpec:
    """The same card without a sustained clock: the datasheet peaks, as before the field existed."""
    return dataclasses.replace(spec, sustained_clock_mhz=None)


def _user_spec(**overrides):
    """A minimal valid user spec (a made-up GPU, so no figure here is a published fact)."""
    spec = {"name": "synthetic-gpu", "architecture": "ampere", "compute_capability": "8.6",
            "sm_count": 40, "boost_clock_mhz": 1700, "fp32_tflops": 20.0, "fp16_tflops": 80.0,
            "memory_gib": 24, "memory_bandwidth_gbs": 500, "l2_mib": 4, "tdp_w": 200}
    spec.update(overrides)
    return spec


def _write(tmp_path, data, suffix):
    path = tmp_path / f"gpu{suffix}"
    path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------- the catalog


@pytest.mark.parametrize("name", sorted(catalog()))
def test_clock_factor_never_credits_more_than_the_datasheet_peak(name):
    spec = catalog()[name]
    assert 0 < spec.clock_factor <= 1 and 0 < spec.tensor_clock_factor <= 1
    for dtype in DTYPES:
        for tc in (True, False):
            tensor = tc and spec.has_tensor_cores and dtype != "fp32"
            factor = spec.tensor_clock_factor if tensor else spec.clock_factor
            assert spec.sustained_tflops(dtype, tc) == pytest.approx(spec.peak_tflops(dtype, tc) * factor)
            assert spec.sustained_tflops(dtype, tc) <= spec.peak_tflops(dtype, tc)


def test_hopper_tensor_peaks_scale_from_the_clock_they_are_quoted_at():
    # 989.4 TFLOPS = 132 SMs x 4,096 FLOP/clk x 1.83 GHz: the tensor peaks are at 1,830 MHz, the
    # FP32 peak (66.9 = 132 x 256 x 1.98 GHz) at the 1,980 MHz boost
    h100 = get_gpu("h100")
    assert h100.peak_tflops("bf16") == pytest.approx(132 * 4096 * h100.tensor_clock_mhz * 1e6 / 1e12, rel=1e-3)
    assert h100.peak_tflops("fp32", False) == pytest.approx(132 * 256 * h100.boost_clock_mhz * 1e6 / 1e12, rel=1e-2)
    assert h100.tensor_clock_factor == pytest.approx(h100.sustained_clock_mhz / 1830)
    # SIMT math draws less than power-saturated tensor GEMMs: the FP32 pipes keep the boost clock
    assert h100.simt_clock_mhz == h100.boost_clock_mhz and h100.clock_factor == 1.0
    assert dataclasses.replace(h100, simt_clock_mhz=None).clock_factor == pytest.approx(h100.sustained_clock_mhz / 1980)
    # held under its 700 W limit, an H100 does not reach the tensor peak's clock
    assert h100.tensor_clock_factor < 1


def test_the_h200_simt_clock_is_what_its_fp32_training_steps_held():
    """The catalog's SIMT clock against the NVML clock of every FP32 solo run measured on an H200 whose
    matmuls ran on the FP32 pipes (GPT-2, Llama, ViT, Transformer) in data/measurements: the runs held
    the boost clock below the power limit, so the SIMT factor must be 1 there, not the tensor one."""
    from pathlib import Path

    from gpucast.profile.suite_store import read_rows

    rows = [r for r in read_rows([Path(__file__).resolve().parents[1] / "data" / "measurements"])
            if r["kind"] == "solo" and r["status"] == "ok" and r["precision"] == "fp32"
            and r["model"].split("-")[0] in ("gpt2", "llama", "vit", "transformer") and r["util_mean_pct"] > 90]
    assert len(rows) >= 5
    h200 = get_gpu("h200")
    for r in rows:
        assert r["sm_clock_mean_mhz"] >= 0.97 * h200.simt_clock_mhz and r["power_mean_w"] < h200.tdp_w


def test_the_power_capped_cards_do_not_hold_their_boost_clock():
    for name in ("t4", "l4"):
        spec = get_gpu(name)
        assert spec.tdp_w <= 75
        assert spec.sustained_clock_mhz is not None and spec.clock_factor < 1
        assert spec.clock_factor == pytest.approx(spec.sustained_clock_mhz / spec.boost_clock_mhz)


def test_a_card_without_the_field_keeps_its_datasheet_peaks():
    for name in ("a10", "gh200"):
        spec = get_gpu(name)
        assert spec.sustained_clock_mhz is None
        assert spec.clock_factor == 1.0
        assert spec.sustained_tflops("bf16") == spec.peak_tflops("bf16")
    # rtx-3090 is the GPU the environment is fitted to (Lucid): it must stay at factor 1
    assert get_gpu("rtx-3090").clock_factor == 1.0
    # a clock above boost is not credited (GeForce cards boost past their rated clock)
    fast = dataclasses.replace(get_gpu("a100-80gb"), sustained_clock_mhz=1800.0)
    assert fast.clock_factor == 1.0


def test_the_k80_is_left_alone():
    # its peaks are at the 562 MHz application clock, not boost_clock_mhz (875): a sustained
    # clock compared with boost would be wrong, so the catalog sets none
    assert get_gpu("k80").sustained_clock_mhz is None


# ---------------------------------------------------------------- the kernel-time model


def test_math_peak_uses_the_sustained_rate_for_every_kind_of_math():
    t4 = get_gpu("t4")
    plain = _unclocked(t4)
    for category in ("matmul", "conv", "elementwise"):
        for dtype in ("float32", "float16"):
            for precision in ("fp32", "amp-fp16"):
                got = math_peak(t4, category, dtype, precision, DEFAULT)
                want = math_peak(plain, category, dtype, precision, DEFAULT) * t4.clock_factor
                assert got == pytest.approx(want, rel=1e-12)


@pytest.fixture(scope="module")
def vgg_on_t4():
    """VGG-16, batch 64, FP32 on a T4: dense convolutions, compute-bound."""
    job = Job("vgg16", batch_size=64, precision="fp32")
    t4 = get_gpu("t4")
    return t4, explain(job, t4), explain(job, _unclocked(t4))


def test_a_compute_bound_job_is_slower_by_about_the_clock_factor(vgg_on_t4):
    t4, capped, plain = vgg_on_t4
    assert plain.prediction.bottleneck == "compute-bound"
    ratio = capped.prediction.gpu_busy_s / plain.prediction.gpu_busy_s
    # compute-bound ops take 1/factor longer (less their fixed ramp); the few memory- or
    # latency-bound ops do not, so the job lands a little under 1/factor
    assert 0.9 / t4.clock_factor < ratio <= 1 / t4.clock_factor
    assert capped.prediction.step_time_s > plain.prediction.step_time_s


def test_only_the_compute_term_is_scaled(vgg_on_t4):
    t4, capped, plain = vgg_on_t4
    kc, kp = capped.estimate.kernel_times, plain.estimate.kernel_times
    ramp = DEFAULT.compute_ramp_s
    math = kp.compute > 0
    assert math.any()
    # compute: F / (peak * factor * e * phi) + ramp; phi (gpucast.estimate.tiles) may rise a little
    # at the lower clock (a split-K reduction's bytes weigh less beside slower math), never fall
    slow, fast = kc.compute[math] - ramp, (kp.compute[math] - ramp) / t4.clock_factor
    assert np.all(slow <= fast * (1 + 1e-9)) and np.all(slow >= 0.9 * fast)
    np.testing.assert_allclose(np.median(slow / fast), 1.0, rtol=1e-6)
    # bandwidth is not power-capped: memory time and the launch floor are the same
    np.testing.assert_array_equal(kc.memory, kp.memory)
    np.testing.assert_array_equal(kc.floor, kp.floor)
    # the biggest GEMM/convolution: slower by about the factor
    big = int(np.argmax(np.where(math, kp.compute, 0.0)))
    assert kc.time[big] / kp.time[big] == pytest.approx(1 / t4.clock_factor, rel=0.02)
    # an op that stays memory-bound at the sustained clock: its time does not change
    mem_bound = (kc.memory > kc.compute) & (kc.memory > kc.floor)
    assert mem_bound.any()
    np.testing.assert_array_equal(kc.time[mem_bound], kp.time[mem_bound])


# ---------------------------------------------------------------- user spec files


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_user_spec_file_takes_the_sustained_clock(tmp_path, suffix):
    spec = load_spec_file(_write(tmp_path, _user_spec(sustained_clock_mhz=850), suffix))
    assert spec.sustained_clock_mhz == 850.0 and isinstance(spec.sustained_clock_mhz, float)
    assert spec.clock_factor == pytest.approx(850 / 1700)
    assert spec.sustained_tflops("fp16") == pytest.approx(40.0)
    # and round-trips through to_dict
    assert load_spec_file(_write(tmp_path, spec.to_dict(), ".json")) == spec


def test_a_user_spec_file_without_it_holds_boost(tmp_path):
    spec = load_spec_file(_write(tmp_path, _user_spec(), ".yaml"))
    assert spec.sustained_clock_mhz is None and spec.clock_factor == 1.0


@pytest.mark.parametrize("bad", [-600, 0, "900 MHz", True, float("nan")])
def test_a_bad_sustained_clock_is_refused_with_one_line(tmp_path, bad):
    path = _write(tmp_path, _user_spec(sustained_clock_mhz=bad), ".yaml")
    with pytest.raises(ValueError) as e:
        load_spec_file(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert "'sustained_clock_mhz'" in msg and "positive number" in msg and str(path) in msg


def test_direct_construction_is_validated_too():
    with pytest.raises(ValueError, match="sustained_clock_mhz"):
        dataclasses.replace(get_gpu("t4"), sustained_clock_mhz=-1.0)
