"""Lucid's RTX 3090 set (gpucast.learn.lucid): the rows read and checked, the families as jobs with
their scripts' surroundings, and every family predicting on the RTX 3090.

Reads the real data (``data/measured/lucid-rtx3090`` in the repository, never packaged). The
expected facts come from the set's README and the artifact's scripts, not from this code."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from gpucast import Job, predict
from gpucast.learn import lucid
from gpucast.learn.rows import MeasuredRow, RowsError

from tests.measured_data import LUCID as ROOT

FAMILIES = {"ResNet18", "EfficientNet", "ResNet50", "LSTM", "DCGAN", "NeuMF", "TD3"}


@pytest.fixture(scope="module")
def solo():
    return lucid.singles(ROOT)


@pytest.fixture(scope="module")
def together(solo):
    return lucid.pairs(ROOT, solo)


def _by_family(solo, model, batch_size=64, amp=False):
    return next(s for s in solo if s.model == model and s.batch_size == batch_size and s.amp == amp)


# ------------------------------------------------------------------------------ reading

def test_counts_and_families_are_the_readmes(solo, together):
    assert len(solo) == 35 and len(together) == 335
    assert {s.model for s in solo} == FAMILIES
    assert {lucid.family_of(s) for s in solo} == FAMILIES
    # README: ResNet50 appears only in singles.csv; TD3 ran in fp32 only.
    assert "ResNet50" not in {p.family1[0] for p in together} | {p.family2[0] for p in together}
    assert not any(s.amp for s in solo if s.model == "TD3")
    assert all(isinstance(s.amp, bool) and s.batch_size in (32, 64, 128) for s in solo)
    assert [s.row for s in solo] == list(range(1, 36))


def test_first_rows_parse_to_their_cells(solo, together):
    with open(ROOT / "singles.csv", newline="") as f:
        first_single = next(csv.DictReader(f))
    with open(ROOT / "pairs.csv", newline="") as f:
        first_pair = next(csv.DictReader(f))
    s = solo[0]
    assert s.family == (first_single["model"], first_single["dataset"])
    assert s.batch_size == int(first_single["batch_size"]) and s.amp == (first_single["amp"] == "1")
    assert s.speed_samples_per_s == float(first_single["speed_samples_per_s"])
    assert s.gpu_util_pct == float(first_single["gpu_util_pct"])
    assert s.memory_used_mib == float(first_single["memory_used_mib"])
    assert s.step_time_s == pytest.approx(s.batch_size / s.speed_samples_per_s)
    p = together[0]
    assert (p.family1, p.batch_size1, p.amp1) == ((first_pair["model1"], first_pair["dataset1"]),
                                                  int(first_pair["batch_size1"]), first_pair["amp1"] == "1")
    assert (p.speed1_vs_solo, p.speed2_vs_solo) == (float(first_pair["speed1_vs_solo"]),
                                                    float(first_pair["speed2_vs_solo"]))
    assert (p.gpu_util_pct, p.memory_used_max_mib) == (float(first_pair["gpu_util_pct"]),
                                                       float(first_pair["memory_used_max_mib"]))


def test_every_pair_resolves_to_its_two_solo_runs(solo, together):
    keys = {s.key for s in solo}
    for p in together:
        assert p.key1 in keys and p.key2 in keys
        assert p.solo1.key == p.key1 and p.solo2.key == p.key2
        assert p.job1() == p.solo1.job() and p.job2() == p.solo2.job()
        assert p.speed1_samples_per_s == pytest.approx(p.speed1_vs_solo * p.solo1.speed_samples_per_s)
    assert lucid.pairs(ROOT) == together  # reading singles.csv itself gives the same pairs


# ------------------------------------------------------------------------------ malformed copies

def _copy(tmp_path, edit_singles=None, edit_pairs=None):
    """The set copied to tmp_path, its rows (lists of cells, header first) passed through the edits."""
    for name, edit in (("singles.csv", edit_singles), ("pairs.csv", edit_pairs)):
        with open(ROOT / name, newline="") as f:
            rows = list(csv.reader(f))
        if edit:
            rows = edit(rows)
        with open(tmp_path / name, "w", newline="") as f:
            csv.writer(f).writerows(rows)
    return tmp_path


def _cell(row, column, value):
    def edit(rows):
        rows[row][rows[0].index(column)] = value
        return rows
    return edit


def _error(fn, root) -> str:
    with pytest.raises(RowsError) as e:
        fn(root)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_a_bad_cell_names_file_row_and_column(tmp_path):
    root = _copy(tmp_path, edit_pairs=_cell(3, "speed1_vs_solo", "x"))
    assert _error(lucid.pairs, root) == f"{root / 'pairs.csv'}: row 3: column speed1_vs_solo: not a number: 'x'"
    lucid.singles(root)  # singles.csv is untouched


@pytest.mark.parametrize("column, value, why", [
    ("gpu_util_pct", "100.5", "out of range"),
    ("gpu_util_pct", "-1", "out of range"),
    ("speed_samples_per_s", "0", "out of range"),
    ("speed_samples_per_s", "-3.2", "out of range"),
    ("speed_samples_per_s", "nan", "not a finite number"),
    ("memory_used_mib", "30000", "out of range"),
    ("amp", "2", "must be 0 or 1"),
    ("amp", "true", "must be 0 or 1"),
    ("batch_size", "64.5", "not an integer"),
    ("batch_size", "0", "out of range"),
    ("model", "ResNet999", "unknown family"),
    ("dataset", "MNIST", "not 'MNIST'"),
    ("memory_used_mib", "", "missing value"),
])
def test_out_of_range_and_unknown_values_name_their_cell(tmp_path, column, value, why):
    root = _copy(tmp_path, edit_singles=_cell(5, column, value))
    msg = _error(lucid.singles, root)
    assert msg.startswith(f"{root / 'singles.csv'}: row 5: column {column}: ") and why in msg


def test_a_missing_column_an_extra_value_and_a_short_row(tmp_path):
    def drop_memory(rows):
        j = rows[0].index("memory_used_mib")
        return [r[:j] + r[j + 1:] for r in rows]

    root = _copy(tmp_path, edit_singles=drop_memory)
    assert _error(lucid.singles, root) == f"{root / 'singles.csv'}: column memory_used_mib: missing from the header"

    def extra_value(rows):
        rows[7].append("12")
        return rows

    root = _copy(tmp_path, edit_singles=extra_value)
    msg = _error(lucid.singles, root)
    assert msg.startswith(f"{root / 'singles.csv'}: row 7: column ") and "8 values for 7 columns" in msg

    def short_row(rows):
        rows[2] = rows[2][:-2]
        return rows

    root = _copy(tmp_path, edit_pairs=short_row)
    assert _error(lucid.pairs, root) == (f"{root / 'pairs.csv'}: row 2: column gpu_util_pct: missing value")

    def extra_column(rows):
        return [r + (["note"] if i == 0 else ["x"]) for i, r in enumerate(rows)]

    root = _copy(tmp_path, edit_pairs=extra_column)
    msg = _error(lucid.pairs, root)
    assert msg.startswith(f"{root / 'pairs.csv'}: column note: unknown column")


def test_a_pair_without_its_solo_run_and_a_repeated_solo_run(tmp_path):
    # Drop the solo run of the first pair's second job: the pairs that need it are errors.
    with open(ROOT / "pairs.csv", newline="") as f:
        first = next(csv.DictReader(f))
    gone = (first["model2"], first["dataset2"], first["batch_size2"], first["amp2"])

    def drop(rows):
        return [r for r in rows if tuple(r[:4]) != gone]

    root = _copy(tmp_path, edit_singles=drop)
    assert len(lucid.singles(root)) == 34
    msg = _error(lucid.pairs, root)
    assert msg.startswith(f"{root / 'pairs.csv'}: row 1: column model2: no solo run of ") and "singles.csv" in msg

    root = _copy(tmp_path, edit_singles=lambda rows: rows + [rows[3]])
    msg = _error(lucid.singles, root)
    assert msg.startswith(f"{root / 'singles.csv'}: row 36: column model: ") and "repeats row 3" in msg


def test_a_missing_folder_is_a_rows_error(tmp_path):
    msg = _error(lucid.singles, tmp_path / "nowhere")
    assert "singles.csv" in msg and "no such file" in msg


# ------------------------------------------------------------------------------ the jobs

def test_every_family_has_a_job_with_the_artifacts_stack(solo):
    assert {m for m, _ in lucid.JOBS} == FAMILIES
    for s in solo:
        job = s.job()
        assert isinstance(job, Job) and job.batch_size == s.batch_size
        assert job.precision == ("amp-fp16" if s.amp else "fp32")
        assert (job.stack.torch, job.stack.cuda, job.stack.lazy_loading) == ("1.11", "11.3", False)
        assert not job.stack.foreach_optimizers and not job.stack.lazy
        assert Job.from_dict(json.loads(job.to_json())) == job  # a measured row can carry it as JSON


def test_the_jobs_have_their_scripts_loaders_and_loops(solo):
    jobs = {s.model: s.job() for s in solo if s.batch_size == 64 and not s.amp}
    # profile_cifar.py: DataLoader(num_workers=2), no pin_memory, blocking .to(device), per-sample PIL.
    for m in ("ResNet18", "EfficientNet"):
        d = jobs[m].data
        assert (d.source, d.num_workers, d.pin_memory, d.non_blocking) == ("small-images", 2, False, False)
        assert jobs[m].optimizer == "sgd"
    assert jobs["EfficientNet"].input_shape == (3, 32, 32)
    # profile_imagenet.py: one synthetic batch moved to the GPU once.
    assert jobs["ResNet50"].data.source == "device" and jobs["ResNet50"].model == "resnet50"
    assert jobs["ResNet50"].data.num_workers == 0
    # profile_lstm.py: bptt 35, no loader workers, token ids already on the GPU (nothing copied).
    lstm = jobs["LSTM"]
    assert lstm.seq_len == 35 and lstm.data.num_workers == 0 and lstm.data.sample_bytes == 0
    # profile_dcgan.py: FakeData 3x64x64 through 2 workers, Adam; profile_ncf.py: 2 workers, SGD.
    assert jobs["DCGAN"].data.num_workers == 2 and jobs["DCGAN"].optimizer == "adam"
    assert jobs["DCGAN"].input_shape == (3, 64, 64)
    assert jobs["NeuMF"].data.num_workers == 2 and not jobs["NeuMF"].data.pin_memory
    assert jobs["NeuMF"].optimizer == "sgd"
    # stable-baselines3's TD3 trains with Adam, in the main process (no DataLoader).
    assert jobs["TD3"].optimizer == "adam" and jobs["TD3"].data.num_workers == 0
    # No script reads a loss on the host, prints or draws a bar in its timed loop; all autotune.
    for m, job in jobs.items():
        assert job.loop.progress_bar is False and job.loop.log_every == 0 and job.loop.cudnn_benchmark
        if m != "TD3":
            assert job.loop.item_calls == 0, m


def test_td3_speed_counts_episodes_so_its_rows_carry_no_step_time(solo):
    td3 = [s for s in solo if s.model == "TD3"]
    # A gradient step of an MLP policy takes milliseconds; each counted learn(1) call took far longer.
    assert all(s.step_time_s > 0.5 for s in td3)
    assert not any(s.step_time_comparable for s in td3)
    assert all(s.step_time_comparable for s in solo if s.model != "TD3")


def test_single_rows_go_through_from_records(solo, monkeypatch):
    rows = lucid.single_rows(ROOT)
    assert len(rows) == 35 and all(isinstance(r, MeasuredRow) for r in rows)
    for s, r in zip(solo, rows):
        assert r.gpu == "rtx-3090" and r.group == s.model == lucid.family_of(r)
        assert r.job == s.job() and r.source == str(ROOT / "singles.csv") and f"row {s.row}" in r.label
        assert (r.util_pct, r.memory_mib) == (s.gpu_util_pct, s.memory_used_mib)
        assert r.step_time_s == (pytest.approx(s.batch_size / s.speed_samples_per_s) if s.model != "TD3" else None)
    seen = []

    def spy(records, source="rows"):
        seen.append((len(records), source))
        return []

    monkeypatch.setattr(lucid, "from_records", spy)
    assert lucid.single_rows(ROOT) == [] and seen == [(35, str(ROOT / "singles.csv"))]


def test_family_of_takes_keys_names_and_rows(solo):
    s = _by_family(solo, "NeuMF")
    assert lucid.family_of(s) == lucid.family_of(s.key) == lucid.family_of(s.family) == "NeuMF"
    assert lucid.family_of("LSTM") == "LSTM"
    with pytest.raises(KeyError):
        lucid.family_of("BERT")


def test_each_family_predicts_on_the_rtx_3090(solo):
    for model in sorted(FAMILIES):  # one job per family: 7 traces
        s = _by_family(solo, model)
        p = predict(s.job(), "rtx-3090")
        assert math.isfinite(p.step_time_s) and p.step_time_s > 0, model
        assert 0 < p.gpu_util_pct <= 100 and p.memory_peak_bytes > 0, model
        # The job's own surroundings win over the zoo workload's typical script.
        data, loop = p.surroundings["data"], p.surroundings["loop"]
        assert data["source"] == s.job().data.source and data["num_workers"] == s.job().data.num_workers, model
        assert loop["log_every"] == 0 and loop["progress_bar"] is False, model


def test_no_measured_row_is_packaged():
    src = Path(lucid.__file__).resolve().parents[1]
    header = ",".join(lucid.SINGLES_COLUMNS)
    for f in src.rglob("*"):
        if f.is_file() and f.suffix in (".csv", ".json", ".jsonl", ".parquet", ".txt", ".py"):
            assert header not in f.read_text(errors="ignore"), f
