"""The service under test: the real app, served by uvicorn on a free loopback port.

``serve(settings)`` runs one app in a background thread for the length of a ``with`` block;
the ``server`` fixture is the session's (default limits but for small upload and body caps,
so the size tests send megabytes, not hundreds), warmed with one prediction so torch is loaded
before any test times anything.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from gpucast.service import Settings, create_app

sys.path.insert(0, str(Path(__file__).parent))  # onnx_files.py (rootdir-relative test layout)

WARM = {"workload": "mlp-small", "batch_size": 32, "gpu": "t4"}


@dataclass
class Running:
    url: str
    app: object
    settings: Settings

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(settings: Settings):
    app = create_app(settings)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield Running(f"http://127.0.0.1:{port}", app, settings)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("service-data"), max_json_bytes=256 * 1024,
                        max_onnx_bytes=2 << 20)
    with serve(settings) as running:
        with running.client() as c:
            assert c.post("/v1/predict", json=WARM).status_code == 200  # imports torch: ~10 s
        yield running


@pytest.fixture
def client(server):
    with server.client() as c:
        yield c


def metric(client: httpx.Client, name: str, **labels) -> float:
    """A sample's value from /metrics (0 when absent); ``labels`` must all match."""
    from prometheus_client.parser import text_string_to_metric_families

    want = {k: str(v) for k, v in labels.items()}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in want.items()):
                return float(sample.value)
    return 0.0
