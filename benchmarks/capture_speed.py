"""How fast is one prediction from a cold process, and how much memory does it take?

For each configuration (resnet50 b64, bert-base b32 s128, gpt2-xl b8 s1024, llama-7b b1 s2048;
all ``train``, fp32, the Job's default optimizer unless ``--precision``/``--optimizer`` say
otherwise) this script starts a **fresh Python subprocess** that

1. imports gpucast, torch and the workload's model library (torchvision / transformers,
   including ``transformers.modeling_utils``, which ``import transformers`` defers):
   ``import_s``;
2. captures the step (``gpucast.api.trace``): ``capture_s``;
3. estimates it (``gpucast.predict``, the trace now cached): ``predict_s``;

and reports ``capture+predict`` (2 + 3), the whole cold ``total`` (1 + 2 + 3, interpreter
start-up excluded) and the child's **peak RSS**, read by the parent with ``os.wait4`` (the
kernel's ``ru_maxrss`` of exactly that child; the parent imports nothing heavy, so the child
inherits no high-water mark from it). One process per configuration keeps the numbers honest:
no shared import, no warm caches, no memory left behind by a previous model.

Targets (from the issue; printed, never asserted — benchmarks are not tests): resnet50 under
1 s, the 7B model under 10 s with peak RSS under 1.5 GB, "on a 2-core machine". The time
targets are checked against ``capture+predict`` (a long-lived service or scheduler pays the
imports once) and, separately, against the cold ``total``; the machine line says how many cores
this run had and its load average, since other work on a small box moves the numbers.

    .venv/bin/python benchmarks/capture_speed.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

# (label, job fields). Train mode, fp32 and the Job's default optimizer unless flags override.
CONFIGS = [
    ("resnet50 b64", dict(model="resnet50", batch_size=64)),
    ("bert-base b32 s128", dict(model="bert-base", batch_size=32, seq_len=128)),
    ("gpt2-xl b8 s1024", dict(model="gpt2-xl", batch_size=8, seq_len=1024)),
    ("llama-7b b1 s2048", dict(model="llama-7b", batch_size=1, seq_len=2048)),
]

# target name -> (config label, metric, limit, unit)
TARGETS = [
    ("resnet50 capture+predict < 1 s", "resnet50 b64", "capture_predict_s", 1.0, "s"),
    ("resnet50 cold total < 1 s", "resnet50 b64", "total_s", 1.0, "s"),
    ("llama-7b capture+predict < 10 s", "llama-7b b1 s2048", "capture_predict_s", 10.0, "s"),
    ("llama-7b cold total < 10 s", "llama-7b b1 s2048", "total_s", 10.0, "s"),
    ("llama-7b peak RSS < 1.5 GB", "llama-7b b1 s2048", "peak_rss_bytes", 1.5e9, "B"),
]

# What the import phase loads for a workload's model library. ``transformers`` loads its modules
# lazily: ``import transformers`` is cheap and the first model class pulls in
# ``transformers.modeling_utils`` (seconds: torch.distributed.tensor, quantisation integrations),
# so that is imported here too, or it would be billed to capture. The model's own module
# (e.g. ``modeling_bert``, a fraction of a second) still loads during capture.
_MODEL_LIBRARY = {"torchvision": ("torchvision", "torchvision.models"),
                  "transformers": ("transformers", "transformers.modeling_utils")}


# ----------------------------------------------------------------------------- child side

def _child(job_fields: dict, gpu: str, out_path: str) -> None:
    """Runs in the fresh subprocess: time the three phases, write one JSON record."""
    t0, c0 = time.perf_counter(), time.process_time()
    import gpucast
    import gpucast.api
    import torch

    from gpucast import zoo

    source = zoo.get(job_fields["model"]).source
    for module in _MODEL_LIBRARY.get(source, ()):
        importlib.import_module(module)
    t1, c1 = time.perf_counter(), time.process_time()
    job = gpucast.Job(**job_fields)
    tr = gpucast.api.trace(job)
    t2 = time.perf_counter()
    pred = gpucast.predict(job, gpu)
    t3, c3 = time.perf_counter(), time.process_time()
    import resource

    rec = {
        "import_s": t1 - t0, "capture_s": t2 - t1, "predict_s": t3 - t2,
        "capture_predict_s": t3 - t1, "total_s": t3 - t0,
        "import_cpu_s": c1 - c0, "capture_predict_cpu_s": c3 - c1,
        "self_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "ops": len(tr.ops), "kernels": tr.kernels, "parameters": tr.parameters,
        "step_time_s": pred.step_time_s, "gpu": pred.gpu,
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "gpucast": gpucast.__version__, "model_library": source,
    }
    with open(out_path, "w") as f:
        json.dump(rec, f)


# ----------------------------------------------------------------------------- parent side

def _run_one(job_fields: dict, gpu: str, timeout: float) -> dict:
    """One fresh subprocess; peak RSS from the kernel via wait4 on that child."""
    fd, out_path = tempfile.mkstemp(suffix=".json", prefix="gpucast-bench-")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(job_fields),
           "--gpu", gpu, "--child-out", out_path]
    wall0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = _read_all(proc, timeout)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - wall0
        if proc.returncode != 0:
            tail = output.decode(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"child for {job_fields} exited {proc.returncode}: " + " | ".join(tail))
        with open(out_path) as f:
            rec = json.load(f)
    finally:
        os.unlink(out_path)
    rec["peak_rss_bytes"] = usage.ru_maxrss * 1024  # Linux: KiB
    rec["process_wall_s"] = wall  # includes interpreter start-up
    rec["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    return rec


def _read_all(proc: subprocess.Popen, timeout: float):
    """Read the child's output without reaping it (wait4 must see it)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    chunks, deadline = [], time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise RuntimeError(f"child timed out after {timeout:.0f} s")
        if sel.select(timeout=left):
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            chunks.append(data)
    sel.close()
    proc.stdout.close()
    return b"".join(chunks), None


