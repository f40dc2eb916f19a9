"""The on-disk cache of predictions (gpucast.disk_cache) and `gpucast predict` answering from it.

The CLI runs are real processes, started together by one module fixture (a miss imports torch and
traces a model: seconds on a busy 2-core box); every other test is in-process and never imports
torch (but the three that key Hugging Face configs and list their model types, which import
transformers). No test asserts a time: a hit is checked by what it imports, not by how fast it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from gpucast import disk_cache
from gpucast.hardware import get_gpu
from gpucast.job import Job
from gpucast.prediction import Prediction
from gpucast.surroundings import Data
from tests.test_cli import SYNTHETIC_GPU_YAML, TIMEOUT_S, _env

JOB_ARGS = ["predict", "mlp-small", "-b", "16", "--gpu", "t4"]
HF_ARGS = ["predict", "-b", "2", "--seq-len", "32", "--gpu", "t4", "--json", "--hf-config"]
# A made-up tiny BERT (two layers of width 64): a capture of seconds, not minutes.
TINY_BERT = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 256}
HEAVY = ("torch", "torchvision", "transformers")
# Runs the CLI's main in this process, then says on stderr's last line which heavy modules it loaded.
RUNNER = f"""
import json, sys
from gpucast.cli import main

sys.argv = ["gpucast", *json.loads(sys.argv[1])]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
print("HEAVY=" + json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def _synthetic_prediction(**changes) -> Prediction:
    """A made-up prediction (no number is a model's): every field set, tuples included."""
    p = Prediction(
        job={"model": "mlp-small", "batch_size": 16, "input_shape": [3, 4], "seq_len": None}, job_key="0" * 16,
        gpu="t4", gpu_util_pct=41.25, gpu_util_interval=(30.5, 60.0), memory_peak_bytes=123456789,
        memory_interval=(100, 200), step_time_s=0.1 + 0.2, step_time_interval=(0.25, 0.5), gpu_busy_s=1e-3,
        host_time_s=2.5e-4, flops=10**12, bytes=2**33, kernels=17, ops=40, parameters=1000,
        memory_allocated_peak_bytes=99, fits_in_memory=True, bottleneck="launch-bound", bottleneck_reason="why",
        op_coverage=0.9876, time_coverage=1.0, uncosted_ops={"aten.foo": 2}, model_version="analytic-0.0.0",
        samples_per_s=53.333333333333336, notes=("a note", "é unicode"),
        surroundings={"data": {"source": "memory", "num_workers": 0}, "stack": {"torch": "2.4"}},
        loader_time_s=3e-5, gpu_idle_gaps=3, gpu_held_pct=38.0, gpu_held_interval=(30.0, 40.0), gpu_syncs=2)
    return replace(p, **changes)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GPUCAST_NO_CACHE", raising=False)
    return tmp_path / disk_cache.SUBDIR


# ----------------------------------------------------------------------------- the CLI, end to end
def _gpucast(args: list, cache_dir, **extra_env) -> subprocess.CompletedProcess:
    env = {k: v for k, v in _env().items() if k != "GPUCAST_NO_CACHE"}
    env.update(GPUCAST_CACHE_DIR=str(cache_dir), **extra_env)
    p = subprocess.run([sys.executable, "-c", RUNNER, json.dumps([str(a) for a in args])], capture_output=True,
                       text=True, env=env, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    lines = p.stderr.splitlines()
    p.heavy = json.loads(lines[-1].removeprefix("HEAVY=")) if lines and lines[-1].startswith("HEAVY=") else None
    p.stderr = "\n".join(lines[:-1])
    return p


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A miss, then hits of the same job (table and --json), in one cache; beside them, the
    same job with --no-cache and with GPUCAST_NO_CACHE=1, each in an empty cache of its own."""
    shared, flag, var, hf = (tmp_path_factory.mktemp(n) for n in ("shared", "flag", "var", "hf"))

    def warm_then_hits():
        miss = _gpucast(JOB_ARGS, shared)
        return miss, _gpucast(JOB_ARGS, shared), _gpucast(JOB_ARGS + ["--json"], shared)

    def hf_config_runs():
        """A config.json job: a miss, a hit, then the file edited (a miss again)."""
        config = hf / "config.json"
        config.write_text(json.dumps(TINY_BERT))
        args = HF_ARGS + [config]
        miss, hit = _gpucast(args, hf / "cache"), _gpucast(args, hf / "cache")
        config.write_text(json.dumps({**TINY_BERT, "num_hidden_layers": 3}))
        return miss, hit, _gpucast(args, hf / "cache")

    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(warm_then_hits)
        hf_runs = pool.submit(hf_config_runs)
        no_cache_flag = pool.submit(_gpucast, JOB_ARGS + ["--json", "--no-cache"], flag)
        no_cache_var = pool.submit(_gpucast, JOB_ARGS + ["--json"], var, GPUCAST_NO_CACHE="1")
        miss, hit, hit_json = first.result()
        hf_miss, hf_hit, hf_changed = hf_runs.result()
        out = {"miss": miss, "hit": hit, "hit_json": hit_json, "flag": no_cache_flag.result(),
               "var": no_cache_var.result(), "hf_miss": hf_miss, "hf_hit": hf_hit, "hf_changed": hf_changed}
    for name, p in out.items():
        assert p.returncode == 0, f"{name}: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return out, {"shared": shared, "flag": flag, "var": var}


@pytest.mark.slow  # the module fixture's real CLI processes
def test_a_hit_prints_what_the_miss_printed_without_importing_torch(runs):
    r, _ = runs
    assert "torch" in r["miss"].heavy  # the check sees torch where a capture ran
    assert r["hit"].heavy == [] and r["hit_json"].heavy == []
    assert r["hit"].stdout == r["miss"].stdout and r["hit"].stderr == r["miss"].stderr
    assert "gpucast prediction" in r["hit"].stdout and "mlp-small" in r["hit"].stdout


@pytest.mark.slow  # the module fixture's real CLI processes
def test_a_json_hit_is_byte_identical_to_a_fresh_prediction(runs):
    r, dirs = runs
    assert "torch" in r["flag"].heavy  # --no-cache predicted afresh
    assert r["hit_json"].stdout == r["flag"].stdout
    (entry,) = (dirs["shared"] / disk_cache.SUBDIR).glob("*.json")
    stored = json.loads(entry.read_text())["prediction"]
    assert stored == json.loads(r["hit_json"].stdout)
    assert Prediction.from_dict(stored).to_dict() == stored


@pytest.mark.slow  # the module fixture's real CLI processes
def test_no_cache_flag_and_variable_neither_write_nor_read(runs):
    r, dirs = runs
    assert "torch" in r["var"].heavy
    assert r["var"].stdout == r["flag"].stdout
    for name in ("flag", "var"):
        assert not (dirs[name] / disk_cache.SUBDIR).exists(), name


@pytest.mark.slow  # the module fixture's real CLI processes
def test_a_config_file_asked_again_is_a_hit_without_transformers(runs):
    r, _ = runs
    assert "transformers" in r["hf_miss"].heavy and "torch" in r["hf_miss"].heavy  # checked and captured
    assert r["hf_hit"].heavy == []  # the config's model type checked from the remembered list
    assert r["hf_hit"].stdout == r["hf_miss"].stdout
    assert json.loads(r["hf_hit"].stdout)["job"]["model"] == "hf:bert"


@pytest.mark.slow  # the module fixture's real CLI processes
def test_an_edited_config_file_misses(runs):
    r, _ = runs
    assert "torch" in r["hf_changed"].heavy  # captured afresh
    changed, before = json.loads(r["hf_changed"].stdout), json.loads(r["hf_miss"].stdout)
    assert changed["job_key"] != before["job_key"] and changed["parameters"] > before["parameters"]


def test_the_key_of_a_config_file_is_its_content(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_BERT))
    one = _key(Job.from_hf_config(path, batch_size=2))
    path.write_text(json.dumps(TINY_BERT, indent=4) + "\n")  # the same content, written otherwise
    assert _key(Job.from_hf_config(path, batch_size=2)) == one
    path.write_text(json.dumps({**TINY_BERT, "vocab_size": 1001}))
    assert _key(Job.from_hf_config(path, batch_size=2)) != one


# ----------------------------------------------------------------------------- remembered values
def test_a_remembered_value_is_computed_once_per_parts(cache):
    calls = []

    def compute():
        calls.append(1)
        return {"b": 2, "a": [1, "x"]}

    assert disk_cache.remembered("thing", ["v1"], compute) == {"b": 2, "a": [1, "x"]}
    assert disk_cache.remembered("thing", ["v1"], compute) == {"b": 2, "a": [1, "x"]} and len(calls) == 1
    assert list(disk_cache.remembered("thing", ["v1"], compute)) == ["b", "a"]  # order kept
    assert disk_cache.remembered("thing", ["v2"], compute) and len(calls) == 2  # other parts: recomputed
    assert disk_cache.remembered("thing", ["v2"], compute) and len(calls) == 2  # and replaced
    assert [f.name for f in (cache.parent / disk_cache.MEMO_SUBDIR).iterdir()] == ["thing.json"]


def test_concurrent_processes_remembering_one_name_leave_whole_files(cache):
    # Four processes write the same memo name over and over (other parts each time, so each call
    # writes) while this one reads it: every read is a whole file of one writer, never half of one.
    code = ("import sys\nfrom gpucast import disk_cache\nw = int(sys.argv[1])\n"
            "for i in range(60):\n    disk_cache.remembered('thing', [w, i], lambda: {'who': w, 'pad': 'x' * 20000})\n")
    env = {**os.environ, "GPUCAST_CACHE_DIR": str(cache.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], env=env) for w in range(4)]
    path, seen = cache.parent / disk_cache.MEMO_SUBDIR / "thing.json", set()
    while any(p.poll() is None for p in procs):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        assert doc["value"]["pad"] == "x" * 20000
        seen.add(doc["value"]["who"])
    assert [p.wait(timeout=TIMEOUT_S) for p in procs] == [0] * 4
    assert seen <= {0, 1, 2, 3}
    assert [f.name for f in path.parent.iterdir()] == ["thing.json"]  # no temporary file left


@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"format": 1, "key": "other", "value": 1}'])
def test_a_corrupt_remembered_value_is_recomputed(cache, text):
    memo = cache.parent / disk_cache.MEMO_SUBDIR
    memo.mkdir(parents=True)
    (memo / "thing.json").write_text(text)
    assert disk_cache.remembered("thing", 1, lambda: 7) == 7
    assert disk_cache.remembered("thing", 1, lambda: 8) == 7  # rewritten whole


def test_remembering_off_or_unwritable_just_computes(cache, monkeypatch):
    monkeypatch.setenv("GPUCAST_CACHE_DIR", "off")
    assert [disk_cache.remembered("thing", 1, lambda: n) for n in (1, 2)] == [1, 2]
    blocker = cache.parent / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(blocker))
    assert [disk_cache.remembered("thing", 1, lambda: n) for n in (1, 2)] == [1, 2]


def test_hf_model_types_are_remembered_per_transformers_install(cache, monkeypatch):
    from gpucast.graph import hf

    monkeypatch.setattr(hf, "_TYPES", None)
    types = hf._model_types()
    assert types["bert"] == "BertConfig"
    monkeypatch.setattr(hf, "_TYPES", None)
    monkeypatch.setattr(hf, "_import_model_types", lambda: pytest.fail("listed again: not remembered"))
    assert hf._model_types() == types
    monkeypatch.setattr(hf, "_TYPES", None)
    monkeypatch.setattr(hf, "_DIGEST", ["another transformers"])
    monkeypatch.setattr(hf, "_import_model_types", lambda: {"other": "OtherConfig"})
    assert hf._model_types() == {"other": "OtherConfig"}


def test_a_named_configs_defaults_are_remembered_too(cache, monkeypatch):
    from gpucast.graph import hf

    job = Job.from_hf_config("BertConfig", batch_size=2)
    monkeypatch.setattr(hf, "_import_defaults", lambda t: pytest.fail("defaults made again: not remembered"))
    assert Job.from_hf_config("bert", batch_size=2) == job  # the class's name or its model type: one job
    assert (cache.parent / disk_cache.MEMO_SUBDIR / "hf-defaults-bert.json").is_file()


# ----------------------------------------------------------------------------- round trip
def test_prediction_round_trips_through_json():
    p = _synthetic_prediction()
    back = Prediction.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back == p and back.to_dict() == p.to_dict()
    assert isinstance(back.gpu_util_interval, tuple) and isinstance(back.notes, tuple)


def test_store_then_load_is_equal(cache):
    p = _synthetic_prediction()
    disk_cache.store("k1", p)
    assert disk_cache.load("k1") == p
    assert disk_cache.load("k2") is None
    assert [f.name for f in cache.iterdir()] == ["k1.json"]  # no temporary file left


# ----------------------------------------------------------------------------- what the key covers
def _key(job=None, gpu="t4", **kw) -> str:
    return disk_cache.key(job or Job("mlp-small", batch_size=16), get_gpu(gpu), **kw)


def test_key_is_stable_and_follows_the_job_and_gpu():
    assert _key() == _key()
    assert _key(Job("mlp-small", batch_size=32)) != _key()
    assert _key(gpu="a100-80gb") != _key()


def test_a_changed_gpu_spec_file_misses(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(SYNTHETIC_GPU_YAML)
    before = _key(gpu=path)
    path.write_text(SYNTHETIC_GPU_YAML.replace("memory_bandwidth_gbs: 500", "memory_bandwidth_gbs: 600"))
    assert _key(gpu=path) != before
    path.write_text(SYNTHETIC_GPU_YAML + "\n# a comment changes no field\n")
    assert _key(gpu=path) == before


def test_a_changed_environment_misses(tmp_path):
    from gpucast.estimate.environment import Environment
    from gpucast.learn.artifacts import load_environment

    default = _key()
    assert _key(env=Environment.default()) != default  # given, not None: its fields are in the key
    changed = Environment.default().replace(memory_sample_s=1e-5)
    assert _key(env=changed) != _key(env=Environment.default())
    path = tmp_path / "env.yaml"
    path.write_text("memory_sample_s: 1.0e-5\n")
    one = _key(env=load_environment(path)[0])
    path.write_text("memory_sample_s: 2.0e-5\n")
    two = _key(env=load_environment(path)[0])
    assert len({default, one, two}) == 3


def test_window_and_option_files_are_in_the_key(tmp_path):
    assert len({_key(), _key(window_s=30.0), _key(window_s=60.0)}) == 3
    f = tmp_path / "constants.yaml"
    f.write_text("a: 1\n")
    with_file = _key(files=[f])
    f.write_text("a: 2\n")
    assert len({_key(), with_file, _key(files=[f])}) == 3


def test_a_new_version_or_source_misses(monkeypatch):
    before = _key()
    monkeypatch.setattr(disk_cache, "_fingerprint", None)
    monkeypatch.setattr(disk_cache, "__version__", "999.0")
    assert _key() != before
    monkeypatch.setattr(disk_cache, "_fingerprint", None)
    monkeypatch.setattr(disk_cache, "__version__", disk_cache.__version__)
    monkeypatch.setattr(disk_cache, "DATA_FILES", disk_cache.DATA_FILES[:-1])
    assert _key() != before


# ----------------------------------------------------------------------------- misses and rewrites
@pytest.mark.parametrize("text", ["", "{not json", '{"format": 1, "key": "other", "prediction": {}}',
                                  '{"format": 1, "key": "k", "prediction": {"gpu": "t4"}}', "[]"])
def test_a_corrupt_entry_is_a_miss_and_is_rewritten(cache, text):
    job, spec = Job("mlp-small", batch_size=16), get_gpu("t4")
    k = disk_cache.key(job, spec)
    cache.mkdir(parents=True)
    (cache / f"{k}.json").write_text(text.replace('"k"', json.dumps(k)))
    assert disk_cache.load(k) is None
    calls = []
    p = _synthetic_prediction()
    assert disk_cache.predictions(job, [spec], lambda s: calls.append(s) or p) == [p]
    assert calls == [spec] and disk_cache.load(k) == p


def test_a_hit_does_not_compute(cache):
    job, specs = Job("mlp-small", batch_size=16), [get_gpu("t4"), get_gpu("h100")]
    preds = {s.name: _synthetic_prediction(gpu=s.name) for s in specs}
    calls = []

    def compute(s):
        calls.append(s.name)
        return preds[s.name]

    assert disk_cache.predictions(job, specs, compute) == list(preds.values())
    assert disk_cache.predictions(job, specs, compute) == list(preds.values())
    assert calls == ["t4", "h100"]


def test_concurrent_writers_leave_one_valid_entry(cache):
    k = "same-key"
    code = ("import sys\nfrom gpucast import disk_cache\nfrom tests.test_disk_cache import _synthetic_prediction\n"
            "p = _synthetic_prediction(kernels=int(sys.argv[1]))\n"
            "for _ in range(40):\n    disk_cache.store(sys.argv[2], p)\n")
    env = {**os.environ, "GPUCAST_CACHE_DIR": str(cache.parent), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i), k], env=env) for i in range(4)]
    while any(p.poll() is None for p in procs):
        got = disk_cache.load(k)
        if got is not None:  # never half an entry: a whole prediction of one writer
            assert got == _synthetic_prediction(kernels=got.kernels)
    assert [p.wait(timeout=TIMEOUT_S) for p in procs] == [0] * 4
    final = disk_cache.load(k)
    assert final is not None and final.kernels in range(4)
    assert [f.name for f in cache.iterdir()] == [f"{k}.json"]


# ----------------------------------------------------------------------------- never cached, or off
def _never(job, cache) -> None:
    calls = []
    for _ in range(2):
        disk_cache.predictions(job, [get_gpu("t4")], lambda s: calls.append(1) or _synthetic_prediction())
    assert len(calls) == 2 and not cache.exists()


def test_module_jobs_are_never_cached(cache):
    job = Job.from_module(lambda: None, lambda b: (), batch_size=4, name="mine")
    assert job.is_module and not disk_cache.cacheable(job)
    _never(job, cache)


@pytest.mark.parametrize("data", [Data(dataset="ds.py:build"), Data(dataset="ds.py:build", collate="c.py:fn"),
                                  Data(environment="env.py:make")])
def test_jobs_that_measure_their_own_data_are_never_cached(cache, data):
    job = Job("mlp-small", batch_size=16, data=data)
    assert not disk_cache.cacheable(job)
    _never(job, cache)
    assert disk_cache.cacheable(Job("mlp-small", data=Data(source="memory", num_workers=2)))


@pytest.mark.parametrize("var,value", [("GPUCAST_NO_CACHE", "1"), ("GPUCAST_NO_CACHE", "yes"),
                                       ("GPUCAST_CACHE_DIR", "off")])
def test_turned_off_it_neither_reads_nor_writes(cache, monkeypatch, var, value):
    job, spec = Job("mlp-small", batch_size=16), get_gpu("t4")
    disk_cache.store(disk_cache.key(job, spec), _synthetic_prediction(kernels=1))
    monkeypatch.setenv(var, value)
    assert disk_cache.directory() is None
    fresh = _synthetic_prediction(kernels=2)
    assert disk_cache.predictions(job, [spec], lambda s: fresh) == [fresh]
    monkeypatch.delenv(var)
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(cache.parent))
    assert disk_cache.load(disk_cache.key(job, spec)).kernels == 1  # not overwritten
    assert disk_cache.predictions(job, [spec], lambda s: fresh, enabled=False) == [fresh]  # --no-cache


def test_where_it_lives(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUCAST_NO_CACHE", raising=False)
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(tmp_path / "c"))
    assert disk_cache.directory() == tmp_path / "c" / "predict"
    monkeypatch.delenv("GPUCAST_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.directory() == tmp_path / "xdg" / "gpucast" / "predict"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert disk_cache.directory() == tmp_path / "home" / ".cache" / "gpucast" / "predict"


def test_an_unwritable_cache_is_skipped(cache, monkeypatch):
    blocker = cache.parent / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(blocker))
    p = _synthetic_prediction()
    assert disk_cache.predictions(Job("mlp-small"), [get_gpu("t4")], lambda s: p) == [p]


# ----------------------------------------------------------------------------- size bound
def test_prune_keeps_the_most_recently_used(tmp_path):
    for i in range(10):
        f = tmp_path / f"{i:02d}.json"
        f.write_text("x" * 100)
        os.utime(f, ns=(i * 10**9, i * 10**9))
    (tmp_path / ".old.json.abc.tmp").write_text("half")
    os.utime(tmp_path / ".old.json.abc.tmp", (0, 0))
    assert disk_cache.prune(tmp_path, max_entries=6) == 5  # 4 oldest entries and the stale temp file
    assert sorted(f.name for f in tmp_path.iterdir()) == [f"{i:02d}.json" for i in range(4, 10)]
    assert disk_cache.prune(tmp_path, max_entries=100, max_bytes=250) == 4
    assert sorted(f.name for f in tmp_path.iterdir()) == ["08.json", "09.json"]


def test_a_hit_counts_as_recent_use(cache):
    disk_cache.store("old", _synthetic_prediction())
    disk_cache.store("new", _synthetic_prediction())
    os.utime(cache / "old.json", (0, 0))
    os.utime(cache / "new.json", (1000, 1000))
    assert disk_cache.load("old") is not None  # touched: now the most recent
    assert disk_cache.prune(cache, max_entries=1) == 1
    assert [f.name for f in cache.iterdir()] == ["old.json"]
