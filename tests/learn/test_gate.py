"""The accuracy gate (gpucast.learn.gate, benchmarks/accuracy_gate.py): its figures on hand-made
records, its comparison's bands, and the gate itself failing when one constant is changed in a copy
of the package (a real run of the script on a real measured set)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucast.learn import gate

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "accuracy_gate.py"


def test_the_floor_predicts_every_row_at_the_median_measurement():
    meas = [1.0, 2.0, 3.0, 4.0, 100.0]
    recs = [{"gpu": "h200", "time": (9.9, m), "util": (0, 10 * m if m < 50 else 90), "speed": (0.5, m / 100)}
            for m in meas]
    f = gate.figures(recs)
    # at the median 3: |3/m - 1| = 2, 0.5, 0, 0.25, 0.97 -> median 0.5
    assert f["time_floor"]["value"] == pytest.approx(50.0)
    # utilizations 10, 20, 30, 40, 90 at the median 30: 20 + 10 + 0 + 10 + 60 over 5
    assert f["util_floor"]["value"] == pytest.approx(20.0)
    # the floor reads only the measurements: another prediction leaves it where it was
    assert gate.figures([dict(r, time=(0.1, r["time"][1])) for r in recs])["time_floor"] == f["time_floor"]


def test_figures_by_hand():
    recs = [{"gpu": "h200", "time": (1.1, 1.0), "util": (50, 60), "memory": (90, 100), "fits": True},
            {"gpu": "h200", "time": (0.5, 1.0), "util": (30, 20), "memory": (120, 100), "fits": False},
            {"gpu": "h200", "time": (2.0, 2.0), "memory": (80, 100)}]
    f = gate.figures(recs)
    # |errors| 0.1, 0.5, 0 -> median 0.1; ratios 1.1, 0.5, 1 -> median 1
    assert f["time_mdape"]["value"] == pytest.approx(10.0)
    assert f["time_ratio"]["value"] == pytest.approx(1.0)
    assert f["util_mae"] == {"value": 10.0, "n": 2}
    assert f["memory_mdape"]["value"] == pytest.approx(20.0)   # 10, 20, 20
    assert f["memory_under"]["value"] == pytest.approx(200 / 3)
    assert f["memory_ratio"]["value"] == pytest.approx(0.9)
    assert f["no_fit"] == {"value": 50.0, "n": 2}
    assert "memory_cover" not in f     # no interval given


def test_memory_cover_is_better_higher():
    recs = [{"gpu": "g", "memory": (90, 100), "memory_hi": 110}, {"gpu": "g", "memory": (50, 100), "memory_hi": 60}]
    assert gate.figures(recs)["memory_cover"] == {"value": 50.0, "n": 2}
    [c] = gate.compare(_cell("memory_cover", 100.0, n=20), _cell("memory_cover", 85.0, n=20))
    assert c.kind == "worse"
    [c] = gate.compare(_cell("memory_cover", 85.0, n=20), _cell("memory_cover", 100.0, n=20))
    assert c.kind == "better"


def test_cells_per_gpu_and_group():
    recs = [{"gpu": "k80", "group": "a", "time": (1, 1)}, {"gpu": "k80", "group": "b", "time": (2, 1)},
            {"gpu": "v100", "group": "a", "time": (1, 2)}]
    c = gate.cells("s", recs)
    assert set(c) == {"s/k80/all", "s/k80/a", "s/k80/b", "s/v100/all"}   # one group: no group cells
    assert c["s/k80/b"]["time_mdape"]["value"] == pytest.approx(100.0)


def _cell(fig, v, n=10):
    return {"x/g/all": {fig: {"value": v, "n": n}}}


def test_compare_bands_and_directions():
    # within the band: nothing; beyond it: worse or better
    assert gate.compare(_cell("time_mdape", 10.0), _cell("time_mdape", 10.4)) == []
    [c] = gate.compare(_cell("time_mdape", 10.0), _cell("time_mdape", 11.0))
    assert c.kind == "worse" and gate.regressions([c]) == [c]
    [c] = gate.compare(_cell("time_mdape", 10.0), _cell("time_mdape", 8.0))
    assert c.kind == "better" and gate.regressions([c]) == []
    # ratios: farther from 1 on a log scale is worse, whichever side
    [c] = gate.compare(_cell("time_ratio", 1.0), _cell("time_ratio", 0.95))
    assert c.kind == "worse"
    [c] = gate.compare(_cell("time_ratio", 0.9), _cell("time_ratio", 1.05))
    assert c.kind == "better"
    # a share figure allows one row of n to flip (100 / n points)
    assert gate.compare(_cell("memory_under", 0.0, n=20), _cell("memory_under", 5.0, n=20)) == []
    [c] = gate.compare(_cell("memory_under", 0.0, n=20), _cell("memory_under", 10.0, n=20))
    assert c.kind == "worse"
    # a new or a gone cell is reported, not a regression
    ch = gate.compare({}, _cell("util_mae", 3.0)) + gate.compare(_cell("util_mae", 3.0), {})
    assert [c.kind for c in ch] == ["new", "gone"] and gate.regressions(ch) == []


def test_table_has_a_row_per_cell():
    t = gate.table({"a/h200/all": {"time_mdape": {"value": 12.34, "n": 5}},
                    "a/h200/cnn": {"time_mdape": {"value": 1.0, "n": 2}}}, only_all=True)
    assert "| a | h200 | all | 5 | 12.3 |" in t and "cnn" not in t


def test_committed_baseline_is_whole():
    """Every set of the gate has cells in the committed baseline, each figure a finite number."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gate_sets

    doc = json.loads((REPO / "benchmarks" / "results" / "accuracy_gate.json").read_text())
    sets = {k.split("/")[0] for k in doc["cells"]}
    assert sets == set(gate_sets.SETS)
    for cell in doc["cells"].values():
        for fig, v in cell.items():
            assert fig in gate.FIGURES and math.isfinite(v["value"]) and v["n"] > 0


