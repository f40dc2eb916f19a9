"""Slurm: the --gres translation, `gpucast slurm`, and the shipped job_submit.lua plugin.

The plugin inside a real slurmctld is test_slurm_live.py (Debian's Slurm 22.05, which links Lua
5.1). Here its logic runs in every Lua that Slurm builds against, by a real Lua
interpreter (``lupa``: LuaJIT, and PUC Lua 5.1 to 5.4, the versions Slurm builds against; lupa
builds PUC Lua without ``io.popen``, so there a shim runs the same shell command) with a stub ``slurm``
table (``SUCCESS``, ``ERROR``, ``log_info``, ``log_user``) and plain tables as ``job_desc``: that
stub is the Slurm boundary, written from Slurm's job_submit_lua.c (field names ``comment``,
``environment``, ``work_dir``, ``tres_per_node``, ``tres_per_job``...). Behind it everything is
real: the plugin's ``io.popen`` runs the real ``gpucast slurm`` once end to end, and otherwise a
recorder command that checks the arguments and spec file the plugin passes (``--service`` and its
options included) and replays output the real command printed in this session. The plugin with
the real command and a real ``gpucast serve`` is in test_slurm_service.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucast.api import predict
from gpucast.cli import app
from gpucast.integrations.resources import gpu_share
from gpucast.integrations.slurm import gres_request, lua_plugin_path
from gpucast.prediction import Prediction
from made_predictions import made_prediction

GPU = "a100-80gb"
SMALL = {"model": "mlp-small", "batch_size": 32}
LARGE = {"model": "resnet50", "batch_size": 64}
BIN = Path(sys.executable).with_name("gpucast")
QUOTED = "it's here.json"  # a file name with a quote and a space
# A small Llama trained with FSDP on 16 GPUs: its plan spans two 8-GPU nodes (a cheap capture).
FSDP16 = """model: hf:llama
hf_config: {model_type: llama, hidden_size: 512, intermediate_size: 1376, num_hidden_layers: 4,
            num_attention_heads: 8, num_key_value_heads: 8, vocab_size: 1000, max_position_embeddings: 256}
