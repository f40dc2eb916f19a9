"""The `gpucast` command line: a thin shell over the Python API (Typer + rich).

Commands: ``predict``, ``explain``, ``zoo``, ``gpus``, ``demo`` (the default job of ``make run``);
``advise`` (cost-benefit advice) is in ``cli_advise.py``;
``profile`` and ``data`` (real measurements) are in ``cli_data.py``.
Bad input prints one ``error:`` line and exits with 2; nothing is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpucast import cli_plan

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict a deep-learning job's GPU utilization, peak memory and step time from its graph.")
# Tables need room: when output is not a terminal (pipes, CI logs) use 160 columns, not 80.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

DEMO_JOBS = (("resnet50", 64, "amp-fp16"), ("resnet18-cifar", 32, "fp32"), ("bert-base", 32, "amp-fp16"),
             ("gpt2", 8, "amp-fp16"), ("lstm-lm-medium", 20, "fp32"))
DEMO_GPUS = ("t4", "a100-80gb")


def _fail(message: str, code: int = 2) -> None:
    # The message quotes user input (a model name, a file's text): print it literally, not as markup.
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def _looks_like_file(model: str) -> bool:
    from gpucast.graph.onnx.reader import PICKLE_SUFFIXES

    suffix = Path(model).suffix.lower()
    return suffix == ".onnx" or suffix in PICKLE_SUFFIXES or "/" in model or Path(model).is_file()


def _build_job(model: Optional[str], job_file: Optional[Path], batch_size, seq_len, input_shape, precision,
               mode, optimizer, input_pipeline_ms, gpus, hf_config=None, module=None, input_fn=None, loss=None,
               input_dtype=None):
    from gpucast.job import Job, JobError

    if job_file is not None:
        job = Job.load(job_file)
        # A model named on the command line overrides the file's, like every flag (not silently ignored).
        overrides = {k: v for k, v in dict(model=model, batch_size=batch_size, seq_len=seq_len, precision=precision,
                                            mode=mode, optimizer=optimizer, gpus=gpus).items() if v is not None}
        if input_shape:
            overrides["input_shape"] = input_shape
        if input_pipeline_ms is not None:
            overrides["input_pipeline_s"] = input_pipeline_ms / 1e3
        return job.with_(**overrides) if overrides else job
    sources = [name for name, v in (("MODEL", model), ("--hf-config", hf_config), ("--module", module)) if v]
    if not sources:
        _fail("give a zoo model name (see `gpucast zoo`), an ONNX file, --hf-config, --module or --job FILE")
    if len(sources) > 1:
        _fail(f"give one model source, not {' and '.join(sources)}")
    if (input_fn or loss or input_dtype) and not module:
        _fail("--input-fn, --loss and --input-dtype apply to --module jobs")
    # `is None`, not `or`: an explicit 0 (-b 0, --gpus 0) must reach validation, not become the default.
    common = dict(batch_size=32 if batch_size is None else batch_size,
                  precision="fp32" if precision is None else precision,
                  mode="train" if mode is None else mode, optimizer="sgd" if optimizer is None else optimizer,
                  input_pipeline_s=0.0 if input_pipeline_ms is None else input_pipeline_ms / 1e3,
                  gpus=1 if gpus is None else gpus)
    if module:
        from gpucast.graph.usercode import module_job

        if seq_len is not None:
            raise JobError("--seq-len does not apply to --module jobs (describe the input with --input-shape)")
        return module_job(module, input_shape=input_shape, input_dtype=input_dtype or "float32",
                          input_fn_ref=input_fn, loss_ref=loss, **common)
    if hf_config:
        return Job.from_hf_config(hf_config, seq_len=seq_len, input_shape=input_shape or None, **common)
    if _looks_like_file(model):
        from gpucast.graph.onnx.reader import refuse_pickle

        path = Path(model)
        if not path.is_file():
            raise JobError(f"model file {model!r} does not exist")
        with open(path, "rb") as f:
            refuse_pickle(path, f.read(8))
        return Job.from_onnx(path, seq_len=seq_len, input_shape=input_shape or None, **common)
    return Job(model=model, seq_len=seq_len, input_shape=input_shape or None, **common)


def _with_surroundings(job, data_source: Optional[str], sets: Optional[List[str]], dataset: Optional[str] = None,
                       collate: Optional[str] = None, environment: Optional[str] = None):
    """``--data SOURCE``, ``--dataset/--collate/--environment FILE.py:FN`` and ``--set data.num_workers=4``
    (loop.*, stack.*) over the job's own fields."""
    import yaml

    from gpucast.job import JobError

    changes: dict = {}
    if data_source is not None:
        changes.setdefault("data", {})["source"] = data_source
    for name, ref in (("dataset", dataset), ("collate", collate), ("environment", environment)):
        if ref is not None:
            changes.setdefault("data", {})[name] = ref
    for item in sets or []:
        key, eq, value = item.partition("=")
        group, dot, name = key.strip().partition(".")
        if not eq or not dot or group not in ("data", "loop", "stack", "parallel", "adapter", "serve") or not name:
            raise JobError(f"--set takes GROUP.FIELD=VALUE with GROUP data, loop, stack, parallel, adapter or serve, "
                           f"got {item!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        if (group, name) in (("stack", "torch"), ("stack", "cuda"), ("parallel", "network")):
            parsed = value.strip()  # a version stays text: 2.10 is not 2.1
        changes.setdefault(group, {})[name] = parsed
    if not changes:
        return job
    merged = {g: {**(getattr(job, g).to_dict() if getattr(job, g) is not None else {}), **c} for g, c in changes.items()}
    return job.with_(**merged)


def _run(fn):
    """Turn expected failures into one error line and exit code 2 (bad input, including a model
    whose capture fails: its code or shapes are the input); a capture that failed inside gpucast
    or a library (:mod:`gpucast.faults`) is one line and exit code 1."""
    from gpucast.job import JobError

    try:
        return fn()
    except Exception as exc:
        # Look CaptureError up only if the tracer was imported: importing it imports torch, which
        # `gpucast gpus` and `gpucast zoo` never need (a CaptureError implies it is loaded).
        tracer = sys.modules.get("gpucast.graph.tracer")
        if tracer is not None and isinstance(exc, tracer.CaptureError):
            from gpucast.faults import is_input_error

            if not is_input_error(exc):  # gpucast's fault (gpucast.faults), not the input's: exit 1
                _fail(f"{exc} (inside gpucast, not your input's fault; please report it)", code=1)
            _fail(str(exc), code=2)
        if not isinstance(exc, (JobError, ValueError, KeyError, FileNotFoundError)):
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        _fail(str(msg).splitlines()[0] if str(msg) else type(exc).__name__)


def _environment(env_path: Optional[Path]):
    """``--env FILE`` (``gpucast calibrate``): its Environment, or None; notes about how the
    file was read go to stderr."""
    if env_path is None:
        return None
    from gpucast.learn.artifacts import load_environment

    env, messages = load_environment(env_path)
    for m in messages:
        err.print(f"[yellow]note:[/] {m}")
    return env


def _config(path: Optional[Path], env_path: Optional[Path] = None):
    """``--constants FILE`` and ``--env FILE``: (EstimatorConfig, Environment). The environment
    file comes first; a constants file's fields override it."""
    env = _environment(env_path)
    if path is None:
        return None, env
    import yaml

    from gpucast.estimate import load_constants

    try:
        return load_constants(path, env)
    except OSError as exc:
        raise ValueError(f"cannot read constants file {str(path)!r}: {exc.strerror}") from None
    except (ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"constants file {str(path)!r}: {first}") from None


_MODEL = typer.Argument(None, help="A zoo workload name (see `gpucast zoo`) or an ONNX file (.onnx).")
_HF = typer.Option(None, "--hf-config", help="A Hugging Face config.json, config class (BertConfig) or model type (bert).")
_MOD = typer.Option(None, "--module", help="FILE.py:FUNCTION returning your nn.Module (with --input-shape or --input-fn).")
_INFN = typer.Option(None, "--input-fn", help="FILE.py:FUNCTION(batch_size) returning the forward's input tuple.")
_LOSS = typer.Option(None, "--loss", help="FILE.py:FUNCTION(output, inputs) returning the scalar loss.")
_INDT = typer.Option(None, "--input-dtype", help="dtype of --input-shape inputs: float32 | float16 | bfloat16 | int64 "
                                                 "| int32 | bool (default: float32).")
_JOB = typer.Option(None, "--job", help="A job spec file (.json/.yaml); flags override its fields.")
_BS = typer.Option(None, "--batch-size", "-b", help="Batch size per GPU (default: 32).")
_SEQ = typer.Option(None, "--seq-len", help="Sequence length (sequence models).")
_SHAPE = typer.Option(None, "--input-shape", help="Per-sample input shape, e.g. 3,224,224.")
_PREC = typer.Option(None, "--precision", help="fp32 | tf32 | amp-fp16 | amp-bf16 (autocast) | bf16 | fp16 "
                                                "(pure half-precision weights, as FSDP/DeepSpeed/Megatron run them) | "
                                                "fp8 (Transformer Engine: linear layers' GEMMs in FP8, bf16 elsewhere) | "
                                                "mxfp8 | nvfp4 (TE's Blackwell block-scaled recipes, training; "
                                                "default: fp32).")
_MODE = typer.Option(None, "--mode", help="train | infer | serve (an LLM deployment: --set serve.input_len=..., "
                                           "serve.engine=vllm, ...; default: train).")
_OPT = typer.Option(None, "--optimizer", help="sgd | adam | adamw | none (default: sgd).")
_PIPE = typer.Option(None, "--input-pipeline-ms", help="Host input-pipeline time per step, ms (default: 0).")
_NGPU = typer.Option(None, "--gpus", help="Data-parallel GPUs (default: 1).")
_GPU = typer.Option(["a100-80gb"], "--gpu", "-g", help="GPU name (see `gpucast gpus`) or spec file; repeatable.")
_JSON = typer.Option(False, "--json", help="Print JSON instead of a table.")
_CFG = typer.Option(None, "--constants", help="YAML/JSON file overriding estimator or environment constants.")
_ENV = typer.Option(None, "--env", help="An environment file from `gpucast calibrate` (the cluster's fitted constants "
                                        "and intervals) or `gpucast probe-host` (a node's measured CPU).")
_LEARNED = typer.Option(None, "--learned", help="A hybrid model from `gpucast learn fit` that corrects one quantity.")
_DATA = typer.Option(None, "--data", help="Data source: device | memory | images | small-images | tokens | environment "
                                          "| custom (default: the workload's typical script).")
_SET = typer.Option(None, "--set", help="A loader/loop/stack field, e.g. data.num_workers=8, data.pin_memory=true, "
                                        "loop.item_calls=2, loop.progress_bar=true, stack.torch=1.13, "
                                        "stack.cpu_speed=0.7, parallel.tensor=8, parallel.sharding=fsdp-full, "
                                        "parallel.network=roce-1600, adapter.kind=lora, serve.output_len=256, "
                                        "serve.request_rate=4; repeatable.")
_DATASET = typer.Option(None, "--dataset", help="FILE.py:FUNCTION returning your map-style torch Dataset: its "
                                                "__getitem__ and collation are timed on this CPU (data.dataset).")
_COLLATE = typer.Option(None, "--collate", help="FILE.py:FUNCTION, your DataLoader's collate_fn (data.collate; "
                                                "default: default_collate).")
_RLENV = typer.Option(None, "--environment", help="FILE.py:FUNCTION returning your RL environment (reset/step): its "
                                                  "step is timed on this CPU (data.environment).")
_WINDOW = typer.Option(None, "--window", help="Utilization averaged over the first S seconds of the run "
                                              "(start-up included) instead of the steady state.")
_NO_CACHE = typer.Option(False, "--no-cache", help="Predict afresh: neither read nor write the on-disk cache of "
                                                  "predictions (see GPUCAST_CACHE_DIR, GPUCAST_NO_CACHE).")


@app.command()
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
    console.print(_prediction_table(preds))
    console.print(f"model: {preds[0].model_version}; intervals: {preds[0].interval_basis}", highlight=False)
    for p in preds:
        if p.plan:
            console.print(f"plan ({p.gpu}): {cli_plan.plan_line(p.plan)}", highlight=False)
    if any(p.serving for p in preds):
        from gpucast.cli_serving import serving_table

        console.print(serving_table([p for p in preds if p.serving]))
    for p in preds:
        for note in p.notes:
            console.print(f"[yellow]note[/] ({p.gpu}): {note}", highlight=False)


def _prediction_table(preds, title: str = "gpucast prediction") -> Table:
    t = Table(title=title)
    for col in ("model", "batch", "precision", "gpu", "util %", "util range", "step ms", "step range",
                "memory GiB", "fits", "bottleneck"):
        t.add_column(col, justify="right" if col not in ("model", "gpu", "precision", "bottleneck") else "left")
    for p in preds:
        lo, hi = p.gpu_util_interval
        slo, shi = p.step_time_interval
        t.add_row(p.job["model"], str(p.job["batch_size"]), p.job["precision"], p.gpu, f"{p.gpu_util_pct:.1f}",
                  f"{lo:.0f}-{hi:.0f}", f"{p.step_time_s * 1e3:.2f}", f"{slo * 1e3:.1f}-{shi * 1e3:.1f}",
                  _gib(p.memory_peak_bytes), "yes" if p.fits_in_memory else "[red]no[/]", p.bottleneck)
    return t


@app.command()
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


# `gpucast zoo`, `gpucast gpus` and `gpucast demo` (what gpucast knows of, and the embedded default job).
from gpucast.cli_catalog import register as _register_catalog_commands  # noqa: E402

_register_catalog_commands(app, sys.modules[__name__])


# `gpucast profile` and `gpucast data` (real measurements) live in cli_data.py, built on the helpers above.
from gpucast.cli_data import register as _register_measurement_commands  # noqa: E402

_register_measurement_commands(app, sys.modules[__name__])
from gpucast.cli_sim import register as _register_sim_commands  # noqa: E402
_register_sim_commands(app, sys.modules[__name__])
from gpucast.cli_serve import register as _register_serve_command  # noqa: E402
_register_serve_command(app, sys.modules[__name__])
from gpucast.cli_integrations import register as _register_integration_commands  # noqa: E402
_register_integration_commands(app, sys.modules[__name__])
from gpucast.cli_learn import register as _register_learn_commands  # noqa: E402
_register_learn_commands(app, sys.modules[__name__])
from gpucast.cli_probe import register as _register_probe_commands  # noqa: E402

_register_probe_commands(app, sys.modules[__name__])
from gpucast.cli_advise import register as _register_advise_commands  # noqa: E402

_register_advise_commands(app, sys.modules[__name__])
from gpucast.cli_pack import register as _register_pack_command  # noqa: E402

_register_pack_command(app, sys.modules[__name__])


def _click_exceptions():
    """The click exception module typer raises from (typer >= 0.2x vendors click as typer._click)."""
    return sys.modules[typer.BadParameter.__module__]


def main() -> None:
    exceptions = _click_exceptions()
    try:
        rv = app(standalone_mode=False)
        sys.stdout.flush()  # surface a closed pipe here, not at interpreter exit
    except KeyboardInterrupt:
        sys.exit(130)
    except exceptions.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `gpucast`: typer already printed the help
            sys.exit(exc.exit_code)
        # A usage error (bad option value, unknown option or command): one line like our own
        # errors instead of typer's multi-line box. Usage errors exit 2.
        msg = " ".join(exc.format_message().split())
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        err.print(f"[bold red]error:[/] {escape(msg + hint)}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except getattr(exceptions, "Abort", ()):  # not every vendored click has it
        sys.exit(1)
    except BrokenPipeError:  # `gpucast zoo --json | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