def _run_gate(src: Path, *args):
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--sets", "kernel-checks", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_gate_fails_on_a_changed_constant(tmp_path):
    """A copy of the package whose reference GEMM efficiency is cut from 0.80 to 0.60 makes the
    published-kernel cells worse than the committed baseline, and the gate exits 1 naming them;
    the package as it is passes the same check."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "gpucast", src / "gpucast", ignore=shutil.ignore_patterns("__pycache__"))
    ok = _run_gate(REPO / "src")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    path = src / "gpucast" / "data" / "achieved.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["reference"]["matmul"]["value"] > 0.6
    doc["reference"]["matmul"]["value"] = 0.60
    path.write_text(yaml.safe_dump(doc))
    bad = _run_gate(src)
    assert bad.returncode == 1
    assert "REGRESSION kernel-checks/a100" in bad.stdout
    assert "worse than the baseline" in bad.stderr


def test_unknown_set_is_a_usage_error():
    r = subprocess.run([sys.executable, str(SCRIPT), "--sets", "nope"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown set 'nope'")


def test_a_baseline_revision_still_saying_why_fails_even_a_partial_check(tmp_path, monkeypatch):
    """The docs check (the log's entry for the baseline revision) runs with --sets too: an entry that
    still holds the placeholder is stale whichever sets were run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy_gate_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    baseline = json.loads((REPO / "benchmarks" / "results" / "accuracy_gate.json").read_text())
    assert mod.check_docs(baseline) == []                      # the repository as committed
    log = tmp_path / "accuracy_gate.md"
    monkeypatch.setattr(mod, "LOG", log)
    monkeypatch.setattr(mod, "REPO_ROOT", tmp_path)
    rev = baseline["revision"]
    log.write_text(f"## Revision {rev} (today)\n\n{mod.PLACEHOLDER} what moved, and why\n", encoding="utf-8")
    assert any("still says 'WHY:'" in p for p in mod.check_docs(baseline))
    log.write_text(f"## Revision {rev} (today)\n\nThe GEMM fraction moved, because ...\n", encoding="utf-8")
    assert mod.check_docs(baseline) == []


def test_the_answered_share_counts_rows_gpucast_could_not_express():
    recs = [{"gpu": "h100", "answered": True, "time": (2.0, 1.0)}, {"gpu": "h100", "answered": False},
            {"gpu": "h100", "answered": False}, {"gpu": "h100", "answered": True, "time": (1.0, 1.0)}]
    f = gate.figures(recs)
    assert f["answered"] == {"value": 50.0, "n": 4}
    assert f["time_mdape"]["n"] == 2                # only the answered rows carry a time
    assert gate.band("answered", 4) == 25.0           # a share: one row may flip


@pytest.mark.slow   # two spawned worker processes, each importing torch and gpucast
def test_sets_predicted_side_by_side_give_the_cells_one_process_gives():
    """Two worker processes (spawned, each set in one of them) reduce the sets to the same cells, in the
    sets' own order, as predicting them one after another in this process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy_gate_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = ["lucid-pairs", "kernel-checks"]
    one, secs_one = mod.evaluate(names, workers=1)
    two, secs_two = mod.evaluate(names, workers=2, expected={"kernel-checks": 9.0})
    assert one and json.dumps(one, sort_keys=False) == json.dumps(two, sort_keys=False)
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gate_sets

    assert list(secs_one) == list(secs_two) == [n for n in gate_sets.SETS if n in names]
