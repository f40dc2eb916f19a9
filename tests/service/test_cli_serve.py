"""`gpucast serve` as a user runs it: a real subprocess answering /healthz, and bad options."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
from conftest import _free_port


def test_serve_starts_and_answers(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpucast.cli", "serve", "--port", str(port), "--data-dir",
                             str(tmp_path / "data"), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.1)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert (tmp_path / "data").is_dir()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serve_refuses_a_bad_port():
    r = subprocess.run([sys.executable, "-m", "gpucast.cli", "serve", "--port", "70000"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert "error: --port must be between 1 and 65535, got 70000" in r.stderr