batch_size: 4
seq_len: 256
precision: bf16
optimizer: adamw
gpus: 16
parallel: {sharding: fsdp-full}
"""


def _pred(util=30.0, mem_hi=2**30, **kw) -> Prediction:
    return made_prediction(util, mem_hi, **kw)


# ------------------------------------------------------------------ the translation, by hand
def test_shards_mps_and_whole_gpus():
    p = _pred(util=30.0)                                           # share 0.40
    assert gres_request(p).sbatch == "--gres=shard:4"              # ceil(0.40 x 8) = ceil(3.2)
    assert gres_request(p, shards_per_gpu=16).gres == "shard:7"    # ceil(6.4)
    assert gres_request(p, mps=True).sbatch == "--gres=mps:40"
    assert gres_request(p, mps=True, mps_per_gpu=1000).gres == "mps:400"
    assert gres_request(p).tres_per_node == "gres/shard:4"
    assert gres_request(_pred(util=25.0), shards_per_gpu=20).count == 7    # 0.35 x 20 is 7.000000000000001
    assert gres_request(_pred(util=0.0), shards_per_gpu=2).gres == "shard:1"  # 0.10 x 2 = 0.2 -> at least 1
    assert gres_request(_pred(util=84.0), shards_per_gpu=4).gres == "shard:4"  # 0.95 x 4 = 3.8 -> 4, at most all
    assert gres_request(_pred(util=95.0)).sbatch == "--gres=gpu:1"          # exclusive
    assert gres_request(_pred(util=95.0), mps=True).gres == "gpu:1"
    assert gres_request(_pred(util=20.0, gpus=4)).gres == "gpu:4"           # shards fit one GPU only
    assert gres_request(_pred(util=20.0, mem_hi=200 * 2**30, fits=False)).gres == "gpu:1"
    d = gres_request(p).to_dict()
    assert d["share"] == 0.4 and d["kind"] == "shard" and d["count"] == 4 and d["exclusive"] is False


def test_a_plan_across_nodes_asks_for_whole_exclusive_nodes():
    req = gres_request(_pred(util=20.0, gpus=16, nodes=2))
    assert req.sbatch == "--nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --exclusive"
    assert req.gres == "gpu:8" and req.tres_per_node == "gres/gpu:8"        # per node, as Slurm counts GRES
    assert gres_request(_pred(util=20.0, gpus=16, nodes=2), mps=True).sbatch == req.sbatch   # never MPS
    d = req.to_dict()
    assert (d["nodes"], d["whole_nodes"], d["gpus_per_node"], d["gpus"], d["exclusive"]) == (2, True, 8, 16, True)
    assert d["sbatch_options"] == ["--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive"]
    # 12 GPUs on 8-GPU nodes: two whole nodes, 12 tasks (8 + 4)
    assert gres_request(_pred(gpus=12, nodes=2)).sbatch == "--nodes=2 --ntasks=12 --gpus-per-node=8 --exclusive"
    # a plan inside one node: its GPUs on one node, as a data-parallel job (and exclusive, not shards)
    one = gres_request(_pred(util=20.0, gpus=8, nodes=1))
    assert one.sbatch == "--gres=gpu:8" and one.to_dict()["nodes"] == 1 and one.to_dict()["sbatch_options"] == [
        "--gres=gpu:8"]
    assert gres_request(_pred(util=20.0)).to_dict()["gpus_per_node"] == 1      # a share of one GPU


@pytest.mark.parametrize("kw", [dict(shards_per_gpu=0), dict(mps_per_gpu=-1), dict(shards_per_gpu=2.5),
                                dict(shards_per_gpu=True)])
def test_bad_site_counts(kw):
    with pytest.raises(ValueError, match="positive integer"):
        gres_request(_pred(), **kw)


# ------------------------------------------------------------------ the command
def invoke(*args):
    return CliRunner().invoke(app, ["slurm", *[str(a) for a in args]])


def assert_one_error(result, start: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    assert result.stdout == ""


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    (d / "small.json").write_text(json.dumps(SMALL))
    (d / "large.yaml").write_text("model: resnet50\nbatch_size: 64\n")
    (d / "ddp.yaml").write_text("model: mlp-small\nbatch_size: 32\ngpus: 2\n")
    (d / "fsdp16.yaml").write_text(FSDP16)
    (d / "broken.yaml").write_text("model: [resnet50\n")
    (d / "unknown.json").write_text(json.dumps({"model": "resnet-9000"}))
    return d


def test_command_prints_the_gres_option(specs):
    share = gpu_share(predict(SMALL, GPU)).share
    assert 0 < share < 1
    r = invoke(specs / "small.json")
    assert r.exit_code == 0 and r.stdout == f"--gres=shard:{math.ceil(round(share * 8, 9))}\n", r.stdout
    r = invoke(specs / "small.json", "--shards-per-gpu", 16)
    assert r.stdout == f"--gres=shard:{math.ceil(round(share * 16, 9))}\n"
    r = invoke(specs / "small.json", "--mps")
    assert r.stdout == f"--gres=mps:{math.ceil(round(share * 100, 9))}\n"
    r = invoke(specs / "small.json", "--mps", "--mps-per-gpu", 400)
    assert r.stdout == f"--gres=mps:{math.ceil(round(share * 400, 9))}\n"
    assert invoke(specs / "large.yaml").stdout == "--gres=gpu:1\n"        # resnet50 b64: exclusive
    assert invoke(specs / "ddp.yaml").stdout == "--gres=gpu:2\n"          # data parallel: whole GPUs


def test_command_asks_for_two_whole_nodes_for_a_16_gpu_fsdp_plan(specs):
    from gpucast.job import Job

    p = predict(Job.load(specs / "fsdp16.yaml"), GPU)
    assert p.plan["nodes"] == 2 and p.plan["gpus_per_node"] == 8       # the plan itself spans two nodes
    r = invoke(specs / "fsdp16.yaml")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "--nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --exclusive\n"
    out = json.loads(invoke(specs / "fsdp16.yaml", "--json", "--mps").stdout)
    assert out["nodes"] == 2 and out["whole_nodes"] is True and out["tres_per_node"] == "gres/gpu:8"
    assert out["kind"] == "gpu" and out["exclusive"] is True and out["job"]["parallel"] == {"sharding": "fsdp-full"}


def test_command_json(specs):
    r = invoke(specs / "small.json", "--json", "--gpu", "h100")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    p = predict(SMALL, "h100")
    req = gres_request(p)
    assert out["sbatch"] == req.sbatch and out["tres_per_node"] == f"gres/{out['gres']}" == req.tres_per_node
    assert out["gpu"] == "h100" and out["share"] == gpu_share(p).share and out["job"]["model"] == "mlp-small"
    assert out["prediction"]["gpu_util_pct"] == p.gpu_util_pct
    assert out["prediction"]["memory_interval"] == list(p.memory_interval)


@pytest.mark.parametrize("args, start", [
    (["missing.json"], "error: cannot read job file"),
    (["broken.yaml"], "error: job file"),
    (["unknown.json"], "error: field 'model': unknown zoo workload 'resnet-9000'"),
    (["small.json", "--gpu", "tpu-v5"], "error: unknown GPU 'tpu-v5'"),
])
def test_command_errors_are_one_line(specs, args, start):
    assert_one_error(invoke(specs / args[0], *args[1:]), start)


@pytest.mark.skipif(not BIN.exists(), reason="the gpucast console script is not installed")
@pytest.mark.parametrize("args, needle", [(["--shards-per-gpu", "0"], "--shards-per-gpu"),
                                          (["--mps-per-gpu", "x"], "--mps-per-gpu")])
def test_command_usage_errors_exit_2_one_line(specs, args, needle):
    r = subprocess.run([str(BIN), "slurm", str(specs / "small.json"), *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr


# ------------------------------------------------------------------ the job_submit.lua plugin
try:
    import lupa
except ImportError:  # the plugin tests are skipped; the command's are not
    lupa = None
needs_lupa = pytest.mark.skipif(lupa is None, reason="lupa (a Lua runtime, in the dev extra) is not installed")
# LuaJIT (the Lua 5.1 API) has a real io.popen; lupa builds PUC Lua 5.1-5.4 without popen, so there
# the plugin's io.popen is a shim that runs the same shell command through subprocess.
LUA_VERSIONS = [v for v in ("luajit21", "luajit20", "lua51", "lua52", "lua53", "lua54")
                if lupa is not None and hasattr(__import__(f"lupa.{v}"), v)]

POPEN_SHIM = """
local run = ...
io.popen = function(cmd)
  local out = run(cmd)
  return { read = function(self, fmt) return out end, close = function(self) return true end }