def machine_info() -> dict:
    from gpucast.profile.runner import host_cpu

    cpu = host_cpu()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpu": cpu, "cores": cores, "logical_cpus": os.cpu_count(), "memory_bytes": mem,
            "loadavg_start": list(load) if load else None, "python": platform.python_version(),
            "platform": platform.platform()}


def _median_record(runs: list[dict]) -> dict:
    keys = ("import_s", "capture_s", "predict_s", "capture_predict_s", "total_s",
            "process_wall_s", "peak_rss_bytes", "import_cpu_s", "capture_predict_cpu_s",
            "process_cpu_s")
    rec = dict(runs[0])
    for k in keys:
        rec[k] = statistics.median(r[k] for r in runs)
        rec[k + "_min"] = min(r[k] for r in runs)
    rec["capture_predict_s_all"] = [r["capture_predict_s"] for r in runs]
    rec["peak_rss_bytes_max"] = max(r["peak_rss_bytes"] for r in runs)
    return rec


def markdown(results: list[dict], machine: dict) -> str:
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores usable "
        f"({machine['logical_cpus']} logical), "
        f"{(machine['memory_bytes'] or 0) / 2**30:.0f} GiB RAM, Python {machine['python']}, "
        f"torch {machine.get('torch', '?')} ({machine.get('torch_threads', '?')} intra-op threads), "
        f"gpucast {machine.get('gpucast', '?')}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in machine['loadavg_start'] or [])}, at end "
        f"{', '.join(f'{x:.2f}' for x in machine.get('loadavg_end') or [])}",
        "",
        f"Median [min] of {results[0]['repeat']} fresh process(es) per config; predicted on "
        f"{results[0]['gpu']}. Wall times are seconds of the clock; CPU times are the child's "
        "user+system seconds (all threads), which other load on the machine disturbs far less.",
        "",
        "| config | ops | import wall (s) | capture (s) | predict (s) | capture+predict wall (s) "
        "| capture+predict CPU (s) | cold total wall (s) | process CPU (s) | peak RSS (GB) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def mm(r, k, fmt="{:.2f}"):
        return f"{fmt.format(r[k])} [{fmt.format(r[k + '_min'])}]" if r["repeat"] > 1 else fmt.format(r[k])

    for r in results:
        lines.append(
            f"| {r['label']} | {r['ops']} | {mm(r, 'import_s')} | {mm(r, 'capture_s')} "
            f"| {mm(r, 'predict_s', '{:.3f}')} | {mm(r, 'capture_predict_s')} "
            f"| {mm(r, 'capture_predict_cpu_s')} | {mm(r, 'total_s')} | {mm(r, 'process_cpu_s')} "
            f"| {r['peak_rss_bytes_max'] / 1e9:.2f} |")
    lines += ["", "Peak RSS is the largest of the runs (kernel ru_maxrss of each child, via wait4)."]
    return "\n".join(lines)


