"""`gpucast slurm --service URL`: the prediction from a running `gpucast serve`, without torch.

A real ``gpucast serve`` runs as a subprocess on a free loopback port for this module (started
once, warmed with one prediction). Against it: the service's answer and the local one print the
same ``--gres`` option and the same JSON for a zoo job, a Hugging Face config and an uploaded
ONNX file; a job the service refuses is one ``error:`` line (exit 2) with the service's detail;
the ``--service`` path imports neither torch nor onnx (a fresh interpreter, checked from
``sys.modules``). The failures a healthy service does not produce on demand come from real
sockets: a closed port (connection refused), a listening socket that never answers (the
timeout), and a stand-in HTTP server answering a fixed 500 or 429 (``http.server``; that stand-in
is the only thing here that is not gpucast). The shipped job_submit.lua is run once with the
real command pointed at the real service (LuaJIT, as in test_slurm.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucast.cli import app
from gpucast.integrations.remote import ServiceUnavailable, check_url, predict_remote
from gpucast.job import Job, JobError

sys.path.insert(0, str(Path(__file__).parents[1] / "service"))  # onnx_files.py: a small valid ONNX model
from onnx_files import mlp_onnx_bytes  # noqa: E402
from serve_process import free_port, post_json, running_service  # noqa: E402

GPU = "a100-80gb"
SMALL = {"model": "mlp-small", "batch_size": 32}
TINY_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128}
BIN = Path(sys.executable).with_name("gpucast")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """``gpucast serve`` as a site runs it, on a free loopback port; its URL."""
    with running_service(tmp_path_factory.mktemp("serve-data"),
                         warm={"workload": "mlp-small", "batch_size": 32, "gpu": GPU}) as url:  # imports torch
        yield url


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    (d / "small.json").write_text(json.dumps(SMALL))
    (d / "bert.yaml").write_text(json.dumps({"model": "hf:bert", "hf_config": TINY_BERT, "batch_size": 8,
                                             "seq_len": 64, "precision": "amp-bf16", "optimizer": "adamw"}))
    (d / "mlp.onnx").write_bytes(mlp_onnx_bytes())
    (d / "onnx.json").write_text(json.dumps({"model": f"onnx:{d / 'mlp.onnx'}", "batch_size": 16}))
    (d / "unknown.json").write_text(json.dumps({"model": "resnet-9000"}))
    (d / "hf-unknown.json").write_text(json.dumps({"model": "hf:no-such-arch",
                                                   "hf_config": {"model_type": "no-such-arch"}}))
    (d / "module.json").write_text(json.dumps({"model": "module:mymodels:build"}))
    return d


def invoke(*args):
    return CliRunner().invoke(app, ["slurm", *[str(a) for a in args]])


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # bound and released: nothing listens there


def one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


def assert_one_error(result, start: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert line.startswith(start), line
    return line


# ------------------------------------------------------------------ same answers as the local path
@pytest.mark.parametrize("spec, extra", [
    ("small.json", []), ("small.json", ["--json"]), ("small.json", ["--json", "--mps", "--gpu", "t4"]),
    ("bert.yaml", ["--json"]),
    # An uploaded ONNX file: 1 KiB written with onnx.helper, so the upload and both captures are cheap.
    ("onnx.json", ["--json", "--gpu", "h100"]),
])
def test_service_answer_equals_local_answer(service, specs, spec, extra):
    local = invoke(specs / spec, *extra)
    assert local.exit_code == 0, local.stderr
    # a generous timeout: a cold capture (BERT) in the service can take longer than the default
    # 5 s on a loaded 2-core machine; this test is about the answer, the timeout is tested apart
    remote = invoke(specs / spec, *extra, "--service", service, "--service-timeout", 120)
    assert remote.exit_code == 0, remote.stderr
    assert remote.stderr == ""                      # no warning: the service answered
    assert remote.stdout == local.stdout
    if spec == "onnx.json":                         # the caller's file, not the service's copy of it
        assert json.loads(remote.stdout)["job"]["model"] == f"onnx:{specs / 'mlp.onnx'}"


def test_service_path_never_imports_torch(service, specs):
    """A fresh interpreter runs the command (zoo and ONNX jobs) through gpucast.cli.app, then
    reports which heavy modules it loaded."""
    script = f"""
