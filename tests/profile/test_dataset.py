"""The Parquet store. Rows here are synthetic test fixtures (made-up values), not measurements."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucast.profile.dataset import Dataset, config_id
from gpucast.profile.schema import COLUMNS, SCHEMA_VERSION, STATUSES, arrow_schema

ARROW = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string()}


def synthetic_full_row(i: int = 0) -> dict:
    """Every column set, with a made-up value of its type."""
    row = {}
    for n, (name, (t, _)) in enumerate(COLUMNS.items()):
        if t == "int32":
            row[name] = 1000 * i + n
        elif t == "int64":
            row[name] = (1 << 40) + 1000 * i + n
        elif t == "float64":
            row[name] = 0.5 + n + i
        else:
            row[name] = f"{name}-{i}-é"
    return row


def synthetic_row(config, status="ok", **extra) -> dict:
    return {"run_id": f"run-{config}-{status}", "config_id": config, "status": status, **extra}


def visible_files(root):
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def test_schema_round_trip_every_column_with_its_type(tmp_path):
    ds = Dataset(tmp_path / "m")
    row = synthetic_full_row()
    part = ds.append([row])
    file_schema = pq.read_schema(part)
    assert file_schema.names == list(COLUMNS)
    for name, (t, _) in COLUMNS.items():
        assert file_schema.field(name).type == ARROW[t], name
    table = ds.read()
    assert table.schema.equals(arrow_schema())
    assert ds.rows() == [row]


def test_missing_columns_are_null_and_schema_version_defaults(tmp_path):
    ds = Dataset(tmp_path)
    ds.append([{"run_id": "a", "status": "ok"}])
    (r,) = ds.rows()
    assert set(r) == set(COLUMNS)
    assert r["run_id"] == "a" and r["schema_version"] == SCHEMA_VERSION
    assert r["step_time_mean_s"] is None and r["batch_size"] is None


def test_empty_dataset(tmp_path):
    ds = Dataset(tmp_path / "not-yet")
    t = ds.read()
    assert t.num_rows == 0 and t.schema.equals(arrow_schema())
    assert ds.rows() == [] and ds.done_config_ids() == set()
    assert not (tmp_path / "not-yet").exists()  # created on first append only


def test_each_append_is_one_new_part_and_never_rewrites(tmp_path):
    ds = Dataset(tmp_path)
    p1 = ds.append([synthetic_row("a"), synthetic_row("b")])
    before = p1.read_bytes()
    p2 = ds.append([synthetic_row("c")])
    assert p1 != p2 and ds.parts() == [p1, p2]
    assert p1.read_bytes() == before
    assert [r["config_id"] for r in ds.rows()] == ["a", "b", "c"]


def test_crash_mid_append_leaves_nothing_visible(tmp_path, monkeypatch):
    ds = Dataset(tmp_path)
    ds.append([synthetic_row("a")])
    files_before, table_before = visible_files(tmp_path), ds.read()

    def crash(*a, **k):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        ds.append([synthetic_row("b")])
    monkeypatch.undo()
    assert visible_files(tmp_path) == files_before  # no part, no temp file left behind
    assert ds.read().equals(table_before)


def test_leftover_temp_file_is_ignored(tmp_path):
    ds = Dataset(tmp_path)
    ds.append([synthetic_row("a")])
    # what a process killed between write and rename leaves: a complete file under a temp name
    pq.write_table(pa.Table.from_pylist([{"config_id": "ghost"}]), tmp_path / ".part-1.parquet.tmp-123")
    assert [r["config_id"] for r in ds.rows()] == ["a"]


def test_unreadable_parts_are_skipped_with_one_warning_each(tmp_path, capsys):
    ds = Dataset(tmp_path)
    ds.append([synthetic_row("a")])
    good = ds.append([synthetic_row("b")])
    garbage = tmp_path / "part-00000000000000000001-garbage.parquet"
    garbage.write_bytes(b"not parquet at all \x00\xff" * 10)
    truncated = tmp_path / "part-00000000000000000002-truncated.parquet"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])

    assert sorted(r["config_id"] for r in ds.rows()) == ["a", "b"]
    err = capsys.readouterr().err
    assert garbage.name in err and truncated.name in err
    assert len(err.strip().splitlines()) == 2
    ds.read()
    assert capsys.readouterr().err == ""  # once per file


def test_resume_done_config_ids(tmp_path):
    ds = Dataset(tmp_path)
    ds.append([synthetic_row("a", "ok"), synthetic_row("b", "oom"), synthetic_row("c", "crash")])
    ds.append([synthetic_row("d", "timeout"), synthetic_row("e", "error"), synthetic_row(None, "ok")])
    assert ds.done_config_ids() == {"a", "b"}
    assert ds.done_config_ids(statuses=("ok",)) == {"a"}
    # a retried crash that then succeeds is done
    ds.append([synthetic_row("c", "ok")])
    assert ds.done_config_ids() == {"a", "b", "c"}
    assert set(STATUSES) >= {"ok", "oom", "crash", "timeout", "error"}


def test_compact_one_file_with_all_rows(tmp_path):
    ds = Dataset(tmp_path / "parts")
    for c in "abc":
        ds.append([synthetic_row(c), synthetic_row(c + "2")])
    dest = ds.compact(tmp_path / "out" / "all.parquet")
    assert visible_files(tmp_path / "out") == ["all.parquet"]
    t = pq.read_table(dest)
    assert t.schema.equals(arrow_schema())
    assert t.to_pylist() == ds.rows()
    assert t.num_rows == 6
    assert pq.ParquetFile(dest).metadata.num_rows == 6


def test_compact_is_atomic(tmp_path, monkeypatch):
    ds = Dataset(tmp_path / "parts")
    ds.append([synthetic_row("a")])
    dest = tmp_path / "all.parquet"
    dest.write_bytes(b"previous version")

    def crash(*a, **k):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        ds.compact(dest)
    monkeypatch.undo()
    assert dest.read_bytes() == b"previous version"
    assert visible_files(tmp_path) == ["all.parquet", "parts"]


def test_compact_refuses_a_name_that_would_be_read_as_a_part(tmp_path):
    ds = Dataset(tmp_path)
    ds.append([synthetic_row("a")])
    with pytest.raises(ValueError):
        ds.compact(tmp_path / "part-zzz.parquet")


def test_unknown_column_rejected_by_name(tmp_path):
    ds = Dataset(tmp_path)
    with pytest.raises(ValueError, match="util_mean_percent"):
        ds.append([synthetic_row("a"), {"config_id": "b", "util_mean_percent": 3.0}])
    assert visible_files(tmp_path) == []


def test_wrong_type_rejected_by_column(tmp_path):
    ds = Dataset(tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        ds.append([{"batch_size": "sixty-four"}])
    with pytest.raises(ValueError):
        ds.append([])
    assert visible_files(tmp_path) == []


def test_config_id_stable_and_order_free():
    a = config_id("resnet50-bs64", "NVIDIA H200", "solo")
    assert len(a) == 16 and int(a, 16) >= 0
    assert config_id("resnet50-bs64", "NVIDIA H200", "solo") == a
    assert config_id("resnet50-bs64", "NVIDIA H100 80GB HBM3", "solo") != a
    assert config_id("resnet50-bs32", "NVIDIA H200", "solo") != a
    c1 = config_id("x", "NVIDIA H200", "colocated", ("p", "q"))
    assert c1 == config_id("x", "NVIDIA H200", "colocated", ("q", "p"))
    assert c1 != config_id("x", "NVIDIA H200", "colocated", ("p",))
    assert c1 != config_id("p", "NVIDIA H200", "colocated", ("x", "q"))
    with pytest.raises(ValueError):
        config_id("x", "NVIDIA H200", "shared")
    with pytest.raises(ValueError):
        config_id("x", "NVIDIA H200", "solo", ("p",))
    with pytest.raises(ValueError):
        config_id("x", "NVIDIA H200", "colocated")


def test_config_id_same_in_another_process():
    code = "from gpucast.profile.dataset import config_id; print(config_id('x', 'NVIDIA H200', 'colocated', ('q', 'p')))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == config_id("x", "NVIDIA H200", "colocated", ("p", "q"))


def _value_strategy(t):
    if t == "int32":
        v = st.integers(-(2**31), 2**31 - 1)
    elif t == "int64":
        v = st.integers(-(2**63), 2**63 - 1)
    elif t == "float64":
        v = st.floats(allow_nan=False)
    else:
        v = st.text(max_size=20)
    return st.none() | v


_row_strategy = st.fixed_dictionaries(
    {}, optional={name: _value_strategy(t) for name, (t, _) in COLUMNS.items()}
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(_row_strategy, min_size=1, max_size=4), min_size=1, max_size=3))
def test_random_rows_round_trip(batches):
    with tempfile.TemporaryDirectory() as d:
        ds = Dataset(d)
        for rows in batches:
            ds.append(rows)
        expected = []
        for rows in batches:
            for r in rows:
                full = {name: r.get(name) for name in COLUMNS}
                if "schema_version" not in r:
                    full["schema_version"] = SCHEMA_VERSION
                expected.append(full)
        got = ds.rows()
        assert got == expected
        assert len(ds.parts()) == len(batches)
