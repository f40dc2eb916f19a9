"""Trace parsing: Gavel's packaged files, the user CSV/Parquet format and its errors, synthetic."""

from __future__ import annotations

import pytest

from gpucast.cluster import gavel
from gpucast.cluster.traces import (DEFAULT_GAVEL_TRACE, TraceError, load_trace, parse_table, synthetic)


def test_packaged_gavel_traces_and_default():
    ids = gavel.trace_ids()
    assert len(ids) == 15 and DEFAULT_GAVEL_TRACE in ids
    tr = load_trace("gavel")
    assert tr.name == f"gavel:{DEFAULT_GAVEL_TRACE}" and len(tr) == 2000
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(tr.jobs, tr.jobs[1:]))
    assert max(j.gpus for j in tr.jobs) == 32 and sum(j.gpus > 1 for j in tr.jobs) == 1025


def test_gavel_columns_are_read_as_gavel_does():
    # first line of 0e4a51: Transformer b128, -step, needs data dir 1, 95121 steps, t=0, 1 GPU
    tr = load_trace("gavel:0e4a51")
    first = next(j for j in tr.jobs if j.job_id == "0e4a51-1")
    assert (first.job_type, first.steps, first.arrival_s, first.gpus) == (
        "Transformer (batch size 128)", 95121.0, 0.0, 1)
    assert (first.workload, first.batch_size) == ("transformer-nmt", 128)
    assert dict(first.fields)["seq_len"] == 32


def test_limit_and_gpu_cap():
    tr = load_trace("ee9e8c", gpus=8, limit=100)
    assert len(tr) == 100 and max(j.gpus for j in tr.jobs) == 8
    assert any("capped" in n for n in tr.notes)


def test_unknown_trace_is_one_line():
    with pytest.raises(TraceError) as e:
        load_trace("nope-not-a-trace")
    assert "\n" not in str(e.value)


def test_user_csv(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("job_id,arrival_s,workload,batch_size,precision,gpus,duration_s,steps\n"
                 "j1,5,resnet50,64,amp-bf16,2,3600,\n"
                 "j2,0,ResNet-18 (batch size 32),32,,1,,1000\n")
    tr = parse_table(p)
    assert [j.job_id for j in tr.jobs] == ["j2", "j1"]               # sorted by arrival
    j1 = tr.jobs[1]
    assert (j1.workload, j1.precision, j1.gpus, j1.duration_s, j1.steps) == ("resnet50", "amp-bf16", 2, 3600.0, None)
    assert tr.jobs[0].job_type == "ResNet-18 (batch size 32)" and tr.jobs[0].steps == 1000.0


def test_user_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "log.parquet"
    pq.write_table(pa.table({"job_id": ["a"], "arrival_s": [1.0], "workload": ["mlp-small"], "batch_size": [8],
                             "gpus": [1], "steps": [10.0]}), p)
    assert load_trace(str(p)).jobs[0].steps == 10.0


@pytest.mark.parametrize("row, col", [
    ("j2,1,resnet50,64,zero,60", "gpus"),
    ("j2,1,resnet50,-3,1,60", "batch_size"),
    ("j2,1,not-a-model,64,1,60", "workload"),
    ("j1,1,resnet50,64,1,60", "job_id"),
    ("j2,1,resnet50,64,1,", "duration_s"),
])
def test_user_csv_bad_row_names_row_and_column(tmp_path, row, col):
    p = tmp_path / "bad.csv"
    p.write_text("job_id,arrival_s,workload,batch_size,gpus,duration_s\nj1,0,resnet50,64,1,60\n" + row + "\n")
    with pytest.raises(TraceError) as e:
        parse_table(p)
    msg = str(e.value)
    assert "\n" not in msg and "row 2" in msg and repr(col) in msg


def test_missing_column(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("job_id,arrival_s,workload,gpus,duration_s\nj1,0,resnet50,1,60\n")
    with pytest.raises(TraceError, match="batch_size"):
        parse_table(p)


def test_synthetic_is_seeded():
    a, b, c = synthetic(200, seed=1), synthetic(200, seed=1), synthetic(200, seed=2)
    assert a.jobs == b.jobs and a.jobs != c.jobs
    assert len({j.job_type for j in a.jobs}) > 10                     # Gavel job types by default
    gaps = [y.arrival_s - x.arrival_s for x, y in zip(a.jobs, a.jobs[1:])]
    assert 30 < sum(gaps) / len(gaps) < 90                            # Poisson, mean 60 s
    z = synthetic(10, seed=0, mix={("resnet50", 64, "amp-bf16"): 1}, gpus_dist={4: 1})
    assert {(j.workload, j.batch_size, j.precision, j.gpus) for j in z.jobs} == {("resnet50", 64, "amp-bf16", 4)}