def check_targets(results: list[dict]) -> list[dict]:
    by_label = {r["label"]: r for r in results}
    out = []
    for name, label, metric, limit, unit in TARGETS:
        r = by_label.get(label)
        if r is None:
            out.append({"target": name, "status": "not run"})
            continue
        value = r["peak_rss_bytes_max"] if metric == "peak_rss_bytes" else r[metric]
        t = {"target": name, "value": value, "limit": limit, "unit": unit, "met": bool(value < limit)}
        if metric != "peak_rss_bytes" and r["repeat"] > 1:
            t["best"] = r[metric + "_min"]
            t["met_by_best"] = bool(t["best"] < limit)
        out.append(t)
    return out


def _fmt_target(t: dict) -> str:
    if t.get("status") == "not run":
        return f"- {t['target']}: not run"
    v = f"{t['value'] / 1e9:.2f} GB" if t["unit"] == "B" else f"median {t['value']:.2f} s"
    line = f"- {t['target']}: {v} -> {'MET' if t['met'] else 'NOT met'}"
    if "best" in t:
        line += f" (best run {t['best']:.2f} s -> {'met' if t['met_by_best'] else 'not met'})"
    return line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1, help="fresh processes per config (median)")
    p.add_argument("--gpu", default="a100-80gb", help="GPU to predict on (default a100-80gb)")
    p.add_argument("--precision", default=None, help="override precision (default fp32)")
    p.add_argument("--optimizer", default=None, help="override optimizer (default: Job's)")
    p.add_argument("--only", action="append", default=None,
                   help="run only configs whose label contains this (repeatable)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child process")
    p.add_argument("--json", metavar="PATH", help="also write results as JSON")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child is not None:
        _child(json.loads(args.child), args.gpu, args.child_out)
        return 0

    machine = machine_info()
    results = []
    for label, fields in CONFIGS:
        if args.only and not any(s in label for s in args.only):
            continue
        fields = dict(fields, mode="train")
        if args.precision:
            fields["precision"] = args.precision
        if args.optimizer:
            fields["optimizer"] = args.optimizer
        runs = [_run_one(fields, args.gpu, args.timeout) for _ in range(max(1, args.repeat))]
        rec = _median_record(runs)
        rec.update(label=label, job=fields, repeat=len(runs))
        results.append(rec)
        print(f"  {label}: capture+predict {rec['capture_predict_s']:.2f} s, "
              f"peak RSS {rec['peak_rss_bytes'] / 1e9:.2f} GB", file=sys.stderr)
    if not results:
        print("no configuration selected", file=sys.stderr)
        return 2
    for k in ("torch", "torch_threads", "gpucast"):
        machine[k] = results[0][k]
    try:
        machine["loadavg_end"] = list(os.getloadavg())
    except OSError:
        machine["loadavg_end"] = None
    targets = check_targets(results)
    print(markdown(results, machine))
    print()
    print(f"Targets (the issue asks for them on a 2-core machine; this one has "
          f"{machine['cores']} cores). Reported, not asserted:")
    for t in targets:
        print(_fmt_target(t))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": results, "targets": targets}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
