"""`gpucast zoo`, `gpucast gpus` and `gpucast demo`: what gpucast knows of (the named workloads, the GPU
catalog with its MIG slices and, per GPU, the efficiency constants it takes and their sources) and the
embedded default job of `make run`. Registered on the app by
:mod:`gpucast.cli`, whose helpers (``_fail``, ``_run``, the consoles, the prediction table) they use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

# `make run`'s default: the embedded jobs `gpucast demo` predicts, and the GPUs it predicts them on.
DEMO_JOBS = (("resnet50", 64, "amp-fp16"), ("resnet18-cifar", 32, "fp32"), ("bert-base", 32, "amp-fp16"),
             ("gpt2", 8, "amp-fp16"), ("lstm-lm-medium", 20, "fp32"))
DEMO_GPUS = ("t4", "a100-80gb")


def _fed_by(w) -> str:
    d = w.data
    if d is None:
        return "-"
    if d.source == "device":
        return "device"
    extra = [f"{d.num_workers} workers" if d.num_workers is not None else "", "pinned" if d.pin_memory else ""]
    return ", ".join([d.source] + [e for e in extra if e])


def _loop_of(w) -> str:
    lp = w.loop
    if lp is None:
        return "-"
    parts = [f"{lp.item_calls} item" if lp.item_calls is not None else "", "tqdm" if lp.progress_bar else "",
             f"log/{lp.log_every}" if lp.log_every else "", "cudnn-bench" if lp.cudnn_benchmark else ""]
    return ", ".join(p for p in parts if p)


def _print_constants(cli, specs, as_json: bool) -> None:
    """``gpucast gpus --constants``: per GPU, the achieved-efficiency constants it takes and their sources."""
    from gpucast.estimate.achieved_sources import PER_SM, applied

    if as_json:
        print(json.dumps([{"gpu": s.name, "architecture": s.architecture,
                           "compute_capability": list(s.compute_capability),
                           "constants": [r.to_dict() for r in applied(s)]} for s in specs], indent=2))
        return
    for s in specs:
        cc = ".".join(str(x) for x in s.compute_capability)
        t = Table(title=f"{s.name} ({s.architecture}, compute capability {cc}): achieved-efficiency constants "
                        "(data/achieved.yaml; value: share of the sustained peak, or GB/s per SM for caps)")
        for col in ("family", "value", "level", "measured on / cited from", "other architectures"):
            t.add_column(col, justify="right" if col == "value" else "left")
        for r in applied(s):
            value = "no cap" if r.value is None else f"{r.value:g}" + (" GB/s/SM" if r.unit == PER_SM else "")
            t.add_row(r.family, value, r.level, r.origin, r.architecture_independent)
        cli.console.print(t)


def register(app: typer.Typer, cli) -> None:
    @app.command()
    def zoo(as_json: bool = cli._JSON,
            family: Optional[str] = typer.Option(None, "--family", help="Only this family.")) -> None:
        """List the named workloads."""
        from gpucast import zoo as z

        ws = [w for w in z.workloads() if family is None or w.family == family]
        if family is not None and not ws:
            cli._fail(f"unknown family {family!r} (families: {', '.join(z.FAMILIES)})")
        if as_json:
            print(json.dumps([{"name": w.name, "family": w.family, "source": w.source, "description": w.description,
                               "default_batch_size": w.default_batch_size, "default_input": w.default_input,
                               "default_input_shape": list(w.default_input_shape) if w.default_input_shape else None,
                               "default_seq_len": w.default_seq_len,
                               "data": w.data.to_dict() if w.data else None,
                               "loop": w.loop.to_dict() if w.loop else None,
                               "script": w.script} for w in ws], indent=2))
            return
        t = Table(title=f"gpucast zoo ({len(ws)} workloads)")
        t.add_column("name", no_wrap=True)  # a name is what users copy: never cut
        for col in ("family", "source", "default input", "batch", "fed by", "loop", "description"):
            t.add_column(col)
        for w in ws:
            t.add_row(w.name, w.family, w.source, w.default_input, str(w.default_batch_size), _fed_by(w), _loop_of(w),
                      w.description)
        cli.console.print(t)

    @app.command()
    def gpus(as_json: bool = cli._JSON,
             spec: List[Path] = typer.Option([], "--spec", help="Add a GPU from a YAML/JSON spec file; repeatable."),
             mig: bool = typer.Option(False, "--mig", help="List the MIG slices of the MIG-capable GPUs instead: "
                                      "names to use as GPU:PROFILE (e.g. a100-40gb:1g.5gb)."),
             constants: bool = typer.Option(False, "--constants", help="Per GPU, the achieved-efficiency "
                                            "constants it takes (gpucast.estimate.achieved): value, the level "
                                            "it comes from, what it was measured on or cited from."),
             gpu: Optional[str] = typer.Option(None, "--gpu", help="Only this GPU (a catalog name, a --spec "
                                               "GPU or GPU:PROFILE).")) -> None:
        """List the GPU catalog (datasheet figures), plus any --spec files; --mig: the MIG slices;
        --constants: the efficiency constants each GPU takes and their sources."""
        from gpucast import mig as mig_
        from gpucast.hardware import catalog, get_gpu, register_gpu

        cli._run(lambda: [register_gpu(s) for s in spec])
        if mig and (constants or gpu):
            cli._fail("--mig lists every MIG slice: give a slice as --gpu GPU:PROFILE instead")
        if constants:
            _print_constants(cli, [cli._run(lambda: get_gpu(gpu))] if gpu else list(catalog().values()), as_json)
            return
        if mig:
            rows = [(p, get_gpu(p.full_name)) for g in mig_.capable() for p in mig_.profiles(g)]
            if as_json:
                print(json.dumps([{**s.to_dict(), "profile": p.name, "compute_slices": p.compute_slices,
                                   "memory_slices": p.memory_slices, "instances": p.instances,
                                   "resource": p.resource_name} for p, s in rows], indent=2))
                return
            t = Table(title=f"MIG slices ({len(rows)} profiles of {len(mig_.capable())} GPUs; NVIDIA MIG User Guide)")
            for col in ("name", "slices (compute/memory)", "per GPU", "SMs", "BF16 TFLOPS", "memory GiB", "GB/s",
                        "L2 MiB", "Kubernetes resource"):
                t.add_column(col, justify="left" if col in ("name", "Kubernetes resource") else "right")
            for p, s in rows:
                t.add_row(s.name, f"{p.compute_slices}/{p.of_compute}, {p.memory_slices}/{p.of_memory}",
                          str(p.instances), str(s.sm_count), f"{s.bf16_tflops:.1f}", f"{s.memory_gib:.2f}",
                          f"{s.memory_bandwidth_gbs:.0f}", f"{s.l2_bytes / 2**20:g}", p.resource_name)
            cli.console.print(t)
            return
        specs = [cli._run(lambda: get_gpu(gpu))] if gpu else list(catalog().values())
        if as_json:
            print(json.dumps([s.to_dict() for s in specs], indent=2))
            return
        t = Table(title=f"GPU catalog ({len(specs)} GPUs, vendor datasheet figures; --mig: their MIG slices)")
        for col in ("name", "architecture", "SMs", "FP32 TFLOPS", "TF32", "FP16 TC", "BF16", "FP8", "FP4", "memory GiB",
                    "GB/s", "L2 MiB"):
            t.add_column(col, justify="left" if col in ("name", "architecture") else "right")

        def f(v):
            return "-" if v is None else f"{v:g}"

        for s in specs:
            t.add_row(s.name, s.architecture, str(s.sm_count), f(s.fp32_tflops), f(s.tf32_tflops),
                      f(s.fp16_tflops), f(s.bf16_tflops), f(s.fp8_tflops), f(s.fp4_tflops), f"{s.memory_gib:.1f}",
                      f(s.memory_bandwidth_gbs), f"{s.l2_bytes / 2**20:g}")
        cli.console.print(t)

    @app.command()
    def demo(as_json: bool = cli._JSON) -> None:
        """The embedded default job of `make run`: a few zoo workloads on two GPU types."""
        from rich.progress import track

        from gpucast.api import predict as api_predict
        from gpucast.job import Job

        jobs = [Job(model=m, batch_size=b, precision=p, optimizer="adamw" if "bert" in m or "gpt" in m else "sgd")
                for m, b, p in DEMO_JOBS]
        preds = []
        for job in track(jobs, description="tracing and predicting", console=cli.err, transient=True):
            preds.extend(api_predict(job, g) for g in DEMO_GPUS)
        if as_json:
            print(json.dumps([p.to_dict() for p in preds], indent=2))
            return
        cli.console.print(cli._prediction_table(preds, title="gpucast demo: analytic predictions (not measurements)"))
