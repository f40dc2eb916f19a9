"""`gpucast gpus --constants`: per GPU, the achieved-efficiency constants it takes and their sources."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpucast.cli import app
from gpucast.hardware import catalog


def _run(*args):
    return CliRunner().invoke(app, ["gpus", *args])


def test_the_a100_40gbs_constants_and_where_they_came_from():
    r = _run("--constants", "--gpu", "a100-40gb", "--json")
    assert r.exit_code == 0, r.output
    (got,) = json.loads(r.stdout)
    assert got["gpu"] == "a100-40gb" and got["architecture"] == "ampere" and got["compute_capability"] == [8, 0]
    rows = {c["family"]: c for c in got["constants"]}
    sgemm = rows["matmul_fp32"]
    assert sgemm["level"] == "reference" and sgemm["value"] == 0.93
    assert "a100-80gb" in sgemm["gpus"] and "published on" in sgemm["origin"]
    # no constant of our H200 reaches it as it is: depthwise convolutions are derived, reductions uncapped
    assert rows["conv_depthwise"]["derived"] and rows["conv_depthwise"]["value"] == 0.054
    assert rows["batchnorm"]["value"] is None and rows["batchnorm"]["level"] == "-"
    assert all("h200" not in c["measured_on"] for c in got["constants"])


def test_the_h200s_constants_name_our_measurements_and_stack():
    r = _run("--constants", "--gpu", "h200", "--json")
    rows = {c["family"]: c for c in json.loads(r.stdout)[0]["constants"]}
    assert rows["matmul_fp32"]["level"] == "hopper" and rows["matmul_fp32"]["measured_on"] == ["h200"]
    assert "2.11.0+cu130" in rows["attention (cudnn)"]["stack"]
    assert rows["batchnorm"]["value"] == 6.8 and rows["batchnorm"]["unit"] == "GB/s per SM"


def test_a_table_per_gpu_and_the_whole_catalog_in_json():
    r = _run("--constants", "--gpu", "a100-40gb")
    assert r.exit_code == 0, r.output
    assert "a100-40gb (ampere" in r.stdout and "matmul_fp32" in r.stdout and "reference" in r.stdout
    r = _run("--constants", "--json")
    assert r.exit_code == 0
    assert {g["gpu"] for g in json.loads(r.stdout)} == set(catalog())
    r = _run("--constants", "--gpu", "a100-40gb:1g.5gb", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["architecture"] == "ampere"


def test_bad_input_is_one_error_line_and_exit_2():
    for args in (["--constants", "--gpu", "no-such-gpu"], ["--constants", "--mig"], ["--gpu", "no-such-gpu"]):
        r = _run(*args)
        assert r.exit_code == 2, (args, r.output)
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), (args, r.output)
