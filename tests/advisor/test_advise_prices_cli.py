"""Price tables (packaged and the user's) and the `gpucast advise` command: output, errors, report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpucast.advisor.prices import PriceError, load, packaged
from gpucast.hardware import catalog

CMD = [sys.executable, "-m", "gpucast.cli"]


def run(*args, cwd=None):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_packaged_tables_name_catalog_gpus_with_sources_and_dates():
    assert {"cloud-2024", "gavel-2020"} <= set(packaged())
    for name in packaged():
        t = load(name)
        assert t.prices and t.currency == "USD"
        for p in t.prices:
            assert p.gpu in catalog() and p.usd_per_gpu_hour > 0
            assert p.source and p.as_of and p.provider
    gavel = load("gavel-2020")
    assert {p.gpu: p.usd_per_gpu_hour for p in gavel.prices} == {"k80": 0.45, "p100": 1.46, "v100-16gb": 2.48}


def test_the_2026_table_prices_the_gpus_2026_clusters_run():
    t = load("cloud-2026")
    assert {"h100", "h200", "b200", "gb200", "gh200", "l40s"} <= {p.gpu for p in t.prices}
    assert all(p.as_of.startswith("2026") for p in t.prices)
    # an instance price over its GPUs, where the offer names both
    p5 = next(p for p in t.offers("h100", "aws"))
    assert p5.usd_per_gpu_hour == pytest.approx(55.04 / 8)


def test_the_cheapest_offer_is_used_unless_a_provider_is_chosen():
    t = load("cloud-2024")
    t4 = t.offers("t4")
    assert len(t4) >= 2
    assert t.price("t4").usd_per_gpu_hour == min(p.usd_per_gpu_hour for p in t4)
    assert t.price("t4", "aws").provider == "aws"
    assert t.price("h200") is None


@pytest.mark.parametrize("text, words", [
    ("prices:\n  - {gpu: a1000, usd_per_gpu_hour: 1}\n", "entry 1: unknown GPU 'a1000' (did you mean a10?)"),
    ("prices:\n  - {gpu: t4, usd_per_gpu_hour: cheap}\n", "usd_per_gpu_hour must be a non-negative number"),
    ("prices:\n  - {gpu: t4, usd_per_gpu_hour: -1}\n", "usd_per_gpu_hour must be a non-negative number"),
    ("prices:\n  - {gpu: t4, usd_per_gpu_hour: 1, colour: red}\n", "unknown field 'colour'"),
    ("prices: []\n", "needs a non-empty list 'prices'"),
    ("gpu: t4\n", "needs a non-empty list 'prices'"),
    ("currency: EUR\nprices:\n  - {gpu: t4, usd_per_gpu_hour: 1}\n", "only USD prices"),
    ("prices: [ {gpu: t4\n", "is not YAML/JSON"),
])
def test_a_bad_price_file_is_one_error_line_naming_it(tmp_path, text, words):
    f = tmp_path / "mine.yaml"
    f.write_text(text)
    with pytest.raises(PriceError) as exc:
        load(f)
    msg = str(exc.value)
    assert words in msg and "mine.yaml" in msg and "\n" not in msg


def test_missing_price_file_and_unknown_table():
    with pytest.raises(PriceError, match="cannot read prices file"):
        load("/nonexistent/prices.yaml")
    with pytest.raises(PriceError, match="unknown price table 'cloud-1999'"):
        load("cloud-1999")


def test_a_user_spec_gpu_can_be_priced(tmp_path):
    t = tmp_path / "p.yaml"
    t.write_text("prices:\n  - {gpu: my-gpu, usd_per_gpu_hour: 0.5}\n")
    assert load(t, known_gpus=["my-gpu"]).price("my-gpu").usd_per_gpu_hour == 0.5


# ------------------------------------------------------------------ the command
def test_advise_prints_the_front_the_recommendation_and_writes_the_report(tmp_path):
    report = tmp_path / "advice.html"
    r = run("advise", "resnet18-cifar", "-b", "64", "--gpu", "t4,a10", "-g", "a100-80gb", "--epochs", "30",
            "--deadline", "2h", "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert "recommended:" in r.stdout and "cloud-2024" in r.stdout
    assert report.is_file() and "plotly" in report.read_text() and "Pareto front" in report.read_text()
    j = run("advise", "resnet18-cifar", "-b", "64", "--gpu", "t4,a10,a100-80gb", "--epochs", "30",
            "--deadline", "2h", "--json")
    assert j.returncode == 0, j.stderr
    d = json.loads(j.stdout)
    best = d["options"][d["recommended"]]
    assert best["id"] == d["recommended_id"]
    assert f"recommended: {best['id']}" in " ".join(r.stdout.split())
    assert best["run_s"] <= 2 * 3600 and best["memory_fit"] != "no"
    assert all(d["options"][i]["on_front"] for i in d["front"])
    assert {o["gpu"] for o in d["options"]} == {"t4", "a10", "a100-80gb"}


def test_advise_with_a_price_file_of_ones_own(tmp_path):
    f = tmp_path / "onprem.yaml"
    f.write_text("name: onprem\nprices:\n  - {gpu: rtx-3090, usd_per_gpu_hour: 0.2, provider: on-prem, "
                 "offer: amortized}\n  - {gpu: a100-80gb, usd_per_gpu_hour: 1.5, provider: on-prem}\n")
    r = run("advise", "resnet18-cifar", "--prices", str(f), "--counts", "1", "--precisions", "fp32", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["prices"]["name"] == "onprem"
    assert {o["gpu"] for o in d["options"]} == {"rtx-3090", "a100-80gb"}
    assert any("not priced" in n for n in d["notes"])


@pytest.mark.parametrize("args, words", [
    (["--prices", "{bad}.yaml"], "cannot read prices file"),
    (["--gpu", "a1000"], "a1000"),
    (["--gpu", "rtx-3090"], "no price for GPU 'rtx-3090'"),
    (["--deadline", "soon"], "--deadline 'soon'"),
    (["--deadline", "0h"], "positive duration"),
    (["--budget", "-3"], "positive amount"),
    (["--counts", "1,two"], "--counts '1,two'"),
    (["--counts", "16"], "one node"),
    (["--precisions", "fp4"], "unknown precision"),
    (["--keep-global-batch", "--batches", "48"], "does not divide"),
])
def test_bad_advise_input_is_one_error_line_exit_2_and_writes_nothing(tmp_path, args, words):
    report = tmp_path / "r.html"
    r = run("advise", "resnet18-cifar", "-b", "64", *args, "--report", str(report))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], r.stderr
    assert not report.exists()


def test_a_price_file_naming_an_unknown_gpu_fails_before_any_capture(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("prices:\n  - {gpu: v100, usd_per_gpu_hour: 2}\n")
    r = run("advise", "resnet18-cifar", "--prices", str(f))
    assert r.returncode == 2 and "unknown GPU 'v100'" in r.stderr
    assert "did you mean" in r.stderr


def test_an_svg_report_is_a_static_plot_of_the_front(tmp_path):
    import xml.etree.ElementTree as ET

    out = tmp_path / "front.svg"
    r = run("advise", "resnet18-cifar", "-b", "64", "--gpu", "t4,a10", "--counts", "1,2", "--report", str(out),
            "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    root = ET.parse(out).getroot()
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert d["recommended_id"] in titles  # the star carries the recommended option's name
    fitting = [o for o in d["options"] if o["memory_fit"] != "no"]
    circles = list(root.iter("{http://www.w3.org/2000/svg}circle"))
    assert len([c for c in circles if c.find("{http://www.w3.org/2000/svg}title") is not None]) == len(fitting)
