"""How many predictions per second does `gpucast serve` answer, and how fast, on loopback?

Starts the installed command ``gpucast serve`` in a **subprocess** (its own interpreter, so the
load generator does not share the server's GIL), waits for ``/healthz``, predicts one job to
load torch, then drives ``POST /v1/predict`` with ``--clients`` concurrent keep-alive
connections (a minimal HTTP/1.1 client on asyncio streams: an httpx client spends more CPU per
request than the server does, and on a 2-core machine that measures the client):

1. **cached**: every request is a job the service has already predicted (``--cached-jobs``
   distinct zoo jobs, predicted once before timing), ``--requests`` requests in all;
2. **uncached**: ``--uncached`` distinct jobs never seen before (``mlp-small`` and
   ``resnet18-cifar`` at batch sizes not used elsewhere), each requested once: each is a capture
   plus an estimate.

It reports throughput (requests / wall time of the phase), latency percentiles per phase
(latency = request sent to response read, by the client's clock), the CPU time the server
process and the client spent per request (``/proc``), and the server's own cache counters from
``/metrics``. Target from the issue: at least 200 cached predictions/s and p99
under 50 ms. Nothing is asserted (benchmarks are not tests); the machine line records ``nproc``,
the CPU model and the load average, since other work on a small box moves the numbers.

    .venv/bin/python benchmarks/service_load.py [--clients 8,32] [--requests 4000] [--uncached 24] \\
        [--markdown benchmarks/results/service_load.md]

``--clients 8,32`` (default) runs the cached phase once per connection count: with a fixed
service rate, latency grows with the number of requests queued at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import json

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MD = REPO_ROOT / "benchmarks" / "results" / "service_load.md"
TARGET_RPS, TARGET_P99_MS = 200.0, 50.0
CACHED_JOBS = [{"workload": "mlp-small", "batch_size": b, "gpu": g} for b in (32, 64) for g in ("t4", "a100-80gb")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q / 100.0 * (len(v) - 1)))))]


def _machine() -> str:
    from gpucast.profile.runner import host_cpu

    cpu = host_cpu()
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    try:
        import httptools  # noqa: F401
        fast = "httptools installed"
    except ImportError:
        fast = "no httptools (uvicorn parses HTTP with h11)"
    return (f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {fast}, "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start")


async def _drive(url: str, bodies: list[dict], clients: int) -> tuple[float, list[float], dict[int, int], float]:
    """Send ``bodies`` with ``clients`` concurrent keep-alive connections; (wall s, latencies s,
    status counts, client CPU s). The client is a minimal HTTP/1.1 writer/reader on asyncio
    streams (requests pre-encoded), so the load generator's own CPU, which shares this
    machine with the server, stays small next to the server's."""
    host, port = url.rsplit("//", 1)[1].split(":")
    queue: asyncio.Queue = asyncio.Queue()
    for b in bodies:
        data = json.dumps(b).encode()
        queue.put_nowait(b"POST /v1/predict HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(data), data))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def worker():
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while True:
                try:
                    request = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                writer.write(request)
                status = int((await reader.readline()).split()[1])
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                statuses[status] = statuses.get(status, 0) + 1
                if status != 200:
                    print(status, body[:200], file=sys.stderr)
        finally:
            writer.close()

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - t0, latencies, statuses, time.process_time() - c0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _counter(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="8,32", help="concurrent connections, one cached run per value")
    ap.add_argument("--requests", type=int, default=4000, help="cached requests in all")
    ap.add_argument("--uncached", type=int, default=24, help="distinct uncached jobs")
    ap.add_argument("--markdown", type=Path, default=DEFAULT_MD)
    args = ap.parse_args()
    client_counts = [int(x) for x in args.clients.split(",")]

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    gpucast_cmd = [sys.executable, "-m", "gpucast.cli"]
    with tempfile.TemporaryDirectory() as data:
        cmd = [*gpucast_cmd, "serve", "--port", str(port), "--data-dir", data, "--log-level", "warning"]
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("the service did not start")
                time.sleep(0.1)
            t0 = time.perf_counter()
            for body in CACHED_JOBS:
                assert httpx.post(f"{url}/v1/predict", json=body, timeout=300).status_code == 200
            warm_s = time.perf_counter() - t0
            rows = []
            cached = [CACHED_JOBS[i % len(CACHED_JOBS)] for i in range(args.requests)]
            asyncio.run(_drive(url, cached[:200], max(client_counts)))  # warm-up, not timed
            for clients in client_counts:
                hits0, cpu0 = _counter(url, "gpucast_prediction_cache_hits_total"), _cpu_s(proc.pid)
                wall, lat, st, ccpu = asyncio.run(_drive(url, cached, clients))
                cpu = _cpu_s(proc.pid) - cpu0
                hits = _counter(url, "gpucast_prediction_cache_hits_total") - hits0
                rows.append(("cached", clients, len(cached), wall, lat, st, cpu, ccpu, f"{hits:.0f} cache hits"))
            uncached = []
            for i in range(args.uncached):
                model, base = ("mlp-small", 1000) if i % 2 == 0 else ("resnet18-cifar", 2000)
                uncached.append({"workload": model, "batch_size": base + i, "gpu": "t4"})
            miss0, cpu0 = _counter(url, "gpucast_prediction_cache_misses_total"), _cpu_s(proc.pid)
            wall, lat, st, ccpu = asyncio.run(_drive(url, uncached, max(client_counts)))
            cpu = _cpu_s(proc.pid) - cpu0
            misses = _counter(url, "gpucast_prediction_cache_misses_total") - miss0
            rows.append(("uncached", max(client_counts), len(uncached), wall, lat, st, cpu, ccpu,
                         f"{misses:.0f} cache misses"))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    head = ("| phase | requests | clients | wall s | req/s | p50 ms | p99 ms | max ms | server CPU ms/req "
            "| client CPU ms/req | statuses | server |")
    lines = [head, "|" + "---|" * 12]
    for name, clients, n, wall, lat, st, cpu, ccpu, note in rows:
        ms = [x * 1e3 for x in lat]
        lines.append(f"| {name} | {n} | {clients} | {wall:.2f} | {n / wall:.0f} | {_pct(ms, 50):.1f} | "
                     f"{_pct(ms, 99):.1f} | {max(ms):.1f} | {cpu / n * 1e3:.2f} | {ccpu / n * 1e3:.2f} | "
                     f"{', '.join(f'{k}: {v}' for k, v in sorted(st.items()))} | {note} |")
    verdicts = []
    for name, clients, n, wall, lat, *_ in rows:
        if name == "cached":
            rps, p99 = n / wall, _pct([x * 1e3 for x in lat], 99)
            ok = rps >= TARGET_RPS and p99 < TARGET_P99_MS
            verdicts.append(f"{clients} connections: {'met' if ok else 'NOT met'} ({rps:.0f} req/s, p99 {p99:.1f} ms)")
    verdict = (f"Cached target (>= {TARGET_RPS:.0f} req/s, p99 < {TARGET_P99_MS:.0f} ms): " + "; ".join(verdicts)
               + ".")
    table = "\n".join(lines)
    print(table)
    print(verdict)
    command = ".venv/bin/python benchmarks/service_load.py " + shlex.join(sys.argv[1:])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    md = f"""# Service load: `gpucast serve` on loopback

Command: `{command.strip()}` (commit {commit}).
Machine: {_machine()}. Server and load generator are two processes on this machine, sharing its CPUs.

The server was started with `{' '.join(shlex.quote(x) for x in ['gpucast', 'serve', '--port', 'PORT', '--data-dir',
                                                                  'TMP', '--log-level', 'warning'])}`;
{len(CACHED_JOBS)} jobs were predicted before timing ({warm_s:.1f} s, torch's import included), then:

{table}

{verdict}

* **cached**: {len(CACHED_JOBS)} distinct jobs (`mlp-small`, batch 32 and 64, on `t4` and `a100-80gb`) requested
  round-robin; the answer is JSON bytes made once per (job key, GPU), served on the event loop without
  touching the prediction thread pool.
* **uncached**: distinct jobs never seen before (`mlp-small` and `resnet18-cifar` at batch sizes 1000+),
  each a capture on the meta device plus an estimate; captures run side by side in the service's
  thread pool (`workers`, see `gpucast.service.cache`) but share the GIL, so uncached throughput is about
  one core's worth of captures whatever the client count, and a request's latency is that of the
  captures interleaved with it.

Latency is the client's: request sent to response read, over HTTP/1.1 keep-alive connections (a
minimal client on asyncio streams, requests pre-encoded), so it includes queueing behind the other
connections and the load generator's own (small) overhead. "server CPU ms/req" is the server
process's user + system time over the phase divided by its requests: the cost of one answer, whatever
else the machine was doing. uvicorn uses `httptools` and `uvloop` when they are installed (`uvicorn[standard]`);
without them it parses HTTP with the pure-Python `h11`.
"""
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(md)
    print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