import contextlib, io, json, sys
from gpucast.cli import app
outs = []
for spec in {[str(specs / 'small.json'), str(specs / 'onnx.json')]!r}:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        app(["slurm", spec, "--json", "--service", {service!r}], standalone_mode=False)
    outs.append(buf.getvalue())
print(json.dumps({{"outs": outs, "loaded": sorted(m for m in ("torch", "onnx", "transformers", "numpy", "fastapi")
                                                  if m in sys.modules)}}))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["loaded"] == []
    assert got["outs"] == [invoke(specs / "small.json", "--json").stdout,
                           invoke(specs / "onnx.json", "--json").stdout]


# ------------------------------------------------------------------ the job's fault: one error line
def test_service_refusal_is_one_error_line_with_the_services_detail(service, specs):
    assert_one_error(invoke(specs / "small.json", "--service", service, "--gpu", "tpu-v5"),
                            "error: the service refused the job: field 'gpu': unknown GPU 'tpu-v5'")
    # a config of an architecture transformers does not know: Job.load takes it, the service does not
    assert_one_error(invoke(specs / "hf-unknown.json", "--service", service, "--json"),
                     "error: the service refused the job: ")
    # refused, not fallen back: a local prediction of the same bad job would fail too
    assert "no-such-arch" in invoke(specs / "hf-unknown.json", "--service", service).stderr


def test_bad_spec_is_refused_before_any_request(service, specs):
    local = invoke(specs / "unknown.json")
    remote = invoke(specs / "unknown.json", "--service", closed_url(), "--no-fallback")
    assert_one_error(remote, "error: field 'model': unknown zoo workload 'resnet-9000'")
    assert remote.stderr == local.stderr


def test_module_jobs_never_go_to_the_service(service, specs):
    assert_one_error(invoke(specs / "module.json", "--service", service), "error: field 'model': a module job")
    job = Job.from_module(lambda: None, lambda b: (), batch_size=8, name="mymodels:build")
    with pytest.raises(JobError, match="code, which the prediction service never runs"):
        predict_remote(job, GPU, closed_url())  # refused before any connection (the port is closed)
    fed = Job("mlp-small", batch_size=8, data={"dataset": "train.py:make_dataset"})
    with pytest.raises(JobError, match="'data.dataset'.*never runs"):
        predict_remote(fed, GPU, closed_url())


# ------------------------------------------------------------------ the service's fault: fallback or error
def test_closed_port_falls_back_with_one_warning(specs):
    url = closed_url()
    local = invoke(specs / "small.json", "--json")
    r = invoke(specs / "small.json", "--json", "--service", url)
    assert r.exit_code == 0 and r.stdout == local.stdout
    line = one_line(r.stderr)
    assert line == f"warning: gpucast service at {url} unreachable (Connection refused); predicting locally"
    assert "error:" not in line and "{" not in line and "tres_per_node" not in line


def test_closed_port_without_fallback_is_an_error(specs):
    url = closed_url()
    line = assert_one_error(invoke(specs / "small.json", "--service", url, "--no-fallback"), "error: ")
    assert line == f"error: gpucast service at {url} unreachable (Connection refused) (--no-fallback)"


def test_silent_service_times_out(specs):
    with socket.socket() as s:  # listens (the kernel accepts the connection) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        # the command's own time limit answers: without it the call would never return (a bounded
        # wait for it, any load; nothing is timed)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=invoke(specs / "small.json", "--service", url,
                                                                "--service-timeout", "0.5", "--no-fallback")),
                             daemon=True)
        t.start()
        t.join(120)
        assert "r" in out, "the --service-timeout did not end the call"
        r = out["r"]
    assert_one_error(r, f"error: gpucast service at {url} gave no answer within 0.5 s (--no-fallback)")


