"""What every command of the `gpucast` command line shares: the consoles, the one-line error, the job built
from the flags and a job file, the run that turns an exception into that error, the environment and constants
files, the options several commands take, and the prediction table.

A bad input prints one ``error:`` line and exits with 2; nothing is written. No command lives here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Tables need room: when output is not a terminal (pipes, CI logs) use 160 columns, not 80.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


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
        if (group, name) in (("stack", "torch"), ("stack", "cuda"), ("parallel", "network"), ("serve", "engine_version")):
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

