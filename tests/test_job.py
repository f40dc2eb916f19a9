"""Tests for gpucast.job: the job spec's validation, identity (equality, hash, key) and files.

Nothing here traces a model: a Job is plain data, and this module must stay cheap (no torch).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucast.job import MAX_BATCH_SIZE, MODES, OPTIMIZERS, PRECISIONS, Job, JobError

SPEC_FIELDS = ("model", "batch_size", "input_shape", "seq_len", "precision", "mode", "optimizer",
               "input_pipeline_s", "gpus")
# Zoo names used below; validation only looks them up in the registry (no model is built).
MODELS = ("resnet50", "resnet18-cifar", "bert-base", "gpt2", "mlp-small", "lstm-lm-small")


def _full_job(**overrides) -> Job:
    """A job with every field set away from its default, so a round trip exercises all of them."""
    fields = dict(model="resnet50", batch_size=64, input_shape=(3, 160, 160), seq_len=None,
                  precision="amp-bf16", mode="train", optimizer="adamw", input_pipeline_s=0.0125, gpus=8)
    fields.update(overrides)
    return Job(**fields)


def _assert_one_line(exc: BaseException, *needles: str) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg and msg == msg.strip(), repr(msg)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    return msg


# ----------------------------------------------------------------------------- strategies

_floats_s = st.floats(min_value=0.0, max_value=3599.0, allow_nan=False, allow_infinity=False)
_shapes = st.none() | st.lists(st.integers(1, 4096), min_size=1, max_size=4).map(tuple)
VALUES = {
    "model": st.sampled_from(MODELS),
    "batch_size": st.integers(1, MAX_BATCH_SIZE),
    "input_shape": _shapes,
    "seq_len": st.none() | st.integers(1, 1 << 16),
    "precision": st.sampled_from(PRECISIONS),
    "mode": st.sampled_from([m for m in MODES if m != "serve"]),  # serve takes an hf: config (test_serving.py)
    "optimizer": st.sampled_from(OPTIMIZERS),
    "input_pipeline_s": _floats_s,
    "gpus": st.integers(1, 4096),
}
jobs = st.fixed_dictionaries(VALUES).map(lambda d: Job(**d))


# ----------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_save_load_round_trip(tmp_path, suffix):
    for job in (Job("resnet50"), _full_job(), _full_job(model="gpt2", input_shape=None, seq_len=256,
                                                      mode="infer", optimizer="none", precision="tf32")):
        path = tmp_path / f"job{suffix}"
        job.save(path)
        back = Job.load(path)
        assert back == job
        assert back.key == job.key
        assert hash(back) == hash(job)
        assert back.to_dict() == job.to_dict()


def test_saved_files_are_plain_json_and_yaml(tmp_path):
    job = _full_job()
    job.save(tmp_path / "j.json")
    job.save(tmp_path / "j.yaml")
    expected = {**job.to_dict(), "input_shape": [3, 160, 160]}
    assert json.loads((tmp_path / "j.json").read_text()) == expected
    assert yaml.safe_load((tmp_path / "j.yaml").read_text()) == expected
    assert set(expected) == set(SPEC_FIELDS)  # factories are never serialised


def test_hand_written_yaml_with_defaults_left_out(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("model: resnet50\nbatch_size: 64\ninput_shape: 3x192x192\ninput_pipeline_s: 0\n")
    job = Job.load(path)
    assert job == Job("resnet50", batch_size=64, input_shape=(3, 192, 192))
    assert job.key == Job("resnet50", batch_size=64, input_shape=(3, 192, 192)).key


@settings(max_examples=60, deadline=None)
@given(job=jobs)
def test_round_trip_any_valid_job(job):
    assert Job.from_dict(json.loads(job.to_json())) == job
    with tempfile.TemporaryDirectory() as d:
        for name in ("j.json", "j.yaml"):
            job.save(Path(d) / name)
            back = Job.load(Path(d) / name)
            assert back == job and back.key == job.key
        assert sorted(os.listdir(d)) == ["j.json", "j.yaml"]  # no temp file left behind


# ----------------------------------------------------------------------------- identity

def test_key_is_16_hex_digits_and_deterministic():
    job = _full_job()
    assert len(job.key) == 16 and int(job.key, 16) >= 0
    assert job.key == _full_job().key == Job.from_dict(job.to_dict()).key


def test_key_is_stable_across_processes():
    specs = [Job("resnet50").to_dict(), _full_job().to_dict(),
             _full_job(model="bert-base", input_shape=None, seq_len=128, input_pipeline_s=1e-7).to_dict()]
    code = ("import json, sys; from gpucast.job import Job; "
            "print(json.dumps([Job.from_dict(d).key for d in json.loads(sys.argv[1])]))")
    mine = [Job.from_dict(d).key for d in specs]
    for seed in ("0", "12345"):  # str hashing differs between these; the key must not
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code, json.dumps(specs)], capture_output=True,
                             text=True, env=env, timeout=120, check=True)
        assert json.loads(out.stdout) == mine


@settings(max_examples=100, deadline=None)
@given(job=jobs, data=st.data())
def test_key_changes_when_any_field_changes(job, data):
    name = data.draw(st.sampled_from(SPEC_FIELDS), label="field")
    value = data.draw(VALUES[name].filter(lambda v: v != getattr(job, name)), label="value")
    other = job.with_(**{name: value})
    assert other != job
    assert other.key != job.key
    assert getattr(job, name) != value  # with_ copies, never mutates


@settings(max_examples=100, deadline=None)
@given(a=jobs, b=jobs)
def test_equal_jobs_have_equal_hash_and_key(a, b):
    assert (a == b) == (a.key == b.key)
    if a == b:
        assert hash(a) == hash(b)


def test_hash_and_equality():
    a = Job("resnet50", batch_size=64, input_shape=[3, 224, 224])
    b = Job("resnet50", batch_size=64, input_shape=(3, 224, 224))
    c = Job("resnet50", batch_size=64, input_shape="3x224x224")
    assert a == b == c and hash(a) == hash(b) == hash(c) and a.key == b.key == c.key
    assert len({a, b, c, Job("resnet50", batch_size=65)}) == 2
    assert {a: "cached"}[Job.from_dict(a.to_dict())] == "cached"
    assert Job("resnet50", optimizer=None) == Job("resnet50", optimizer="none")
    assert Job("resnet50") != "resnet50"


@pytest.mark.parametrize("zero", [0, 0.0, -0.0])
def test_equal_specs_spelled_differently_have_one_key(zero):
    # 0 == 0.0 == -0.0, so the jobs are equal and must share a key (a YAML file says `0`,
    # the CLI computes 0.0); found by this test: the key used to differ.
    job = Job("resnet50", input_pipeline_s=zero)
    assert job == Job("resnet50") and job.key == Job("resnet50").key
    assert job.to_json() == Job("resnet50").to_json()


def test_job_is_immutable():
    job = Job("resnet50")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.batch_size = 8  # type: ignore[misc]
    changed = job.with_(batch_size=8)
    assert job.batch_size == 32 and changed.batch_size == 8


def test_with_validates():
    with pytest.raises(JobError, match="'batch_size'"):
        Job("resnet50").with_(batch_size=0)


# ----------------------------------------------------------------------------- validation

INVALID = [
    ("batch_size", 0),
    ("batch_size", -1),
    ("batch_size", "8"),
    ("batch_size", True),
    ("batch_size", 8.0),
    ("batch_size", MAX_BATCH_SIZE + 1),
    ("precision", "fp4"),
    ("precision", "FP32"),
    ("mode", "eval"),
    ("optimizer", "lamb"),
    ("gpus", 0),
    ("gpus", True),
    ("input_pipeline_s", -1),
    ("input_pipeline_s", float("nan")),
    ("input_pipeline_s", float("inf")),
    ("input_pipeline_s", "0.1"),
    ("seq_len", 0),
    ("seq_len", "128"),
    ("input_shape", "3,x"),
    ("input_shape", "3,,224"),
    ("input_shape", ""),
    ("input_shape", [3, 0, 224]),
    ("input_shape", []),
    ("input_shape", [3.5, 224]),
    ("input_shape", ("a",)),
    ("input_shape", [True, 224]),
    ("input_shape", 5),
    ("model", ""),
    ("model", 5),
    ("model", None),
]


@pytest.mark.parametrize("field,value", INVALID, ids=[f"{f}={v!r}" for f, v in INVALID])
def test_invalid_field_raises_one_line_naming_it(field, value):
    spec = {"model": "resnet50", field: value}
    with pytest.raises(JobError) as direct:
        Job(**spec)
    _assert_one_line(direct.value, f"'{field}'")
    with pytest.raises(JobError) as loaded:  # the same check reached through a file's dict
        Job.from_dict(spec)
    assert str(loaded.value) == str(direct.value)


def test_job_error_is_a_value_error():
    assert issubclass(JobError, ValueError)


def test_unknown_zoo_model_suggests_a_name():
    with pytest.raises(JobError) as e:
        Job("resnet5")
    _assert_one_line(e.value, "'model'", "'resnet5'", "did you mean", "resnet50")
    with pytest.raises(JobError) as e:
        Job("zzzzzz-not-a-model")
    _assert_one_line(e.value, "'model'", "gpucast zoo")


def test_missing_model():
    with pytest.raises(JobError) as e:
        Job.from_dict({"batch_size": 8})
    _assert_one_line(e.value, "'model'", "required")


def test_unknown_field_in_a_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("model: resnet50\nbatchsize: 8\n")
    with pytest.raises(JobError) as e:
        Job.load(path)
    _assert_one_line(e.value, "'batchsize'", "batch_size")
    # The factories of a module job are not spec fields either.
    with pytest.raises(JobError, match="'model_fn'"):
        Job.from_dict({"model": "resnet50", "model_fn": "os:system"})


def test_invalid_value_in_a_file_names_the_field(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "resnet50", "precision": "fp4"}))
    with pytest.raises(JobError) as e:
        Job.load(path)
    _assert_one_line(e.value, "'precision'", "fp4")


@pytest.mark.parametrize("name,text", [
    ("bad.json", '{"model": "resnet50",'),
    ("bad.json", "model: resnet50"),
    ("bad.yaml", "model: [resnet50\nbatch_size: 8\n"),
    ("bad.yml", "model: resnet50\n  batch_size: 8\n\tx"),
    ("list.yaml", "- model: resnet50\n"),
    ("empty.yaml", ""),
    ("scalar.json", "42"),
])
def test_malformed_file_gives_one_line_naming_it(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(JobError) as e:
        Job.load(path)
    _assert_one_line(e.value, str(path))


def test_unreadable_files_give_one_line_naming_them(tmp_path):
    for path in (tmp_path / "missing.yaml", tmp_path):  # absent; a directory
        with pytest.raises(JobError) as e:
            Job.load(path)
        _assert_one_line(e.value, str(path))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(JobError) as e:
        Job.load(binary)
    _assert_one_line(e.value, str(binary))


def test_module_job_cannot_come_from_a_file(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "module:os:system"}))
    with pytest.raises(JobError) as e:
        Job.load(path)
    _assert_one_line(e.value, "'model'", "Job.from_module")


# ----------------------------------------------------------------------------- save

def test_save_leaves_no_temp_file_and_overwrites(tmp_path):
    path = tmp_path / "job.json"
    Job("resnet50").save(path)
    _full_job().save(path)
    assert os.listdir(tmp_path) == ["job.json"]
    assert Job.load(path) == _full_job()


def test_failed_save_writes_nothing(tmp_path):
    target_dir = tmp_path / "a-directory.json"
    target_dir.mkdir()
    with pytest.raises(OSError):
        Job("resnet50").save(target_dir)  # the final rename fails: the temp file must go too
    assert os.listdir(tmp_path) == ["a-directory.json"] and not os.listdir(target_dir)
    with pytest.raises(OSError):
        Job("resnet50").save(tmp_path / "no-such-dir" / "job.yaml")
    assert os.listdir(tmp_path) == ["a-directory.json"]


def _model_fn():
    raise AssertionError("a Job never calls its factories")


def _input_fn(batch_size):
    raise AssertionError("a Job never calls its factories")


def test_saving_a_module_job_is_refused(tmp_path):
    job = Job.from_module(_model_fn, _input_fn, batch_size=8, optimizer="adam", precision="amp-fp16",
                          mode="train")
    for name in ("job.json", "job.yaml"):
        with pytest.raises(JobError) as e:
            job.save(tmp_path / name)
        _assert_one_line(e.value, "'model'")
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- from_module

def test_from_module_fields():
    loss = lambda out, inputs: out  # noqa: E731
    job = Job.from_module(_model_fn, _input_fn, batch_size=8, optimizer="adam", precision="amp-bf16",
                          mode="train", loss_fn=loss)
    assert job.is_module and not Job("resnet50").is_module
    assert job.model == f"module:{__name__}:_model_fn"
    assert (job.batch_size, job.optimizer, job.precision, job.mode) == (8, "adam", "amp-bf16", "train")
    assert job.model_fn is _model_fn and job.input_fn is _input_fn and job.loss_fn is loss
    assert set(job.to_dict()) == set(SPEC_FIELDS)
    assert Job.from_module(_model_fn, _input_fn, batch_size=8, optimizer=None, mode="infer").optimizer == "none"


def test_from_module_keeps_factories_out_of_equality():
    def model_a():
        raise AssertionError

    def model_b():
        raise AssertionError

    a = Job.from_module(model_a, lambda b: (), batch_size=8, optimizer="sgd", precision="fp32", mode="train",
                        name="my-net")
    b = Job.from_module(model_b, lambda b: (), batch_size=8, optimizer="sgd", precision="fp32", mode="train",
                        name="my-net", loss_fn=lambda o, i: o)
    assert a == b and hash(a) == hash(b) and a.key == b.key
    assert a.model_fn is not b.model_fn
    assert "model_fn" not in repr(a)
    assert a != a.with_(batch_size=16)
    assert a.with_(batch_size=16).model_fn is model_a  # with_ keeps the factories


def test_from_module_validates():
    with pytest.raises(JobError) as e:
        Job.from_module("not callable", _input_fn, batch_size=8, optimizer="sgd", precision="fp32", mode="train")
    _assert_one_line(e.value, "'model_fn'")
    with pytest.raises(JobError) as e:
        Job.from_module(_model_fn, None, batch_size=8, optimizer="sgd", precision="fp32", mode="train")
    _assert_one_line(e.value, "'input_fn'")
    for field, value in (("batch_size", 0), ("precision", "fp4"), ("mode", "eval"), ("optimizer", "lamb")):
        kwargs = {**dict(batch_size=8, optimizer="sgd", precision="fp32", mode="train"), field: value}
        with pytest.raises(JobError) as e:
            Job.from_module(_model_fn, _input_fn, **kwargs)
        _assert_one_line(e.value, f"'{field}'")


def test_module_job_needs_its_factories():
    with pytest.raises(JobError) as e:
        Job(model="module:pkg:Net")
    _assert_one_line(e.value, "'model'", "from_module")


# ----------------------------------------------------------------------------- import cost

def test_import_and_use_does_not_import_torch(tmp_path):
    code = ("import sys\n"
            "import gpucast.job\n"
            "assert 'torch' not in sys.modules, 'import gpucast.job imported torch'\n"
            "from gpucast.job import Job\n"
            "j = Job('resnet50', batch_size=64, precision='amp-bf16')\n"
            "j.key, hash(j)\n"
            f"j.save({str(tmp_path / 'j.yaml')!r}); Job.load({str(tmp_path / 'j.yaml')!r})\n"
            "assert 'torch' not in sys.modules, 'validating, hashing or saving a Job imported torch'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