end
"""


def _shell(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300).stdout

STUB = """
slurm = { SUCCESS = 0, ERROR = -1 }
_log, _user = {}, {}
function slurm.log_info(fmt, ...) table.insert(_log, string.format(fmt, ...)) end
function slurm.log_user(fmt, ...) table.insert(_user, string.format(fmt, ...)) end
"""


class Plugin:
    """job_submit.lua loaded in a fresh Lua state behind the stub ``slurm`` table."""

    def __init__(self, version: str, **config):
        import importlib

        self.lua = importlib.import_module(f"lupa.{version}").LuaRuntime(unpack_returned_tuples=True)
        self.lua.execute(STUB)
        self.native_popen = self.lua.execute("return (pcall(function() io.popen('true'):close() end))")
        if not self.native_popen:
            self.lua.execute(POPEN_SHIM, _shell)
        g = self.lua.globals()
        # The TRES spelling follows the Slurm version (job_submit.lua, "How it spells"): a fixed
        # answer here, whatever Slurm this machine has; test_plugin_tres_spelling varies it.
        config.setdefault("version_command", "echo slurm 23.11.4")
        g.gpucast_config = self.lua.table_from(config)
        assert self.lua.execute(lua_plugin_path().read_text()) == 0     # the script returns slurm.SUCCESS
        self.g = g

    def job(self, environment=None, **fields):
        jd = self.lua.table_from(fields)
        if environment is not None:
            jd.environment = self.lua.table_from(environment)
        return jd

    def submit(self, job_desc) -> int:
        return self.g.slurm_job_submit(job_desc, self.lua.table(), 1000)

    def modify(self, job_desc) -> int:
        return self.g.slurm_job_modify(job_desc, self.lua.table(), self.lua.table(), 0)

    @property
    def log(self) -> list[str]:
        return list(self.g._log.values())

    @property
    def user(self) -> list[str]:
        return list(self.g._user.values())


@pytest.fixture(scope="module")
def recorder(tmp_path_factory, specs):
    """A stand-in for the gpucast command: records its argv and the spec file it was given, and
    prints what the real `gpucast slurm --json` printed for that spec (run in-process here)."""
    d = tmp_path_factory.mktemp("recorder")
    canned = {}
    for name, spec, extra in (("small", "small.json", []), ("small-mps", "small.json", ["--mps"]),
                              ("large", "large.yaml", [])):
        r = invoke(specs / spec, "--json", *extra)
        assert r.exit_code == 0, r.stderr
        canned[name] = r.stdout
    (d / "canned.json").write_text(json.dumps(canned))
    script = d / "gpucast-recorder"
    script.write_text(f"""#!{sys.executable}