class _Fixed(BaseHTTPRequestHandler):
    status, body = 500, b"Internal Server Error"

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json" if self.body.startswith(b"{") else "text/plain")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    servers = []

    def start(status: int, body: bytes) -> str:
        handler = type("Handler", (_Fixed,), {"status": status, "body": body})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_5xx_and_busy_fall_back_and_4xx_does_not(specs, stand_in):
    local = invoke(specs / "small.json")
    url = stand_in(500, b"Internal Server Error: error: boom")
    r = invoke(specs / "small.json", "--service", url)
    assert r.exit_code == 0 and r.stdout == local.stdout
    assert one_line(r.stderr) == f"warning: gpucast service at {url} answered HTTP 500; predicting locally"
    url = stand_in(429, b'{"detail": "64 predictions are computing"}')
    r = invoke(specs / "small.json", "--service", url, "--no-fallback")
    assert_one_error(r, f"error: gpucast service at {url} answered HTTP 429: 64 predictions are computing")
    url = stand_in(200, b"<html>not gpucast</html>")
    with pytest.raises(ServiceUnavailable, match="not JSON"):
        predict_remote(Job.from_dict(SMALL), GPU, url)
    url = stand_in(422, b'{"detail": "field \'batch_size\': too big"}')
    assert_one_error(invoke(specs / "small.json", "--service", url),
                     "error: the service refused the job: field 'batch_size': too big")


# ------------------------------------------------------------------ usage errors
@pytest.mark.parametrize("args, start", [
    (["--service", "ftp://127.0.0.1:8000"], "error: --service: the service URL must start with http:// or https://"),
    (["--service", "127.0.0.1:8000"], "error: --service: the service URL must start with http:// or https://"),
    (["--service", "http://"], "error: --service: the service URL 'http://' has no host"),
    (["--service", "http://h:99999"], "error: --service: the service URL 'http://h:99999' is not valid"),
    (["--service", "http://h:8000/?x=1"], "error: --service: the service URL"),
    (["--service", "http://h:8000", "--service-timeout", "0"], "error: --service-timeout must be a positive"),
    (["--no-fallback"], "error: --service-timeout and --no-fallback apply to --service"),
    (["--service-timeout", "3"], "error: --service-timeout and --no-fallback apply to --service"),
])
def test_usage_errors_exit_2_one_line(specs, args, start):
    assert_one_error(invoke(specs / "small.json", *args), start)


def test_check_url():
    assert check_url(" http://127.0.0.1:8000/ ") == "http://127.0.0.1:8000"
    assert check_url("https://gpucast.example/api/") == "https://gpucast.example/api"
    with pytest.raises(ValueError, match="user, query or fragment"):
        check_url("http://user:pw@h:8000")


# ------------------------------------------------------------------ the plugin, end to end
@pytest.mark.skipif(not BIN.exists(), reason="the gpucast console script is not installed")
def test_plugin_with_the_real_command_and_the_real_service(service, specs):
    from test_slurm import LUA_VERSIONS, Plugin, needs_lupa  # noqa: F401 - the same harness

    if not LUA_VERSIONS:
        pytest.skip("lupa (a Lua runtime, in the dev extra) is not installed")
    want = json.loads(invoke(specs / "small.json", "--json").stdout)["tres_per_node"]
    plugin = Plugin(LUA_VERSIONS[0], command=str(BIN), service=service, service_timeout=5)
    assert plugin.log[-1] == f"gpucast job_submit plugin loaded (command {BIN}, service {service})"
    t0 = time.monotonic()
    jd = plugin.job(comment=f"gpucast:{specs / 'small.json'}")
    assert plugin.submit(jd) == 0 and jd.tres_per_node == want
    took = time.monotonic() - t0
    assert plugin.log[-1] == f"gpucast: job from comment on {GPU}: tres_per_node={want}", plugin.log
    print(f"plugin with --service: {took:.2f} s")  # the point of --service; not asserted (machine load)
    # the service down and no fallback: the job is rejected with gpucast's line
    url = closed_url()
    plugin = Plugin(LUA_VERSIONS[0], command=str(BIN), service=url, fallback=False)
    jd = plugin.job(comment=f"gpucast:{specs / 'small.json'}")
    assert plugin.submit(jd) == -1 and jd.tres_per_node is None
    assert plugin.user == [f"gpucast: cannot size the job (comment): gpucast service at {url} unreachable "
                           f"(Connection refused) (--no-fallback)"]
