"""How fast ``gpucast advise`` answers: a search over the whole catalog, and the service's cached answer.

1. ``gpucast.advise(resnet50 b64)`` over every catalog GPU (a price table of $1 per GPU-hour for
   each, made up for timing: the packaged tables do not price every GPU), 4 batch sizes (64, 128,
   256, 512), 3 precisions (fp32, amp-fp16, amp-bf16, each where the GPU runs it), 1/2/4/8 GPUs and
   shares: the first call (each batch x precision captured once) and the warm calls after it
   (captures cached in the process), median of ``--repeats``.
2. ``POST /v1/advise`` of the same request on the real service (uvicorn on a loopback port, httpx
   client): the first answer, then ``--requests`` repeats answered from the service's cache
   (p50/p99 latency, client side).

Run (from the repository root)::

    .venv/bin/python benchmarks/advise_speed.py [--repeats 3] [--requests 200] [--out benchmarks/results/advise_speed.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BATCHES = [64, 128, 256, 512]
PRECISIONS = ["fp32", "amp-fp16", "amp-bf16"]


def _serve(app):
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--out", type=Path, default=RESULTS / "advise_speed.md")
    args = p.parse_args(argv)

    import httpx

    import gpucast
    from gpucast.advisor.prices import parse
    from gpucast.hardware import catalog
    from gpucast.service import Settings, create_app

    names = list(catalog())
    prices = parse([{"gpu": g, "usd_per_gpu_hour": 1.0} for g in names], "timing (made-up $1 per GPU-hour)")
    kw = dict(batches=BATCHES, precisions=PRECISIONS, counts=[1, 2, 4, 8], prices=prices, epochs=90)
    t0 = time.perf_counter()
    a = gpucast.advise("resnet50", names, **kw)
    first = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        gpucast.advise("resnet50", names, **kw)
        warm.append(time.perf_counter() - t0)

    server, url = _serve(create_app(Settings(data_dir=Path(os.environ.get("TMPDIR", "/tmp")) / "advise-speed")))
    body = {"workload": "resnet50", "batch_size": 64, "gpu": names, "batches": BATCHES, "precisions": PRECISIONS,
            "counts": [1, 2, 4, 8], "epochs": 90,
            "prices": [{"gpu": g, "usd_per_gpu_hour": 1.0} for g in names]}
    lat = []
    with httpx.Client(base_url=url, timeout=600) as c:
        t0 = time.perf_counter()
        r = c.post("/v1/advise", json=body)
        service_first = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        for _ in range(args.requests):
            t0 = time.perf_counter()
            r = c.post("/v1/advise", json=body)
            lat.append(time.perf_counter() - t0)
            assert r.status_code == 200
    server.should_exit = True
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(round(0.99 * len(lat))) - 1)]
    cpu = platform.processor() or platform.machine()
    lines = [f"Machine: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}; resnet50, "
             f"{len(names)} GPUs x {len(BATCHES)} batch sizes x {len(PRECISIONS)} precisions x 1/2/4/8 GPUs "
             f"(+ shares): {len(a.options)} options.", "",
             "| what | seconds |", "| --- | ---: |",
             f"| advise, first call (captures {len(BATCHES) * len(PRECISIONS)} batch x precision) | {first:.2f} |",
             f"| advise, warm (median of {args.repeats}) | {statistics.median(warm):.2f} |",
             f"| POST /v1/advise, first answer (captures already cached by the calls above) | {service_first:.2f} |",
             f"| POST /v1/advise, cached: p50 of {len(lat)} | {statistics.median(lat) * 1e3:.1f} ms |",
             f"| POST /v1/advise, cached: p99 of {len(lat)} | {p99 * 1e3:.1f} ms |"]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
