"""Inference services with latency targets next to training: pai-mix on A100-80GB.

pai-mix (the PAI-shaped mix of training jobs) with twelve inference services added by name (a
mix's ``services``: eight ResNet-50 services at batch 16 with a 12 ms target, about 1.2 x their
predicted batch time, and four BERT-base services at batch 8 with a 50 ms target, about 3 x; two
weeks each, arriving in the first three hours; targets and counts our choice), on ``--gpus``
A100-80GB at the mix's own load and at ``--heavy`` times capacity. Rows: ``slot`` (whole GPUs),
the ``gpucast`` policy keeping every service within its target (``respect_latency``, the
default) and told to ignore targets, and the ``oracle`` (told the truth) both ways. Columns: the
share of the services' serving time in which their batches met their targets (the simulated
truth: true solo batch time on the GPU times the true slowdown there), their mean wait to
start, the training jobs' queued-period utilization (the whole cluster's NVML utilization while
some job waits) and its change over ``slot``, their mean and p99 JCT and mean queueing delay.

Simulated, not measured: the services' true batch times carry gpucast's measured step error
(the truth), which the policy does not see (it reads the prediction); request arrivals and
queueing between batches are not modelled (a batch's time is its latency).

    .venv/bin/python benchmarks/services.py [--gpus 64] [--heavy 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import resources
from pathlib import Path

from sharing_modes import _h, run_loads, tables, write  # benchmarks/ is this script's directory

RESULTS = Path(__file__).resolve().parent / "results"
GPU = "a100-80gb"
HOUR = 3600.0
SERVICES = [
    {"id": "resnet50-serve", "arrival_s": [0, 0, 0, 0, HOUR, 2 * HOUR, 2 * HOUR, 3 * HOUR], "duration_s": 14 * 24 * HOUR,
     "latency_ms": 12, "model": "resnet50", "batch_size": 16},
    {"id": "bert-serve", "arrival_s": [0, 0, 0.5 * HOUR, 1.5 * HOUR], "duration_s": 14 * 24 * HOUR,
     "latency_ms": 50, "model": "bert-base", "batch_size": 8},
]
# (label, policy, parameters)
CONFIGS = [
    ("slot, whole GPUs", "slot", {}),
    ("gpucast, services kept within their targets", "gpucast", {}),
    ("gpucast, targets ignored", "gpucast", {"respect_latency": False}),
    ("oracle, services kept within their targets", "oracle", {}),
    ("oracle, targets ignored", "oracle", {"respect_latency": False}),
]


def _f(x):
    return "-" if x is None else f"{x:.1f}"


def mix_file(folder: Path) -> Path:
    """pai-mix with :data:`SERVICES` added, written to ``folder``."""
    import yaml

    d = yaml.safe_load(resources.files("gpucast.data.mixes").joinpath("pai-mix.yaml").read_text())
    d["name"] = "pai-mix-serving"
    d["services"] = SERVICES
    p = folder / "pai-mix-serving.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--heavy", type=float, default=3.0, help="the queue-keeping load (offered / capacity)")
    ap.add_argument("--out", type=Path, default=RESULTS / "services.md")
    args = ap.parse_args(argv)

    import gpucast.cluster as cl

    with tempfile.TemporaryDirectory() as tmp:
        base = cl.load_trace(str(mix_file(Path(tmp))), gpus=args.gpus)

    def one(tr, config):
        _label, policy, params = config
        return cl.simulate(tr, cl.ClusterSpec.homogeneous(GPU, args.gpus), policy, **params), {
            "policy": policy, "params": params}

    loads, rows, raw = run_loads(base, args.gpus, args.heavy, CONFIGS, one)
    n_svc = sum(len(e["arrival_s"]) for e in SERVICES)
    lines = ["## Inference services with latency targets next to training (pai-mix on A100-80GB)", "",
             f"Command: `python benchmarks/services.py --gpus {args.gpus} --heavy {args.heavy:g}`. "
             f"{len(base.jobs) - n_svc} training jobs of pai-mix and {n_svc} inference services (8 x resnet50 "
             "batch 16, target 12 ms; 4 x bert-base batch 8, target 50 ms; two weeks each) on "
             f"{args.gpus} x {GPU} (nodes of 8), co-location world measured-pairs, gpucast's measured prediction "
             "error, seed 0. Simulated, not measured. SLO met: the share of the services' serving time in which "
             "their true batch time was within their target. Utilization: the cluster's NVML utilization over "
             "the queued period; JCT and queueing: the training jobs.", ""]
    lines += tables(loads, rows, "SLO met % | service wait h | util % queued | vs slot | JCT mean h | JCT p99 h | "
                                 "queue mean h | wall s",
                    lambda s, wall, q, vs: [_f(s.get("service_slo_met_pct")), _h(s.get("service_wait_mean_s")), q, vs,
                                            _h(s.get("jct_mean_s")), _h(s.get("jct_p99_s")),
                                            _h(s.get("queue_delay_mean_s")), f"{wall:.1f}"])
    write(args.out, lines, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
