"""MIG slices as GPUs (gpucast.mig): the profile catalog against NVIDIA's MIG User Guide, the
slice's figures, names and their errors, and the predictions on slices of real zoo models.

The expected profile tables are typed from the guide's "Supported MIG Profiles" page (fractions
of SMs and memory, instance counts; profile names of the 80GB/141GB parts by their memory) and
from ``nvidia-smi mig -lgip`` transcripts (SMs, memory), not read back from gpucast's data file.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import yaml
from typer.testing import CliRunner

import gpucast
from gpucast import Job, mig
from gpucast.cli import app
from gpucast.hardware import UnknownGpuError, from_nvml_name, get_gpu, load_spec_file

# Every GPU's guide table has the same six rows: (compute fraction, memory fraction, instances)
# of 1g (one memory slice), 1g (two), 2g, 3g, 4g and 7g; only the profiles' memory sizes differ.
SHAPE = [("1/7", "1/8", 7), ("1/7", "2/8", 4), ("2/7", "2/8", 3), ("3/7", "4/8", 2), ("4/7", "4/8", 1), ("7/7", "8/8", 1)]


def _rows(*names):
    return [(name, *row) for name, row in zip(names, SHAPE, strict=True)]


# (profile, compute fraction, memory fraction, instances) per GPU: the MIG User Guide.
GUIDE = {
    "a100-40gb": _rows("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "a100-80gb": _rows("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "h100": _rows("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "h200": _rows("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "h100-pcie": _rows("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "h100-nvl": _rows("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "gh200": _rows("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "b200": _rows("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    "gb200": _rows("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
}
# nvidia-smi mig -lgip: (SMs, GiB) per profile.
LGIP = {"a100-40gb:1g.5gb": (14, 4.75), "a100-40gb:2g.10gb": (28, 9.75), "a100-40gb:3g.20gb": (42, 19.62),
        "a100-40gb:7g.40gb": (98, 39.50), "h200:1g.18gb": (16, 16.00), "h200:2g.35gb": (32, 32.50),
        "h200:7g.141gb": (132, 140.00), "h100-pcie:7g.80gb": (114, 79.25), "gh200:1g.24gb": (26, 23.00),
        "gh200:3g.48gb": (60, 46.50), "h100-nvl:7g.94gb": (132, 93.12)}


def test_the_profile_catalog_is_the_mig_user_guides():
    assert sorted(mig.capable()) == sorted(GUIDE)
    for gpu, rows in GUIDE.items():
        got = [(p.name, Fraction(p.compute_slices, p.of_compute), Fraction(p.memory_slices, p.of_memory), p.instances)
               for p in mig.profiles(gpu)]
        assert got == [(n, Fraction(c), Fraction(m), k) for n, c, m, k in rows], gpu


@pytest.mark.parametrize("name", sorted(LGIP))
def test_quoted_slices_have_nvidia_smis_sms_and_memory(name):
    s = get_gpu(name)
    assert (s.sm_count, round(s.memory_gib, 2)) == LGIP[name]


@pytest.mark.parametrize("gpu", sorted(GUIDE))
def test_a_slice_has_its_share_of_the_gpu(gpu):
    whole = get_gpu(gpu)
    for p in mig.profiles(gpu):
        s = get_gpu(p.full_name)
        mem_share = p.memory_slices / p.of_memory
        assert s.name == f"{gpu}:{p.name}" and s.architecture == whole.architecture
        assert s.memory_bandwidth_gbs == pytest.approx(whole.memory_bandwidth_gbs * mem_share)
        assert s.l2_bytes == pytest.approx(whole.l2_bytes * mem_share, abs=1)
        assert s.memory_bytes <= whole.memory_bytes * mem_share + 1     # quoted figures lie below the fraction
        assert s.memory_bytes >= 0.9 * whole.memory_bytes * mem_share
        assert s.bf16_tflops / whole.bf16_tflops == pytest.approx(s.sm_count / whole.sm_count)
        assert s.sm_count <= whole.sm_count and s.nvlink_gbs == 0.0
        # A100: the guide's fraction of SMs at most (14 SMs a slice, 98 of 108 for 7g). Hopper and
        # Blackwell drivers give some profiles more than their fraction (H100/GH200 1g with two
        # memory slices 26 SMs, 3g 60 of 132; B200 1g.45gb 30 of 148): the LGIP cases check those.
        if whole.architecture == "ampere":
            assert s.sm_count <= whole.sm_count * p.compute_slices / p.of_compute + 1e-9 or p.compute_slices == 7


def test_names_are_read_as_users_and_nvidia_smi_write_them():
    assert get_gpu("A100-40GB:1G.5GB").name == "a100-40gb:1g.5gb"
    assert get_gpu("a100_80gb:mig-1g.10gb+me").name == "a100-80gb:1g.10gb"
    assert get_gpu("NVIDIA H200:2g.35gb").name == "h200:2g.35gb"              # the whole GPU by its NVML name
    assert from_nvml_name("NVIDIA A100-SXM4-40GB MIG 3g.20gb").name == "a100-40gb:3g.20gb"
    assert from_nvml_name("NVIDIA A100-SXM4-40GB MIG 9g.90gb") is None


@pytest.mark.parametrize("name, words", [
    ("a100-40gb:1g.6gb", "a100-40gb has no MIG profile '1g.6gb'; did you mean a100-40gb:1g.5gb?"),
    ("h100:2g.10gb", "did you mean h100:2g.20gb?"),
    ("t4:1g.5gb", "'t4' has no MIG profiles (MIG GPUs: "),
    ("a100-4gb:1g.5gb", "unknown GPU 'a100-4gb'; did you mean a100-40gb"),
])
def test_a_bad_slice_name_is_one_line_naming_what_exists(name, words):
    with pytest.raises(UnknownGpuError) as e:
        get_gpu(name)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_cli_says_a_bad_slice_in_one_line_with_exit_2():
    r = CliRunner().invoke(app, ["predict", "mlp-small", "-b", "8", "--gpu", "a100-40gb:1g.6gb"])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "did you mean a100-40gb:1g.5gb?" in lines[0]


def test_a_spec_file_cannot_take_a_slice_name(tmp_path):
    d = get_gpu("t4").to_dict() | {"name": "t4:1g.5gb"}
    f = tmp_path / "x.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ValueError, match="GPU:PROFILE names a MIG slice"):
        load_spec_file(f)


def test_a_calibrated_factor_of_the_whole_gpu_applies_to_its_slices():
    from gpucast.estimate.environment import Environment

    env = Environment.default().replace(gpu_kernel_factors=(("a100-40gb", 1.25), ("h200:1g.18gb", 0.5)))
    assert env.kernel_factor("a100-40gb:2g.10gb") == env.kernel_factor("a100-40gb")
    assert env.kernel_factor("h200:1g.18gb") == env.kernel_time_factor * 0.5
    assert env.kernel_factor("h200:2g.35gb") == env.kernel_time_factor


def _below(a: mig.MigProfile, b: mig.MigProfile) -> bool:
    return a.compute_slices <= b.compute_slices and a.memory_slices <= b.memory_slices


@pytest.mark.parametrize("job", [Job("resnet18", batch_size=32), Job("gpt2", batch_size=4, seq_len=256, precision="amp-bf16")],
                         ids=["resnet18", "gpt2"])
@pytest.mark.parametrize("gpu", ["a100-40gb", "h200"])
def test_a_slices_speed_is_monotone_and_bounded_by_its_shares(job, gpu):
    """Relative to the whole GPU, a slice runs at most as fast (1) and at least as fast as its
    smaller share of SMs and memory bandwidth allows; a slice with at least the compute and the
    memory slices of another is at least as fast."""
    whole = gpucast.predict(job, gpu=gpu)
    speed = {}
    for p in mig.profiles(gpu):
        s = get_gpu(p.full_name)
        pred = gpucast.predict(job, gpu=p.full_name)
        speed[p.name] = whole.step_time_s / pred.step_time_s
        floor = min(s.sm_count / get_gpu(gpu).sm_count, p.memory_slices / p.of_memory)
        assert floor * (1 - 1e-9) <= speed[p.name] <= 1 + 1e-9, (p.name, speed[p.name], floor)
    for a in mig.profiles(gpu):
        for b in mig.profiles(gpu):
            if _below(a, b):
                assert speed[a.name] <= speed[b.name] + 1e-9, (a.name, b.name)
    assert speed[mig.profiles(gpu)[0].name] < 1.0 or job.model == "resnet18"


def test_a_job_too_large_for_a_slice_does_not_fit_there_with_one_note():
    p = gpucast.predict(Job("resnet50", batch_size=64), gpu="a100-40gb:1g.5gb")
    assert not p.fits_in_memory
    assert [n for n in p.notes if "out-of-memory" in n] == [
        f"needs {p.memory_peak_bytes / 2**30:.1f} GiB, more than the 4.8 GiB of a a100-40gb:1g.5gb: "
        "the job would fail with out-of-memory"]
    assert gpucast.predict(Job("resnet50", batch_size=64), gpu="a100-40gb:2g.10gb").fits_in_memory


def test_gpus_mig_lists_every_profile_with_its_kubernetes_resource():
    r = CliRunner().invoke(app, ["gpus", "--mig", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["name"] for x in rows] == [f"{g}:{n}" for g, ps in GUIDE.items() for n, *_ in ps]
    assert {x["resource"] for x in rows if x["name"].startswith("a100-40gb:")} == {
        "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb",
        "nvidia.com/mig-4g.20gb", "nvidia.com/mig-7g.40gb"}


def test_advise_tries_a_slice_as_one_gpu_priced_at_its_share():
    from gpucast.advisor import advise, prices

    table = prices.parse([{"gpu": "a100-80gb", "usd_per_gpu_hour": 7.0},
                          {"gpu": "a100-80gb:2g.20gb", "usd_per_gpu_hour": 1.5}], "test")
    assert table.price("a100-80gb:1g.10gb").usd_per_gpu_hour == pytest.approx(1.0)     # 1/7 of 7.0
    assert table.price("a100-80gb:2g.20gb").usd_per_gpu_hour == 1.5                     # its own entry
    assert table.price("h100:1g.10gb") is None                                         # no whole-GPU price
    a = advise(Job("resnet18", batch_size=32), ["a100-80gb:1g.10gb", "a100-80gb"], prices=table, epochs=1,
               samples_per_epoch=10_000, counts=[1, 2], batches=[32], precisions=["amp-bf16"])
    on_slice = [o for o in a.options if o.gpu == "a100-80gb:1g.10gb"]
    assert on_slice and {o.gpus for o in on_slice} == {1} and all(o.share in (None, 1.0) for o in on_slice)
    assert {o.gpus for o in a.options if o.gpu == "a100-80gb"} == {1, 2}
    assert any("MIG slices are tried as one GPU each" in n for n in a.notes)


def test_the_simulator_runs_a_cluster_of_slices():
    import gpucast.cluster as cl
    from gpucast.cluster.spec import ClusterSpec

    tr = cl.load_trace("gavel", limit=12)
    res = cl.simulate(tr, ClusterSpec.homogeneous("a100-80gb:3g.40gb", 8), "gpucast", seed=0)
    assert res.gpu_types == {"a100-80gb:3g.40gb": 8}
    assert sum(1 for r in res.records if r.finish_s is not None) == 12
