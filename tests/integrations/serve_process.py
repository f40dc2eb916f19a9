"""`gpucast serve` as a site runs it: a subprocess on a free loopback port, for the tests here.

:func:`running_service` starts it, waits for ``/healthz``, warms it with one prediction (the
first imports torch) and stops it on exit. Used by test_slurm_service.py and test_slurm_live.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_json(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metric(url: str, name: str) -> float:
    """The value of an unlabelled Prometheus sample ``name`` on ``url``/metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


@contextmanager
def running_service(data_dir: Path, warm: dict | None = None, startup_s: float = 60):
    """Yield the URL of a running ``gpucast serve --data-dir data_dir``; ``warm`` is a predict body."""
    port = free_port()
    log = open(data_dir / "serve.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "gpucast.cli", "serve", "--port", str(port), "--data-dir",
                             str(data_dir), "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
                    assert json.loads(r.read())["status"] == "ok"
                break
            except OSError:
                log.seek(0)
                assert proc.poll() is None and time.monotonic() < deadline, log.read()
                time.sleep(0.1)
        if warm is not None:
            post_json(f"{url}/v1/predict", warm)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