import json, sys
argv = sys.argv[1:]
try:
    text = open(argv[1]).read()
except OSError as exc:
    print(f"error: cannot read job file {{argv[1]!r}}: {{exc.strerror}}", file=sys.stderr)
    sys.exit(2)
with open({str(d / 'calls.jsonl')!r}, "a") as f:
    f.write(json.dumps({{"argv": argv, "spec": text}}) + "\\n")
model = json.loads(text)["model"]
canned = json.load(open({str(d / 'canned.json')!r}))
if "--service" in argv and "down" in argv[argv.index("--service") + 1]:  # as gpucast slurm prints it
    print("warning: gpucast service at http://down:8000 unreachable (Connection refused); predicting locally",
          file=sys.stderr, flush=True)
print(canned["large" if model == "resnet50" else "small-mps" if "--mps" in argv else "small"])
""")
    script.chmod(0o755)
    return d, script, {k: json.loads(v) for k, v in canned.items()}


def calls(recorder) -> list[dict]:
    path = recorder[0] / "calls.jsonl"
    if not path.exists():
        return []
    out = [json.loads(line) for line in path.read_text().splitlines()]
    path.unlink()
    return out


@pytest.fixture
def jobs_dir(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "small.json").write_text(json.dumps(SMALL))
    (tmp_path / "jobs" / "large.json").write_text(json.dumps(LARGE))
    (tmp_path / "jobs" / QUOTED).write_text(json.dumps(SMALL))
    return tmp_path


@needs_lupa
@pytest.mark.skipif(not BIN.exists(), reason="the gpucast console script is not installed")
def test_plugin_end_to_end_with_the_real_command(jobs_dir):
    plugin = Plugin(LUA_VERSIONS[0], command=str(BIN))
    assert plugin.native_popen                                        # LuaJIT: the plugin's own io.popen
    jd = plugin.job(comment=f"gpucast:{jobs_dir / 'jobs' / 'small.json'}", tres_per_node="gres/gpu:1")
    assert plugin.submit(jd) == 0
    share = gpu_share(predict(SMALL, GPU)).share
    assert jd.tres_per_node == f"gres/shard:{math.ceil(round(share * 8, 9))}"
    assert plugin.log[-1] == f"gpucast: job from comment on {GPU}: tres_per_node={jd.tres_per_node}"
    # a spec the real command cannot read: rejected, with gpucast's own error line for the user
    bad = plugin.job(comment="gpucast:/nonexistent/job.yaml")
    assert plugin.submit(bad) == -1 and bad.tres_per_node is None
    assert plugin.user == ["gpucast: cannot size the job (comment): cannot read job file "
                           "'/nonexistent/job.yaml': No such file or directory"]


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_leaves_other_jobs_alone(version, recorder):
    plugin = Plugin(version, command=str(recorder[1]))
    for jd in (plugin.job(comment="nightly run", tres_per_node="gres/gpu:2"),
               plugin.job(tres_per_node="gres/gpu:2", environment={"PATH": "/usr/bin"}),
               plugin.job(tres_per_node="gres/gpu:2")):
        assert plugin.submit(jd) == 0 and jd.tres_per_node == "gres/gpu:2"
    assert plugin.modify(plugin.job(time_limit=60)) == 0
    assert calls(recorder) == [] and plugin.user == []


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_comment_spec_gpu_and_work_dir(version, recorder, jobs_dir):
    d, script, canned = recorder
    plugin = Plugin(version, command=str(script))
    jd = plugin.job(comment="gpucast@h100:jobs/small.json", work_dir=str(jobs_dir))
    assert plugin.submit(jd) == 0
    assert jd.tres_per_node == canned["small"]["tres_per_node"] and jd.tres_per_node.startswith("gres/shard:")
    (call,) = calls(recorder)
    assert call["argv"] == ["slurm", str(jobs_dir / "jobs" / "small.json"), "--gpu", "h100", "--json",
                            "--shards-per-gpu", "8"]
    assert json.loads(call["spec"]) == SMALL


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_environment_replaces_gpu_gres_and_keeps_others(version, recorder, jobs_dir):
    d, script, canned = recorder
    plugin = Plugin(version, command=str(script))
    jd = plugin.job(environment={"GPUCAST_JOB": str(jobs_dir / "jobs" / "large.json"), "GPUCAST_GPU": "a100-80gb"},
                    tres_per_node="gres/gpu:a100:2,gres/nvme:1", tres_per_job="gres/gpu:2", tres_per_task="cpu:2")
    assert plugin.submit(jd) == 0
    assert canned["large"]["tres_per_node"] == "gres/gpu:1"                  # resnet50 b64: a whole GPU
    assert jd.tres_per_node == "gres/nvme:1,gres/gpu:1"
    assert jd.tres_per_job == "" and jd.tres_per_task == "cpu:2"
    (call,) = calls(recorder)
    assert call["argv"][1:4] == [str(jobs_dir / "jobs" / "large.json"), "--gpu", "a100-80gb"]
    assert "environment" in plugin.log[-1]


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_inline_spec_mps_and_quoting(version, recorder, jobs_dir):
    d, script, canned = recorder
    plugin = Plugin(version, command=str(script), use_mps=True, mps_per_gpu=100)
    jd = plugin.job(comment='gpucast:{"model": "mlp-small", "batch_size": 32}')
    assert plugin.submit(jd) == 0
    assert jd.tres_per_node == canned["small-mps"]["tres_per_node"] and jd.tres_per_node.startswith("gres/mps:")
    (call,) = calls(recorder)
    assert json.loads(call["spec"]) == SMALL and call["argv"][-3:] == ["--mps", "--mps-per-gpu", "100"]
    assert not os.path.exists(call["argv"][1])                                # the temporary spec is removed
    # a path with a quote and a space reaches the command as one argument
    jd = plugin.job(comment=f"gpucast:{jobs_dir / 'jobs' / QUOTED}")
    assert plugin.submit(jd) == 0
    (call,) = calls(recorder)
    assert call["argv"][1] == str(jobs_dir / "jobs" / QUOTED)


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_passes_the_service_options(version, recorder, jobs_dir):
    d, script, canned = recorder
    spec = str(jobs_dir / "jobs" / "small.json")
    base = ["slurm", spec, "--gpu", GPU, "--json", "--shards-per-gpu", "8"]
    plugin = Plugin(version, command=str(script))                       # service = nil: nothing added
    assert plugin.submit(plugin.job(comment=f"gpucast:{spec}")) == 0
    (call,) = calls(recorder)
    assert call["argv"] == base and not any(a.startswith("--service") or a == "--no-fallback" for a in call["argv"])
    url = "http://127.0.0.1:8000/a b'c"                                  # quoted as one argument
    plugin = Plugin(version, command=str(script), service=url)
    assert plugin.log[-1].endswith(f"service {url})")
    assert plugin.submit(plugin.job(comment=f"gpucast:{spec}")) == 0
    (call,) = calls(recorder)
    assert call["argv"] == base + ["--service", url]                    # gpucast's default timeout and fallback
    plugin = Plugin(version, command=str(script), service=url, service_timeout=2.5, fallback=False)
    jd = plugin.job(comment=f"gpucast:{spec}")
    assert plugin.submit(jd) == 0 and jd.tres_per_node == canned["small"]["tres_per_node"]
    (call,) = calls(recorder)
    assert call["argv"] == base + ["--service", url, "--service-timeout", "2.5", "--no-fallback"]
    # the service was down and gpucast predicted locally: its warning line is logged, the job sized
    plugin = Plugin(version, command=str(script), service="http://down:8000", service_timeout=3)
    jd = plugin.job(comment=f"gpucast:{spec}")
    assert plugin.submit(jd) == 0 and jd.tres_per_node == canned["small"]["tres_per_node"]
    (call,) = calls(recorder)
    assert call["argv"][-4:] == ["--service", "http://down:8000", "--service-timeout", "3"]
    assert plugin.log[-2:] == ["gpucast: warning: gpucast service at http://down:8000 unreachable (Connection "
                               "refused); predicting locally",
                               f"gpucast: job from comment on {GPU}: tres_per_node={jd.tres_per_node}"]
    assert plugin.user == []


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_refuses_what_it_cannot_size(version, recorder):
    plugin = Plugin(version, command=str(recorder[1]))
    jd = plugin.job(comment="gpucast@../../etc/x:/jobs/a.json")            # not a GPU name: never run
    assert plugin.submit(jd) == -1 and jd.tres_per_node is None
    assert plugin.user[-1].startswith("gpucast: the GPU type must be a catalog name")
    jd = plugin.job(comment="gpucast:/nonexistent.json")
    assert plugin.submit(jd) == -1
    assert plugin.user[-1] == ("gpucast: cannot size the job (comment): cannot read job file "
                               "'/nonexistent.json': No such file or directory")
    plugin = Plugin(version, command="/nonexistent/gpucast")
    assert plugin.submit(plugin.job(comment="gpucast:/jobs/a.json")) == -1
    assert plugin.user[-1].startswith("gpucast: cannot size the job (comment): gpucast gave no answer")
    assert calls(recorder) == []


@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_modify_resizes_on_a_gpucast_comment(version, recorder, jobs_dir):
    d, script, canned = recorder
    plugin = Plugin(version, command=str(script))
    jd = plugin.job(comment=f"gpucast:{jobs_dir / 'jobs' / 'large.json'}")
    assert plugin.modify(jd) == 0 and jd.tres_per_node == "gres/gpu:1"
    assert len(calls(recorder)) == 1



@pytest.mark.parametrize("version", LUA_VERSIONS)
def test_plugin_tres_spelling(version, recorder, jobs_dir):
    """Slurm 22.05 refuses ``gres/shard:N`` in tres_per_node (seen in a real slurmctld:
    test_slurm_live.py); the plugin writes ``gres:`` there, ``gres/`` on 23.02+."""
    d, script, canned = recorder
    small = canned["small"]["count"]
    spec = f"gpucast:{jobs_dir / 'jobs' / 'small.json'}"
    cases = [  # (config, the job's own GRES, what the plugin must write)
        (dict(version_command="echo slurm 22.05.8"), None, f"gres:shard:{small}"),
        (dict(version_command="echo slurm 23.02.0"), None, f"gres/shard:{small}"),
        (dict(version_command="echo slurm 24.11.1"), None, f"gres/shard:{small}"),
        (dict(version_command="false"), None, f"gres/shard:{small}"),            # unknown: current spelling
        (dict(version_command="echo slurm 24.11.1"), "gres:license_x:1,gres:gpu:1",
         f"gres:license_x:1,gres:shard:{small}"),                              # the job's own spelling wins
        (dict(version_command="echo slurm 22.05.8", tres_prefix="gres/"), None, f"gres/shard:{small}"),
    ]
    for config, own, want in cases:
        plugin = Plugin(version, command=str(script), **config)
        jd = plugin.job(comment=spec, tres_per_node=own) if own else plugin.job(comment=spec)
        assert plugin.submit(jd) == 0, plugin.user
        assert jd.tres_per_node == want, config
    p22 = Plugin(version, command=str(script), version_command="echo slurm 22.05.8")
    jd = p22.job(comment=spec, tres_per_job="gres:gpu:2", tres_per_task="cpu=1,gres/gpu=1")
    assert p22.submit(jd) == 0 and jd.tres_per_job == "" and jd.tres_per_task == "cpu=1"
    assert any("Slurm version unknown" in line for line in Plugin(version, command=str(script),
                                                                      version_command="false").log)
    calls(recorder)


def test_a_job_on_a_mig_slice_asks_for_the_typed_slice(specs):
    slice_pred = predict(SMALL, "a100-80gb:1g.10gb")
    assert gres_request(slice_pred).sbatch == "--gres=gpu:1g.10gb:1"
    assert gres_request(slice_pred, mig_type="{gpu}_{profile}").gres == "gpu:a100-80gb_1g.10gb:1"
    with pytest.raises(ValueError, match="MIG slice, one device per job, but the job runs on 2 GPUs"):
        gres_request(predict({**SMALL, "gpus": 2}, "a100-80gb:3g.40gb"))
    r = invoke(specs / "small.json", "--gpu", "a100-80gb:1g.10gb")
    assert r.exit_code == 0 and r.stdout == "--gres=gpu:1g.10gb:1\n", r.stdout
