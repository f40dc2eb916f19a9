"""Sharing modes in the simulator: time-slicing, MPS and static MIG layouts on A100-80GB nodes.

pai-mix (the PAI-shaped workload mix: many small, host-fed jobs next to multi-GPU ones) on
``--gpus`` A100-80GB (nodes of 8) at the mix's own load and at a queue-keeping load (``--heavy``
times the cluster's capacity offered). Rows: ``slot`` (one job per whole GPU, FIFO with EASY
backfilling: the baseline), then the ``gpucast`` policy with the jobs on one GPU time-sliced
(CUDA's default; the device plugin's time-slicing replicas), under MPS (kernels of different jobs
at once, no context switch), and under MPS with some nodes carved into a static MIG layout (each
slice a GPU of its own, one-GPU jobs only; ``gpucast simulate --mig-layout``), and with nodes
that differ in mode, as operators label them: some nodes under MPS, unlimited or as the device
plugin's MPS replicas run it (at most N jobs a GPU, each limited to 1/N of the SMs, alone too,
one-GPU jobs only; ``--mps-nodes``, ``--mps-replicas``), the rest time-sliced, with or without a
carved node: there the ``gpucast`` policy puts each job where its predicted cost under that GPU's
mode is lowest. The truth and the policy read each GPU's mode; the co-location world is
``measured-pairs``; gpucast's measured prediction error. Columns: queued-period utilization (the
cluster's NVML utilization while a job waits, a carved GPU counted as its slices' shares), its
change over ``slot``, mean and p99 JCT, mean queueing delay, makespan.

The MPS model's constants are the time-slicing fit's (no measured MPS pairs here; the DRAM
sharing of kernels on SMs kept apart by limits is a closed form, :mod:`gpucast.cluster.timeshare.mps`), so
MPS rows are the model's consequence, not a measurement; MIG slices are the analytic slices of
:mod:`gpucast.mig`. Switching a node's sharing mode during the run is not simulated; MIG nodes are
static or re-partitioned on demand (the last rows: whole, and carved where no waiting job needs
several GPUs). A cluster of MPS replicas only is not a row: its multi-GPU jobs could not run. A
second table runs the one-GPU jobs of the mix with one job per GPU or slice, the setting where a
MIG slice adds room: static layouts against nodes carved on demand.

    .venv/bin/python benchmarks/sharing_modes.py [--gpus 64] [--heavy 3] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GPU = "a100-80gb"
LAYOUT = "3g.40gb,2g.20gb,2g.20gb"
# (label, policy, sharing mode, MIG layout of the carved nodes, carved nodes, MPS nodes, their replicas
#  [, carved nodes re-partitioned on demand, a policy parameter])
CONFIGS = [
    ("slot, whole GPUs", "slot", "timeslice", None, None, None, None),
    ("gpucast, time-slicing only", "gpucast", "timeslice", None, None, None, None),
    ("gpucast, MPS", "gpucast", "mps", None, None, None, None),
    (f"gpucast, MPS + 1 node of {LAYOUT}", "gpucast", "mps", LAYOUT, 1, None, None),
    ("gpucast, MPS + 1 node of 3g.40gb*2", "gpucast", "mps", "3g.40gb*2", 1, None, None),
    (f"gpucast, MPS + 2 nodes of {LAYOUT}", "gpucast", "mps", LAYOUT, 2, None, None),
    (f"gpucast, time-slicing + 1 node of {LAYOUT}", "gpucast", "timeslice", LAYOUT, 1, None, None),
    ("gpucast, nodes by mode: 2 MPS (2 replicas), 6 time-sliced", "gpucast", "timeslice", None, None, 2, 2),
    ("gpucast, nodes by mode: 2 MPS (4 replicas), 6 time-sliced", "gpucast", "timeslice", None, None, 2, 4),
    ("gpucast, nodes by mode: 2 MPS (unlimited), 6 time-sliced", "gpucast", "timeslice", None, None, 2, None),
    (f"gpucast, nodes by mode: 1 MIG ({LAYOUT}), 2 MPS (4 replicas), 5 time-sliced", "gpucast", "timeslice",
     LAYOUT, 1, 2, 4),
    (f"gpucast, nodes by mode: 1 MIG ({LAYOUT}), 2 MPS (unlimited), 5 time-sliced", "gpucast", "timeslice",
     LAYOUT, 1, 2, None),
    (f"gpucast, 1 node of {LAYOUT} re-partitioned on demand (drain + 60 s)", "gpucast", "timeslice", LAYOUT, 1,
     None, None, True),
    (f"gpucast, 2 nodes of {LAYOUT} re-partitioned on demand (drain + 60 s)", "gpucast", "timeslice", LAYOUT, 2,
     None, None, True),
    (f"gpucast, 2 nodes of {LAYOUT} re-partitioned on demand, empty nodes only", "gpucast", "timeslice", LAYOUT,
     2, None, None, True, {"drain_busy_nodes": False}),
    (f"gpucast, 2 nodes of {LAYOUT} starting whole, carved on demand", "gpucast", "timeslice", LAYOUT, 2,
     None, None, True, {}, "whole"),
]
# The one-GPU jobs of pai-mix, one job per GPU or slice (max_jobs_per_gpu = 1): the setting MIG is for
EXCLUSIVE = {"max_jobs_per_gpu": 1}
ONE_GPU_CONFIGS = [
    ("slot, whole GPUs", "slot", "timeslice", None, None, None, None),
    ("gpucast, time-slicing (up to 4 jobs a GPU)", "gpucast", "timeslice", None, None, None, None),
    ("gpucast, one job a GPU", "gpucast", "timeslice", None, None, None, None, False, EXCLUSIVE),
    (f"gpucast, one job a GPU or slice, 2 nodes of {LAYOUT}", "gpucast", "timeslice", LAYOUT, 2, None, None,
     False, EXCLUSIVE),
    ("gpucast, one job a GPU or slice, 2 nodes of 1g.10gb*7", "gpucast", "timeslice", "1g.10gb*7", 2, None, None,
     False, EXCLUSIVE),
    (f"gpucast, one job a GPU or slice, 2 nodes of {LAYOUT} carved on demand", "gpucast", "timeslice", LAYOUT, 2,
     None, None, True, EXCLUSIVE, "whole"),
    ("gpucast, one job a GPU or slice, 2 nodes of 1g.10gb*7 carved on demand", "gpucast", "timeslice", "1g.10gb*7",
     2, None, None, True, EXCLUSIVE, "whole"),
    ("gpucast, one job a GPU or slice, all nodes of 1g.10gb*7 carved on demand", "gpucast", "timeslice",
     "1g.10gb*7", None, None, None, True, EXCLUSIVE, "whole"),
]


def _h(s):
    return "-" if s is None else f"{s / 3600:.1f}"


def run_loads(base, gpus: int, heavy: float, configs, one):
    """Each of ``configs`` at the trace's own load and at ``heavy`` x capacity (a progress bar):
    ``one(trace, config) -> (SimResult, raw fields)``. Returns the loads, ``(load, label, summary,
    wall s)`` rows and the raw rows."""
    from rich.progress import track

    import gpucast.cluster as cl
    from gpucast.cluster import metrics

    loads = [("own", None), (f"{heavy:g}", heavy)]
    rows, raw = [], []
    work = [(ln, lv, c) for ln, lv in loads for c in configs]
    for load_name, load, config in track(work, description="simulating", transient=True):
        tr = cl.load_trace(base, gpus=gpus, load=load) if load is not None else base
        t0 = time.perf_counter()
        res, fields = one(tr, config)
        wall = time.perf_counter() - t0
        s = metrics.summarize(res)
        rows.append((load_name, config[0], s, wall))
        raw.append({"load": load_name, "config": config[0], **fields, "wall_s": wall,
                    **{k: v for k, v in s.items() if not isinstance(v, dict)}})
    return loads, rows, raw


def tables(loads, rows, header: str, cells) -> list[str]:
    """One Markdown table per load: the configuration, then ``header``'s columns, a row per
    configuration with ``cells(summary, wall s, util % queued, its change over slot)``."""
    lines = []
    for load_name, _ in loads:
        sel = [r for r in rows if r[0] == load_name]
        slot = next(s for ln, lab, s, _ in sel if lab.startswith("slot"))
        n = header.count("|") + 1
        lines += [f"Load: {'the mix' + chr(39) + 's own arrivals' if load_name == 'own' else load_name + ' x capacity'}", "",
                  f"| configuration | {header} |", "|---|" + "---:|" * n]
        for _, label, s, wall in sel:
            q, q0 = s.get("gpu_util_queued_pct"), slot.get("gpu_util_queued_pct")
            vs = "-" if label.startswith("slot") or q is None or not q0 else f"{100 * (q / q0 - 1):+.1f}%"
            lines.append(f"| {label} | " + " | ".join(cells(s, wall, "-" if q is None else f"{q:.1f}", vs)) + " |")
        lines.append("")
    return lines


def write(out: Path, lines: list, raw: list) -> None:
    """The tables and the machine they ran on to ``out``, the raw rows beside it as JSON."""
    lines = lines + [f"Machine: `nproc` = {os.cpu_count()}, Python {platform.python_version()} (CPU only).", ""]
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--heavy", type=float, default=3.0, help="the queue-keeping load (offered / capacity)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N jobs of the mix")
    ap.add_argument("--out", type=Path, default=RESULTS / "sharing_modes.md")
    args = ap.parse_args(argv)

    import gpucast.cluster as cl
    from gpucast.cluster.trace_formats import Trace

    base = cl.load_trace("pai-mix", gpus=args.gpus, limit=args.limit)

    def one(tr, config):
        _label, policy, mode, layout, nodes, mps_nodes, replicas, *rest = config
        dynamic = rest[0] if rest else False
        params = rest[1] if len(rest) > 1 else {}
        start = rest[2] if len(rest) > 2 else "carved"
        spec = cl.ClusterSpec.build(GPU, args.gpus, 8, layout, nodes, mps_nodes, replicas, dynamic, start)
        res = cl.simulate(tr, spec, policy, sharing=mode, **params)
        return res, {"policy": policy, "sharing": mode, "mig_layout": layout, "mig_nodes": nodes,
                     "mps_nodes": mps_nodes, "mps_replicas": replicas, "mig_dynamic": dynamic, "mig_start": start,
                     "params": params, "mig_repartitions": res.params.get("mig_repartitions")}

    loads, rows, raw = run_loads(base, args.gpus, args.heavy, CONFIGS, one)
    one_gpu = Trace("pai-mix, one-GPU jobs", [j for j in base.jobs if j.gpus == 1])
    _loads, rows1, raw1 = run_loads(one_gpu, args.gpus, args.heavy, ONE_GPU_CONFIGS, one)

    lines = ["## Sharing modes: time-slicing, MPS and MIG layouts (pai-mix on A100-80GB)", "",
             f"Command: `python benchmarks/sharing_modes.py --gpus {args.gpus} --heavy {args.heavy:g}"
             + (f" --limit {args.limit}" if args.limit else "") + "`. "
             f"{len(base.jobs)} jobs of pai-mix on {args.gpus} x {GPU} (nodes of 8), co-location world "
             "measured-pairs, gpucast's measured prediction error, seed 0. Simulated (the MPS rows use the "
             "co-location model's MPS mode with the time-slicing fit's constants, MPS replicas gpucast.cluster.timeshare.mps's "
             "SM limits; MIG slices are gpucast.mig's analytic slices): not measurements. Utilization: the "
             "cluster's NVML utilization over the queued period (while some job waits), a carved GPU counted as "
             "its slices' shares. \"Nodes by mode\": each node's GPUs shared in its own mode, the gpucast policy "
             "placing each job where its predicted cost under that mode is lowest; a GPU of MPS replicas or a "
             "MIG slice takes one-GPU jobs only. \"Re-partitioned on demand\": the carved nodes start carved; when "
             "jobs that want whole GPUs wait, gpucast drains one (no new jobs on its slices, running ones finish; "
             "or only a node already empty), it is reconfigured for 60 s, then its whole GPUs open "
             "(gpucast.cluster.repartition); \"starting whole, carved on demand\": the other way (gpucast carves "
             "only where no waiting job needs several GPUs: on this mix one always does).", ""]

    header = "util % queued | vs slot | JCT mean h | JCT p99 h | queue mean h | makespan h | wall s"

    def cells(s, wall, q, vs):
        return [q, vs, _h(s.get("jct_mean_s")), _h(s.get("jct_p99_s")), _h(s.get("queue_delay_mean_s")),
                _h(s.get("makespan_s")), f"{wall:.1f}"]

    lines += tables(loads, rows, header, cells)
    lines += ["### One job per GPU or slice: the one-GPU jobs of pai-mix", "",
              f"The {len(one_gpu.jobs)} one-GPU jobs of the same mix (the multi-GPU ones left out) on the same "
              "cluster; \"one job a GPU or slice\": gpucast with max_jobs_per_gpu = 1, where a MIG slice takes a job "
              "a whole GPU would otherwise hold alone. \"Carved on demand\": the nodes start whole and gpucast "
              "carves one when no waiting job needs several GPUs and more jobs wait than the node's whole GPUs could "
              "hold, each getting more done on its slices (its own slowdowns and slice costs); the node whose jobs are expected to "
              "end first (start + time limit) drains, is reconfigured for 60 s, and keeps its face at least an "
              "hour. \"-\" utilization: no job ever waited.", ""]
    lines += tables(loads, rows1, header, cells)
    write(args.out, lines, raw + [{"trace": "one-GPU jobs", **r} for r in raw1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
