"""The measured-row format and its readers (gpucast.learn.rows): one validation for every file
shape, and one clear error line naming file, row and column for a malformed row."""

from __future__ import annotations

import json

import pytest

from gpucast import Job
from gpucast.learn.rows import RowsError, from_records, read_file, read_rows
from gpucast.surroundings import Data

from tests.measured_data import GAVEL_JSON, MLP_CSV


def _write(path, text):
    path.write_text(text)
    return path


def test_flat_csv_columns_become_jobs_with_their_surroundings(tmp_path):
    f = _write(tmp_path / "rows.csv", "model,batch_size,precision,data.num_workers,loop.item_calls,gpu,util_pct,"
                                      "memory_mib,step_time_s,group\n"
                                      "resnet50,64,amp-fp16,8,2,a100-40gb,91.5,9000,,resnets\n"
                                      "gpt2,8,,,,h100,,,0.12,\n")
    a, b = read_file(f)
    assert a.job == Job(model="resnet50", batch_size=64, precision="amp-fp16", data={"num_workers": 8},
                        loop={"item_calls": 2})
    assert (a.gpu, a.group, a.util_pct, a.memory_mib, a.step_time_s) == ("a100-40gb", "resnets", 91.5, 9000.0, None)
    assert b.job == Job(model="gpt2", batch_size=8) and b.group == "gpt2" and b.step_time_s == 0.12


def test_jsonl_with_job_specs_and_parquet_read_the_same_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    job = Job(model="resnet18-cifar", batch_size=128, data=Data(source="device"))
    recs = [{"job": job.to_json(), "gpu": "v100-16gb", "memory_bytes": 3 * 2**30, "util_pct": 80.0}]
    jl = _write(tmp_path / "rows.jsonl", "\n".join(json.dumps(r) for r in recs) + "\n")
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "rows.parquet")
    a, = read_file(jl)
    b, = read_file(tmp_path / "rows.parquet")
    assert a.job == job and a.memory_mib == 3072.0
    assert (b.job, b.gpu, b.memory_mib, b.util_pct) == (a.job, a.gpu, a.memory_mib, a.util_pct)


def test_gpucast_profile_dataset_reads_its_ok_solo_runs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpucast.profile.schema import arrow_schema

    job = Job(model="mlp-small", batch_size=64)
    base = {name: None for name in arrow_schema().names}
    ok = {**base, "status": "ok", "kind": "solo", "job_json": job.to_json(), "gpu_name": "t4", "model": "mlp-small",
          "util_mean_pct": 40.0, "proc_mem_max_bytes": 600 * 2**20, "step_time_mean_s": 0.002, "run_id": "r1"}
    oom = {**ok, "status": "oom", "run_id": "r2"}
    pq.write_table(pa.Table.from_pylist([ok, oom], schema=arrow_schema()), tmp_path / "runs.parquet")
    row, = read_file(tmp_path / "runs.parquet")
    assert (row.job, row.gpu, row.util_pct, row.memory_mib, row.step_time_s) == (job, "t4", 40.0, 600.0, 0.002)


@pytest.mark.parametrize("text, where", [
    ("model,gpu,util_pct\nresnet50,a100-40gb,95\nresnet50,nosuchgpu,90\n", "row 2 column 'gpu'"),
    ("model,gpu,util_pct\nresnet50,a100-40gb,lots\n", "row 1 column 'util_pct'"),
    ("model,gpu,util_pct\nresnet50,a100-40gb,120\n", "row 1 column 'util_pct'"),
    ("model,gpu,util_pct\nresnet50,a100-40gb,\n", "row 1 column 'util_pct'"),  # no measurement at all
    ("model,gpu,util_pct,colour\nresnet50,a100-40gb,50,red\n", "row 1 column 'colour'"),
    ("model,batch_size,gpu,util_pct\nresnet50,-3,a100-40gb,50\n", "row 1 column 'batch_size'"),
    ("model,gpu,util_pct\nnot-a-model,a100-40gb,50\n", "row 1 column 'model'"),
    ("model,gpu,step_time_s\nmlp:10:x;y,a100-40gb,0.1\n", "row 1 column 'model'"),
    ("batch_size,gpu,util_pct\n8,a100-40gb,50\n", "row 1 column 'model'"),
])
def test_a_malformed_row_is_one_line_naming_file_row_and_column(tmp_path, text, where):
    f = _write(tmp_path / "bad.csv", text)
    with pytest.raises(RowsError) as exc:
        read_rows([f])
    msg = str(exc.value)
    assert str(f) in msg and where in msg and "\n" not in msg


def test_unknown_formats_and_missing_files_are_refused(tmp_path):
    with pytest.raises(RowsError, match="unknown row file format"):
        read_file(_write(tmp_path / "rows.txt", "x"))
    with pytest.raises(RowsError, match="no such file"):
        read_file(tmp_path / "absent.csv")
    with pytest.raises(RowsError, match="no measured rows"):
        from_records([], "empty")


def test_mlp_models_are_plain_sequential_mlps():
    row, = from_records([{"model": "mlp:20:16;8;3", "batch_size": 4, "gpu": "a100-40gb", "util_pct": 10}])
    m = row.job.model_fn()
    assert [type(x).__name__ for x in m] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert (m[0].in_features, m[-1].out_features, row.job.optimizer) == (20, 3, "adam")
    assert row.job.input_fn(4)[0].shape == (4, 20)


def test_the_shared_sets_load_through_the_same_reader():
    import csv

    with open(MLP_CSV) as f:
        lines = list(csv.DictReader(f))
    mlp = read_file(MLP_CSV)
    assert len(mlp) == len(lines)
    assert {r.group for r in mlp} == {r["architecture"] for r in lines}
    assert mlp[0].util_pct == float(lines[0]["util_pct"]) and mlp[0].memory_mib == float(lines[0]["memory_max_mib"])
    gavel = read_file(GAVEL_JSON)
    assert gavel and all(r.step_time_s > 0 and r.util_pct is None for r in gavel)
