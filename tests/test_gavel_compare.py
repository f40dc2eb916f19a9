"""benchmarks/gavel_compare.py: the parser reads Gavel's real measurements untouched, the mapping
covers the job types, and the comparison yields a finite error for every row.

No assertion on accuracy: the comparison is a check of gpucast, not a target.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from tests.measured_data import GAVEL_JSON

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "benchmarks" / "gavel_compare.py"
DATA = GAVEL_JSON


def _load_module():
    spec = importlib.util.spec_from_file_location("gavel_compare", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


gc = _load_module()

@pytest.fixture(scope="module")
def measurements():
    return gc.load_measurements(DATA)


def test_missing_data_is_one_line_and_exit_code_2(tmp_path, capsys):
    rc = gc.main(["--data", str(tmp_path / "nowhere.json"), "--no-variants", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "nowhere.json" in err[0]


def test_parser_reads_solo_single_gpu_entries(measurements):
    assert measurements
    assert {m.gavel_gpu for m in measurements} == {"k80", "p100", "v100"}
    raw = json.loads(DATA.read_text())
    for m in measurements:
        assert m.key.endswith(", 1)")                  # scale factor 1 only
        assert m.steps_per_s == raw[m.gavel_gpu][m.key]["null"]  # the solo entry, untouched
        assert m.steps_per_s > 0 and m.step_time_s > 0
    # one key per (gpu, job type, batch): co-located pairs never become rows
    keys = [(m.gavel_gpu, m.key) for m in measurements]
    assert len(keys) == len(set(keys))


def test_one_value_against_the_file_by_hand(measurements):
    key = "('ResNet-50 (batch size 128)', 1)"
    raw = json.loads(DATA.read_text())["v100"][key]["null"]
    (m,) = [m for m in measurements if m.gavel_gpu == "v100" and m.key == key]
    assert (m.job_type, m.batch_size) == ("ResNet-50", 128)
    # 1000 ms / (steps per second) = ms per step; 1000 / 2.4967655780898292 = 400.518 ms
    assert m.step_time_s * 1000 == pytest.approx(1000.0 / raw, rel=1e-12)
    assert m.step_time_s * 1000 == pytest.approx(400.518, abs=1e-3)


def test_mapping_covers_at_least_five_job_types(measurements):
    import gpucast

    in_file = {m.job_type for m in measurements}
    covered = in_file & set(gc.MAPPING)
    assert len(covered) >= 5, covered
    for name in covered:
        batches = {m.batch_size for m in measurements if m.job_type == name}
        for b in batches:
            job = gpucast.Job(**gc.MAPPING[name].job(b))  # a valid gpucast job
            assert job.model == gc.MAPPING[name].model
        assert gc.MAPPING[name].evidence and gc.MAPPING[name].unknown


def test_comparison_gives_a_finite_error_for_every_row(measurements):
    # The smallest batch of each job type on every GPU: every mapping, every GPU, few captures.
    smallest = {}
    for m in measurements:
        b = -1 if m.batch_size is None else m.batch_size
        smallest[m.job_type] = min(smallest.get(m.job_type, b), b)
    rows, left_out = gc.compare(
        measurements,
        select=lambda m: (-1 if m.batch_size is None else m.batch_size) == smallest[m.job_type])
    assert len(rows) >= 5 * 3
    assert {r.gavel_gpu for r in rows} == {"k80", "p100", "v100"}
    for r in rows:
        assert r.measured_ms == pytest.approx(1000.0 / r.measured_steps_per_s)
        for v in (r.predicted_ms, r.ratio, r.abs_pct_error, r.log_error):
            assert math.isfinite(v), r
        assert r.predicted_ms > 0
    s = gc.summarize(rows)
    for k in ("mdape_pct", "within_2x", "rmsle"):
        assert math.isfinite(s["overall"][k])
    assert set(s["per_gpu"]) == {"k80", "p100", "v100"}
    # the report renders
    text = gc.markdown(rows, s, str(DATA))
    assert "| overall |" in text
