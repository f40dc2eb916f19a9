"""Tests for gpucast.hardware: the catalog's published facts, its consistency, and spec files.

The "published facts" below are taken from vendor datasheets/whitepapers independently of the
catalog file, so a typo in ``gpus.yaml`` fails here.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpucast import hardware
from gpucast.hardware import (
    ARCHITECTURES,
    DTYPES,
    GpuSpec,
    UnknownGpuError,
    catalog,
    from_nvml_name,
    get_gpu,
    load_spec_file,
    register_gpu,
)

REQUIRED_NAMES = ["k80", "p100", "v100-16gb", "v100-32gb", "t4", "a10", "l4", "rtx-3090",
                  "rtx-4090", "a100-40gb", "a100-80gb", "h100", "h200"]
MIB = 2**20


def _arch_at_least(spec: GpuSpec, arch: str) -> bool:
    return ARCHITECTURES.index(spec.architecture) >= ARCHITECTURES.index(arch)


@pytest.fixture
def registry(monkeypatch):
    """register_gpu() mutates module state; give every test an empty user registry."""
    monkeypatch.setattr(hardware, "_registered", {})


def _user_spec(**overrides):
    """A minimal valid user spec (a made-up GPU, so no figure here is a published fact)."""
    spec = {
        "name": "synthetic-gpu",
        "architecture": "ampere",
        "compute_capability": "8.6",
        "sm_count": 40,
        "boost_clock_mhz": 1700,
        "fp32_tflops": 20.0,
        "fp16_tflops": 80.0,
        "memory_gib": 24,
        "memory_bandwidth_gbs": 500,
        "l2_mib": 4,
        "tdp_w": 200,
    }
    spec.update(overrides)
    return {k: v for k, v in spec.items() if v is not ...}


def _write(tmp_path, data, suffix=".yaml"):
    path = tmp_path / f"gpu{suffix}"
    path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------- the catalog


def test_catalog_has_the_required_gpus():
    cat = catalog()
    assert len(cat) >= 13
    assert set(REQUIRED_NAMES) <= set(cat)
    for name, spec in cat.items():
        assert spec.name == name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
        assert spec.source and re.search(r"(19|20)\d\d", spec.source), name


def test_catalog_is_loaded_once_and_not_mutable_from_outside():
    first = catalog()
    first.pop("h100")
    assert "h100" in catalog()
    assert catalog()["h100"] is catalog()["h100"]       # parsed once, the same objects


@pytest.mark.parametrize(
    "name, sms, l2_mib, cc",
    [  # published SM counts, L2 sizes and compute capabilities
        ("k80", 13, 1.5, (3, 7)),
        ("p100", 56, 4, (6, 0)),
        ("v100-16gb", 80, 6, (7, 0)),
        ("v100-32gb", 80, 6, (7, 0)),
        ("t4", 40, 4, (7, 5)),
        ("a10", 72, 6, (8, 6)),
        ("l4", 58, 48, (8, 9)),
        ("rtx-3090", 82, 6, (8, 6)),
        ("rtx-4090", 128, 72, (8, 9)),
        ("a100-40gb", 108, 40, (8, 0)),
        ("a100-80gb", 108, 40, (8, 0)),
        ("h100", 132, 50, (9, 0)),
        ("h200", 132, 50, (9, 0)),
    ],
)
def test_published_sm_count_l2_and_compute_capability(name, sms, l2_mib, cc):
    spec = get_gpu(name)
    assert spec.sm_count == sms
    assert spec.l2_bytes == int(l2_mib * MIB)
    assert spec.compute_capability == cc


@pytest.mark.parametrize(
    "name, bandwidth_gbs, fp16_tensor_dense",
    [  # datasheet DRAM bandwidth and dense FP16 tensor (FP32 accumulate) TFLOPS
        ("v100-16gb", 900, 125),
        ("t4", 320, 65),
        ("a100-40gb", 1555, 312),
        ("a100-80gb", 2039, 312),
        ("h100", 3350, 989.4),
        ("h200", 4800, 989.4),
        ("rtx-4090", 1008, 165.2),
    ],
)
def test_published_bandwidth_and_dense_tensor_rate(name, bandwidth_gbs, fp16_tensor_dense):
    spec = get_gpu(name)
    assert spec.memory_bandwidth_gbs == pytest.approx(bandwidth_gbs)
    assert spec.fp16_tflops == pytest.approx(fp16_tensor_dense)


def test_fp32_rate_matches_cores_times_clock():
    # FP32 peak = SMs x FP32 lanes/SM x 2 (FMA) x boost clock; lanes/SM by architecture.
    lanes = {"kepler": 192, "pascal": 64, "volta": 64, "turing": 64, "ampere": None,
             "ada": 128, "hopper": 128, "blackwell": 128}
    for spec in catalog().values():
        per_sm = lanes[spec.architecture]
        if spec.architecture == "ampere":  # GA100 has 64 FP32 lanes/SM, GA10x 128
            per_sm = 64 if spec.compute_capability == (8, 0) else 128
        # the K80's rates are at its default application clock, 562 MHz (gpus.yaml says why)
        clock = 562 if spec.name == "k80" else spec.boost_clock_mhz
        expected = spec.sm_count * per_sm * 2 * clock * 1e6 / 1e12
        assert spec.fp32_tflops == pytest.approx(expected, rel=0.03), spec.name


def test_tensor_rates_are_dense_and_ordered():
    for spec in catalog().values():
        if _arch_at_least(spec, "volta"):
            assert spec.has_tensor_cores
            assert spec.fp16_tflops >= 1.95 * spec.fp32_tflops, spec.name  # 3090: 71 vs 35.6
            assert spec.fp16_tflops >= spec.fp16_vector_tflops, spec.name
        else:
            assert not spec.has_tensor_cores
            assert spec.fp16_tflops == spec.fp16_vector_tflops, spec.name
        if spec.tf32_tflops is not None:  # TF32 is half the FP16 tensor rate (B200: 2.2 of 4.5 PF, rounded)
            assert spec.tf32_tflops == pytest.approx(spec.fp16_tflops / 2, rel=0.025), spec.name
        if spec.fp8_tflops is not None:  # FP8 twice the FP16 tensor rate, FP4 twice FP8 (GeForce: four times)
            # (L40S: 733 against 2 x 362.05, as its datasheet prints them)
            assert spec.fp8_tflops == pytest.approx(2 * spec.fp16_tflops, rel=0.015), spec.name
        if spec.fp4_tflops is not None:
            # Blackwell Ultra (sm 10.3): NVFP4 1.5x Blackwell's, 3x its FP8 ("Inside NVIDIA Blackwell Ultra", 2025)
            ultra = spec.compute_capability == (10, 3)
            assert spec.fp4_tflops in ((pytest.approx(3 * spec.fp8_tflops),) if ultra else
                                       (pytest.approx(2 * spec.fp8_tflops), pytest.approx(4 * spec.fp8_tflops))), \
                spec.name
        if spec.bf16_tflops is not None:  # BF16 runs at the FP16 tensor rate
            assert spec.bf16_tflops == spec.fp16_tflops, spec.name


def test_a100_and_h100_sparse_figures_are_not_used():
    # NVIDIA's headline "with sparsity" numbers are 2x these; a dense catalog must not hold them.
    assert get_gpu("a100-80gb").fp16_tflops < 624
    assert get_gpu("h100").fp16_tflops < 1979


def test_todays_gpus_are_in_the_catalog():
    cat = catalog()
    for name in ("b200", "gb200", "gh200", "l40s", "rtx-5090", "h100-pcie", "h100-nvl"):
        assert name in cat, name
    # FP8 from Ada/Hopper on, FP4 only on Blackwell; NVLink 5 on the data-center Blackwell parts
    for spec in cat.values():
        assert (spec.fp8_tflops is not None) == (_arch_at_least(spec, "ada") and spec.name not in ("a10",)), spec.name
        assert (spec.fp4_tflops is not None) == (spec.architecture == "blackwell"), spec.name
    assert cat["b200"].nvlink_generation == cat["gb200"].nvlink_generation == 5 and cat["b200"].nvlink_gbs == 1800
    assert cat["b200"].memory_bandwidth_gbs > cat["h200"].memory_bandwidth_gbs > cat["h100"].memory_bandwidth_gbs
    assert from_nvml_name("NVIDIA B200").name == "b200" and from_nvml_name("NVIDIA L40S").name == "l40s"


def test_bf16_and_tf32_exist_exactly_from_ampere():
    for spec in catalog().values():
        ampere_plus = _arch_at_least(spec, "ampere")
        assert spec.supports_bf16 == ampere_plus, spec.name
        assert (spec.tf32_tflops is not None) == ampere_plus, spec.name


def test_vector_fp16_rate_by_architecture():
    # 1x FP32 on Kepler (no FP16 math), GA10x and Ada; 2x on P100/V100/T4/H100; 4x on A100.
    ratio = {"k80": 1, "p100": 2, "v100-16gb": 2, "t4": 2, "a10": 1, "l4": 1, "rtx-3090": 1,
             "rtx-4090": 1, "a100-80gb": 4, "h100": 2}
    for name, r in ratio.items():
        spec = get_gpu(name)
        assert spec.fp16_vector_tflops == pytest.approx(r * spec.fp32_tflops, rel=0.02), name


@pytest.mark.parametrize("name, gb", [("v100-16gb", 16), ("v100-32gb", 32),
                                      ("a100-40gb", 40), ("a100-80gb", 80)])
def test_memory_matches_the_size_in_the_name(name, gb):
    assert get_gpu(name).memory_gib == pytest.approx(gb, rel=0.05)


def test_memory_is_what_nvml_reports():
    assert get_gpu("h100").memory_bytes == 81559 * MIB
    assert get_gpu("h200").memory_bytes == 143771 * MIB
    assert get_gpu("t4").memory_bytes == 15360 * MIB  # 16 GB minus the ECC reservation
    assert get_gpu("k80").memory_gib == pytest.approx(12, rel=0.1)  # one GK210: half the board


def test_generation_orderings():
    cat = catalog()
    assert cat["h200"].memory_bandwidth_gbs > cat["h100"].memory_bandwidth_gbs
    assert cat["h200"].memory_bytes > cat["h100"].memory_bytes
    assert cat["a100-80gb"].memory_bandwidth_gbs > cat["a100-40gb"].memory_bandwidth_gbs
    assert cat["h200"].peak_tflops("bf16", True) == cat["h100"].peak_tflops("bf16", True)
    assert (cat["k80"].fp32_tflops < cat["p100"].fp32_tflops < cat["v100-16gb"].fp32_tflops)
    assert cat["h100"].nvlink_gbs > cat["a100-80gb"].nvlink_gbs > cat["v100-32gb"].nvlink_gbs
    assert cat["t4"].nvlink_gbs == cat["l4"].nvlink_gbs == 0


def test_nvml_names_are_unique_across_the_catalog():
    seen = {}
    for spec in catalog().values():
        assert spec.nvml_names, spec.name
        for n in spec.nvml_names:
            assert n not in seen, f"{n!r} in both {seen.get(n)} and {spec.name}"
            seen[n] = spec.name


# ---------------------------------------------------------------- peak_tflops


@given(name=st.sampled_from(REQUIRED_NAMES), dtype=st.sampled_from(DTYPES))
def test_peak_tflops_positive_and_monotone_in_tensor_cores(name, dtype):
    spec = catalog()[name]
    off, on = spec.peak_tflops(dtype, tensor_cores=False), spec.peak_tflops(dtype, True)
    assert 0 < off <= on
    # nothing beats the FP16 tensor rate but the narrower formats (FP8 twice it, FP4 twice FP8)
    assert on <= spec.fp16_tflops * {"fp8": 2, "fp4": 4}.get(dtype, 1) * 1.01  # datasheets round
    assert spec.peak_tflops("fp32", True) == spec.fp32_tflops  # fp32 never uses tensor cores


def test_fp8_and_fp4_peaks_and_their_fallbacks():
    h100, a100, l4 = get_gpu("h100"), get_gpu("a100-40gb"), get_gpu("l4")
    assert h100.peak_tflops("fp8") == h100.fp8_tflops == pytest.approx(2 * h100.fp16_tflops, rel=0.01)
    assert h100.peak_tflops("fp4") == h100.fp8_tflops                 # no FP4 on Hopper: the FP8 rate
    assert a100.peak_tflops("fp8") == a100.peak_tflops("fp4") == a100.fp16_tflops  # no FP8 on Ampere
    assert h100.peak_tflops("fp8", tensor_cores=False) == h100.fp16_vector_tflops
    assert l4.peak_tflops("fp8") == l4.fp8_tflops
    assert get_gpu("h100:1g.10gb").fp8_tflops == pytest.approx(h100.fp8_tflops * 16 / 132)  # a slice's share


@pytest.mark.parametrize("field, value, arch, needle", [
    ("fp8_tflops", 100.0, "ampere", "null on ampere"),
    ("fp4_tflops", 100.0, "hopper", "null on hopper"),
    ("fp8_tflops", -1.0, "hopper", "a positive number or null"),
    ("nvlink_generation", 7, "hopper", "one of 1, 2, 3, 4, 5 or null"),
    ("nvlink_domain", 144, "hopper", "an integer between 1 and 72"),
    ("nic_gbit", 0, "hopper", "a positive number of Gbit/s"),
])
def test_fp8_fp4_and_nvlink_generation_are_checked(tmp_path, field, value, arch, needle):
    spec = get_gpu("h100" if arch == "hopper" else "a100-40gb").to_dict()
    spec.update(name="mine", nvml_names=[], **{field: value})
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=needle):
        load_spec_file(path)


def test_peak_tflops_fallbacks():
    v100, a100, k80 = get_gpu("v100-16gb"), get_gpu("a100-40gb"), get_gpu("k80")
    assert v100.peak_tflops("tf32", True) == v100.fp32_tflops   # no TF32 on Volta
    assert v100.peak_tflops("bf16", True) == v100.fp32_tflops   # no BF16 on Volta
    assert v100.peak_tflops("fp16", False) == pytest.approx(31.4)
    assert a100.peak_tflops("tf32", True) == pytest.approx(156)
    assert a100.peak_tflops("tf32", False) == a100.fp32_tflops
    assert a100.peak_tflops("bf16", False) == a100.fp32_tflops
    assert k80.peak_tflops("fp16", True) == k80.fp32_tflops     # no tensor cores, no FP16 math
    with pytest.raises(ValueError, match="dtype"):
        a100.peak_tflops("int8")


def test_to_dict_round_trips(tmp_path):
    for spec in catalog().values():
        d = spec.to_dict()
        assert json.loads(json.dumps(d)) == d
        assert load_spec_file(_write(tmp_path, d, ".json")) == spec


# ---------------------------------------------------------------- user spec files


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_load_user_spec_file(tmp_path, suffix):
    spec = load_spec_file(_write(tmp_path, _user_spec(), suffix))
    assert spec.name == "synthetic-gpu"
    assert spec.compute_capability == (8, 6)
    assert spec.memory_bytes == 24 * 2**30 and spec.memory_gib == 24
    assert spec.l2_bytes == 4 * MIB
    # documented defaults
    assert spec.display_name == "synthetic-gpu"
    assert spec.tf32_tflops is None and spec.bf16_tflops is None and not spec.supports_bf16
    assert spec.fp16_vector_tflops == spec.fp32_tflops
    assert spec.host_link_gbs == 15.75
    assert spec.nvlink_gbs == 0
    assert spec.nvml_names == ()
    assert spec.source


def test_memory_may_be_given_in_bytes_mib_or_gib(tmp_path):
    by = {"memory_bytes": 16 * 2**30, "memory_mib": 16384, "memory_gib": 16}
    specs = [load_spec_file(_write(tmp_path, _user_spec(**{"memory_gib": ..., k: v})))
             for k, v in by.items()]
    assert len({s.memory_bytes for s in specs}) == 1


def test_get_gpu_on_a_path(tmp_path):
    path = _write(tmp_path, _user_spec(name="my-card"))
    assert get_gpu(path).name == "my-card"          # a Path
    assert get_gpu(str(path)).name == "my-card"     # a string path
    assert "my-card" not in catalog()               # loading is not registering


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"sm_count": -3}, "sm_count"),
        ({"sm_count": 40.5}, "sm_count"),
        ({"name": "My GPU"}, "name"),
        ({"architecture": "fermi"}, "architecture"),
        ({"compute_capability": "eight"}, "compute_capability"),
        ({"compute_capability": "9.0"}, "compute_capability"),   # 9.x is not ampere
        ({"boost_clock_mhz": 0}, "boost_clock_mhz"),
        ({"fp32_tflops": "fast"}, "fp32_tflops"),
        ({"fp16_tflops": -1}, "fp16_tflops"),
        ({"fp16_vector_tflops": 500}, "fp16_vector_tflops"),     # above the tensor rate
        ({"tf32_tflops": 0}, "tf32_tflops"),
        ({"bf16_tflops": True}, "bf16_tflops"),
        ({"memory_gib": -24}, "memory_gib"),
        ({"memory_bandwidth_gbs": float("nan")}, "memory_bandwidth_gbs"),
        ({"l2_mib": 0}, "l2_mib"),
        ({"host_link_gbs": 0}, "host_link_gbs"),
        ({"nvlink_gbs": -1}, "nvlink_gbs"),
        ({"tdp_w": None}, "tdp_w"),
        ({"nvml_names": "NVIDIA X"}, "nvml_names"),
        ({"display_name": ""}, "display_name"),
        ({"source": 3}, "source"),
        ({"architecture": "volta", "compute_capability": "7.0", "bf16_tflops": 40},
         "bf16_tflops"),
    ],
)
def test_each_bad_field_is_named(tmp_path, overrides, field):
    path = _write(tmp_path, _user_spec(**overrides), ".json")
    with pytest.raises(ValueError) as err:
        load_spec_file(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"gpu spec {str(path)!r}: field {field!r} must be ")
    assert ", got " in msg


def test_the_message_the_brief_promised(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(_user_spec(sm_count=-3)))
    with pytest.raises(ValueError) as err:
        load_spec_file(path)
    assert str(err.value) == (f"gpu spec {str(path)!r}: field 'sm_count' must be a positive "
                              "integer, got -3")


def test_unknown_field_is_rejected_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"unknown field 'sm_cout' \(did you mean 'sm_count'"):
        load_spec_file(_write(tmp_path, _user_spec(sm_cout=40)))


def test_missing_required_fields_are_named(tmp_path):
    with pytest.raises(ValueError) as err:
        load_spec_file(_write(tmp_path, _user_spec(sm_count=..., memory_gib=...)))
    msg = str(err.value)
    assert "missing required fields 'sm_count', 'memory_bytes'" in msg
    assert "memory_gib" in msg and "\n" not in msg


def test_memory_given_twice_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="'memory_bytes' given twice"):
        load_spec_file(_write(tmp_path, _user_spec(memory_mib=24576)))


def test_bad_files(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    with pytest.raises(ValueError, match="not valid yaml"):
        load_spec_file(bad_yaml)
    listed = _write(tmp_path, [_user_spec()])
    with pytest.raises(ValueError, match="must be a mapping"):
        load_spec_file(listed)
    with pytest.raises(ValueError, match=r"\.yaml, \.yml or \.json"):
        load_spec_file(tmp_path / "gpu.toml")
    with pytest.raises(FileNotFoundError):
        load_spec_file(tmp_path / "absent.yaml")


def test_direct_construction_is_validated():
    d = get_gpu("a100-80gb").to_dict()
    d["sm_count"] = 0
    with pytest.raises(ValueError, match="gpu spec 'a100-80gb': field 'sm_count'"):
        GpuSpec(**d)


def test_spec_is_frozen_and_hashable():
    spec = get_gpu("h100")
    with pytest.raises(AttributeError):
        spec.sm_count = 1  # type: ignore[misc]
    assert {spec: 1}[get_gpu("h100")] == 1


# ---------------------------------------------------------------- lookup and registration


def test_get_gpu_by_name_and_spec():
    h100 = get_gpu("h100")
    assert get_gpu(h100) is h100
    assert get_gpu("H100") is h100
    assert get_gpu("a100_80gb") is get_gpu("a100-80gb")
    assert get_gpu("NVIDIA H100 80GB HBM3") is h100      # an NVML name works too


def test_unknown_name_lists_close_matches():
    with pytest.raises(KeyError) as err:
        get_gpu("a100-80")
    assert isinstance(err.value, UnknownGpuError)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("unknown GPU 'a100-80'")
    assert "a100-80gb" in msg.split("(known")[0]          # offered as a close match
    with pytest.raises(TypeError):
        get_gpu(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "nvml_name, name",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("Tesla V100-SXM2-16GB", "v100-16gb"),
        ("Tesla V100-SXM2-32GB", "v100-32gb"),
        ("Tesla T4", "t4"),
        ("Tesla K80", "k80"),
        ("Tesla P100-PCIE-16GB", "p100"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA GH200 480GB", "gh200"),
        (b"NVIDIA A10", "a10"),                         # old pynvml returns bytes
        ("  nvidia h100 80gb hbm3 ", "h100"),
    ],
)
def test_from_nvml_name(nvml_name, name):
    assert from_nvml_name(nvml_name).name == name


@pytest.mark.parametrize("nvml_name", ["NVIDIA H100 SXM5 64GB", "NVIDIA A10G", "NVIDIA A100 80GB PCIe",
                                       "Tesla P100-SXM2-16GB", "NVIDIA H200 NVL", ""])
def test_from_nvml_name_other_variants_are_not_guessed(nvml_name):
    assert from_nvml_name(nvml_name) is None


def test_register_gpu(tmp_path, registry):
    spec = load_spec_file(_write(tmp_path, _user_spec(nvml_names=["Synthetic GPU X"])))
    assert register_gpu(spec) is spec
    assert catalog()["synthetic-gpu"] is spec
    assert get_gpu("synthetic-gpu") is spec
    assert from_nvml_name("Synthetic GPU X") is spec
    assert register_gpu(spec) is spec                      # identical: a no-op
    faster = GpuSpec(**{**spec.to_dict(), "fp32_tflops": 25.0})
    with pytest.raises(ValueError, match="already a registered GPU"):
        register_gpu(faster)
    assert register_gpu(faster, replace=True) is faster
    assert get_gpu("synthetic-gpu") is faster


def test_register_gpu_from_a_path(tmp_path, registry):
    spec = register_gpu(_write(tmp_path, _user_spec(name="from-file")))
    assert get_gpu("from-file") is spec


def test_register_gpu_refuses_to_overwrite_a_builtin(registry):
    h100 = get_gpu("h100")
    capped = GpuSpec(**{**h100.to_dict(), "tdp_w": 500.0})
    with pytest.raises(ValueError, match="'h100' is already a built-in GPU; pass replace=True"):
        register_gpu(capped)
    assert get_gpu("h100") is h100
    assert register_gpu(capped, replace=True) is capped
    assert get_gpu("h100") is capped
    assert from_nvml_name("NVIDIA H100 80GB HBM3") is capped


def test_register_gpu_refuses_a_taken_nvml_name(registry):
    twin = GpuSpec(**{**get_gpu("h100").to_dict(), "name": "h100-twin"})
    with pytest.raises(ValueError, match="NVML name .* already belongs to 'h100'"):
        register_gpu(twin)


def test_the_nvl72_racks_and_blackwell_ultra_nics_set_a_plan_s_defaults():
    # GB200/GB300 NVL72: one NVLink domain of 72 GPUs; B300/GB300 systems: a ConnectX-8 800 Gbit/s NIC per GPU.
    from gpucast.plan import Parallel

    assert get_gpu("gb200").nvlink_domain == get_gpu("gb300").nvlink_domain == 72
    assert Parallel().resolved(get_gpu("gb300")).gpus_per_node == 72
    assert Parallel().resolved(get_gpu("b300")).network == "ib-800/gpu"
    assert Parallel().resolved(get_gpu("h100")).network == "ib-400/gpu"
    assert Parallel(gpus_per_node=4, network="roce-800").resolved(get_gpu("gb300")).gpus_per_node == 4
