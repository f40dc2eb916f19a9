"""`gpucast predict` and `gpucast explain`: one job's prediction on one or more GPUs, and where its time and
memory go. A served model's answer is its serving table; the iteration figures beside it are one engine
iteration's, labelled as such.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from gpucast.cli import plan as cli_plan
from gpucast.cli.common import (_BS, _CFG, _COLLATE, _DATA, _DATASET, _ENV, _GPU, _HF, _INDT, _INFN, _JOB, _JSON,
                                _LEARNED, _LOSS, _MOD, _MODE, _MODEL, _NGPU, _NO_CACHE, _OPT, _PIPE, _PREC, _RLENV,
                                _SEQ, _SET, _SHAPE, _WINDOW, _build_job, _config, _gib, _prediction_table, _run,
                                _with_surroundings, console)


def predict(model: Optional[str] = _MODEL, job: Optional[Path] = _JOB, batch_size: Optional[int] = _BS,
            seq_len: Optional[int] = _SEQ, input_shape: Optional[str] = _SHAPE, precision: Optional[str] = _PREC,
            mode: Optional[str] = _MODE, optimizer: Optional[str] = _OPT,
            input_pipeline_ms: Optional[float] = _PIPE, gpus: Optional[int] = _NGPU,
            gpu: List[str] = _GPU, as_json: bool = _JSON, constants: Optional[Path] = _CFG,
            hf_config: Optional[str] = _HF, module: Optional[str] = _MOD, input_fn: Optional[str] = _INFN,
            loss: Optional[str] = _LOSS, input_dtype: Optional[str] = _INDT, data: Optional[str] = _DATA,
            set_: Optional[List[str]] = _SET, window: Optional[float] = _WINDOW,
            env_file: Optional[Path] = _ENV, learned: Optional[Path] = _LEARNED,
            dataset: Optional[str] = _DATASET, collate: Optional[str] = _COLLATE,
            environment: Optional[str] = _RLENV, no_cache: bool = _NO_CACHE) -> None:
    """Predict GPU utilization, peak memory and step time of a job on one or more GPUs.

    A job asked about before is answered from an on-disk cache, without importing torch (see
    --no-cache); --module jobs and jobs naming their own dataset or environment never are."""
    from gpucast import disk_cache
    from gpucast.hardware import get_gpu

    def go():
        j = _build_job(model, job, batch_size, seq_len, input_shape, precision, mode, optimizer,
                       input_pipeline_ms, gpus, hf_config, module, input_fn, loss, input_dtype)
        j = _with_surroundings(j, data, set_, dataset, collate, environment)
        cfg, env = _config(constants, env_file)
        hybrid = None
        if learned is not None:
            from gpucast.learn.artifacts import load_model

            hybrid = load_model(learned)
        specs = [get_gpu(g) for g in gpu]  # every --gpu checked before the (slow) capture

        def compute(spec):
            from gpucast.api import predict as api_predict  # the estimator and, for a capture, torch

            return api_predict(j, spec, cfg, env, window, hybrid)

        return disk_cache.predictions(j, specs, compute, env, window, [p for p in (constants, learned) if p],
                                      enabled=not no_cache)

    preds = _run(go)
    if as_json:
        out = [p.to_dict() for p in preds]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return
    if preds[0].serving:   # a served model: its serving answer first, then the run's GPU figures (cli.serving)
        from gpucast.cli.serving import iteration_table, serving_table

        console.print(serving_table(preds))
        console.print(iteration_table(preds))
    else:
        console.print(_prediction_table(preds))
    console.print(f"model: {preds[0].model_version}; intervals: {preds[0].interval_basis}", highlight=False)
    for p in preds:
        if p.plan:
            console.print(f"plan ({p.gpu}): {cli_plan.plan_line(p.plan)}", highlight=False)
    for p in preds:
        for note in p.notes:
            console.print(f"[yellow]note[/] ({p.gpu}): {note}", highlight=False)



def explain(model: Optional[str] = _MODEL, job: Optional[Path] = _JOB, batch_size: Optional[int] = _BS,
            seq_len: Optional[int] = _SEQ, input_shape: Optional[str] = _SHAPE, precision: Optional[str] = _PREC,
            mode: Optional[str] = _MODE, optimizer: Optional[str] = _OPT,
            input_pipeline_ms: Optional[float] = _PIPE, gpus: Optional[int] = _NGPU,
            gpu: str = typer.Option("a100-80gb", "--gpu", "-g", help="GPU name or spec file."),
            as_json: bool = _JSON, constants: Optional[Path] = _CFG,
            top: int = typer.Option(12, "--top", min=1, help="Rows of the time breakdown to show."),
            hf_config: Optional[str] = _HF, module: Optional[str] = _MOD, input_fn: Optional[str] = _INFN,
            loss: Optional[str] = _LOSS, input_dtype: Optional[str] = _INDT, data: Optional[str] = _DATA,
            set_: Optional[List[str]] = _SET, window: Optional[float] = _WINDOW,
            env_file: Optional[Path] = _ENV, dataset: Optional[str] = _DATASET, collate: Optional[str] = _COLLATE,
            environment: Optional[str] = _RLENV) -> None:
    """Where the time and the memory go: breakdown by phase and op category, and uncosted ops."""
    from gpucast.api import explain as api_explain

    def go():
        j = _build_job(model, job, batch_size, seq_len, input_shape, precision, mode, optimizer,
                       input_pipeline_ms, gpus, hf_config, module, input_fn, loss, input_dtype)
        j = _with_surroundings(j, data, set_, dataset, collate, environment)
        return api_explain(j, gpu, *_config(constants, env_file), window)

    ex = _run(go)
    p = ex.prediction
    rows = ex.by_phase_and_category()
    memory = ex.estimate.memory.breakdown
    if as_json:
        print(json.dumps({"prediction": p.to_dict(), "time_breakdown": rows, "memory_breakdown": memory,
                          "peak_phase": ex.trace.memory.peak_phase, "uncosted_ops": p.uncosted_ops}, indent=2))
        return
    console.print(_prediction_table([p]))
    console.print(f"bottleneck: [bold]{p.bottleneck}[/] — {p.bottleneck_reason}", highlight=False)
    sur = p.surroundings
    d, lp = sur["data"], sur["loop"]
    console.print(f"fed by: {d['source']} ({d['num_workers']} workers, pin_memory {d['pin_memory']}, non_blocking "
                  f"{d['non_blocking']}); loader {p.loader_time_s * 1e3:.2f} ms of host time per step; loop: "
                  f"{lp['item_calls']} .item() per step, progress bar {lp['progress_bar']}, log every "
                  f"{lp['log_every'] or '-'} steps, cudnn.benchmark {lp['cudnn_benchmark']}; stack: "
                  + ", ".join(f"{k} {v}" for k, v in sur["stack"].items()) + f"; utilization: {p.util_basis}",
                  highlight=False)
    console.print(f"GPU use: kernels hold the GPU {p.gpu_held_pct:.1f}% of the time (what a co-located job "
                  f"competes for); NVML reports {p.gpu_util_pct:.1f}% (idle gaps shorter than its counter's tick "
                  f"read busy; {p.gpu_idle_gaps} idle gaps per step)", highlight=False)
    console.print(f"host issues ops for {p.host_time_s * 1e3:.2f} ms; GPU busy {p.gpu_busy_s * 1e3:.2f} ms of "
                  f"{p.step_time_s * 1e3:.2f} ms; {p.ops} ops, {p.kernels} kernels, {p.flops / 1e9:.1f} GFLOP, "
                  f"{p.bytes / 1e9:.2f} GB moved", highlight=False)
    busy = sum(r["gpu_time_s"] for r in rows) or 1.0
    t = Table(title="GPU time by phase and op category" + (" (one micro-batch of one replica, before the plan "
                                                           "splits it)" if p.plan else ""))
    for col in ("phase", "category", "ops", "kernels", "GFLOP", "GB", "GPU ms", "share"):
        t.add_column(col, justify="left" if col in ("phase", "category") else "right")
    for r in rows[:top]:
        t.add_row(r["phase"], r["category"], str(r["ops"]), str(r["kernels"]), f"{r['flops'] / 1e9:.1f}",
                  f"{r['bytes'] / 1e9:.2f}", f"{r['gpu_time_s'] * 1e3:.2f}", f"{r['gpu_time_s'] / busy:.0%}")
    console.print(t)
    m = Table(title=f"Memory of the busiest GPU (pipeline stage {p.plan['busiest_memory_stage']})" if p.plan else
              f"Memory at the peak (during {ex.trace.memory.peak_phase})")
    m.add_column("what")
    m.add_column("GiB", justify="right")
    for k, v in memory.items():
        if v:
            m.add_row(k.replace("_", " "), _gib(v))
    m.add_row("[bold]total[/]", f"[bold]{_gib(p.memory_peak_bytes)}[/]")
    console.print(m)
    if p.plan:
        cli_plan.print_plan(console, p, _gib)
    cov = f"op coverage {p.op_coverage:.1%} of ops, {p.time_coverage:.1%} of GPU time"
    if p.uncosted_ops:
        listed = ", ".join(f"{k} x{v}" for k, v in sorted(p.uncosted_ops.items(), key=lambda kv: -kv[1]))
        console.print(f"{cov}; uncosted ops (default cost applied): {listed}", highlight=False)
    else:
        console.print(f"{cov}; every op had a cost rule", highlight=False)
    for note in p.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)

