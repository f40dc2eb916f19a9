"""``gpucast advise JOB``: which GPU, how many, what batch and precision, whether to share, and at what cost.

With ``--plans`` (or a job with a ``parallel`` group, ``--set parallel.sharding=...``) the options
are parallel plans beyond one node (:mod:`gpucast.advisor.plans`): ``--counts``, ``--shardings``,
``--tensors``, ``--pipelines``, ``--recomputes`` and ``--batches`` (micro-batches) narrow the
search, ``--contexts``, ``--experts``, ``--virtual-pipelines`` and ``--sequence-parallel on,off``
widen it, ``--global-batch`` sets the batch every plan keeps, ``--max-plans`` bounds it, and the
table shows each plan's GPUs, nodes, tensor/pipeline/data (and context/expert/virtual) degrees,
sequence parallelism (``sp``), sharding, recompute, micro-batch x accumulation, exposed communication by kind and the bubble, tokens/s per GPU, MFU and memory.

A thin shell over :func:`gpucast.advisor.advise` like :mod:`.app` (which calls ``register(app, common)``): the job is given as to ``predict``; the search, the prices, the
constraints and the output are flags. Prints the Pareto front (``--all``: every option) with the
recommendation, ``--json`` for tools, ``--report FILE.html`` for a plot of the front. Bad input
(a duration, a list, a price file, an unknown GPU, an impossible request) is one ``error:`` line
and exit 2; the report is reserved before any work (:func:`gpucast.fileio.reserve_output`) and
written atomically, and a write failure then is one ``error:`` line too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Optional

import typer

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|min|s)?", re.I)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "min": 60, "s": 1, None: 1}


def parse_duration(text: str) -> float:
    """``90m``, ``12h``, ``1h30m``, ``2d``, ``3600`` (seconds) -> seconds."""
    s = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION.match(s, pos)
        if not m or m.end() == pos:
            raise ValueError(f"--deadline {text!r}: give a duration like 90m, 12h, 1h30m, 2d or seconds")
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not s or total <= 0:
        raise ValueError(f"--deadline {text!r}: give a positive duration like 90m, 12h, 1h30m, 2d or seconds")
    return total


def parse_money(text: str) -> float:
    try:
        v = float(text.strip().lstrip("$").replace(",", ""))
    except ValueError:
        raise ValueError(f"--budget {text!r}: give an amount in USD, e.g. 500 or $1,200") from None
    if not v > 0 or v == float("inf"):
        raise ValueError(f"--budget {text!r}: give a positive amount in USD")
    return v


def parse_list(text: Optional[str], flag: str, kind=int) -> Optional[list]:
    """``1,2,4`` -> [1, 2, 4]; None stays None."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"{flag} {text!r}: give a comma-separated list")
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: give a comma-separated list of {kind.__name__}s") from None


def parse_on_off(text: Optional[str], flag: str) -> Optional[list[bool]]:
    """``on,off`` -> [True, False]; None stays None."""
    items = parse_list(text, flag, str)
    if items is None:
        return None
    values = {"on": True, "off": False, "true": True, "false": False}
    bad = [t for t in items if t.lower() not in values]
    if bad:
        raise ValueError(f"{flag} {text!r}: give on, off or on,off")
    return [values[t.lower()] for t in items]


def parse_global_batch(text: str, job) -> int:
    """``--global-batch``: ``1024`` sequences, or ``4194304tok`` tokens (a whole number of the job's
    ``seq_len``-token sequences)."""
    m = re.fullmatch(r"\s*(\d+)\s*(tok|tokens)?\s*", text)
    if m is None or int(m[1]) < 1:
        raise ValueError(f"--global-batch {text!r}: give sequences (1024) or tokens (4194304tok)")
    n = int(m[1])
    if not m[2]:
        return n
    seq = job.seq_len or 0
    if seq < 1 or n % seq:
        raise ValueError(f"--global-batch {text!r}: {n} tokens is not a whole number of the job's "
                         f"{seq or 'unset'}-token sequences")
    return n // seq


def _share_cell(o) -> str:
    """The share column: a fraction and its mode (``0.25 mps``), ``mig`` for a MIG slice, empty for whole GPUs."""
    if o.share < 1:
        return f"{o.share:g} {o.mode}".strip()
    return "mig" if o.mode == "mig" else ""


def table(advice, show_all: bool = False):
    from rich.table import Table

    from gpucast.advisor.units import duration, duration_range, usd

    t = Table(title=f"gpucast advise: {advice.job.get('model')} ({advice.samples_per_epoch:,.0f} samples/epoch, "
                    f"{advice.epochs:g} epochs)")
    for col in ("", "gpu", "n", "batch", "precision", "share", "step ms", "samples/s", "epoch", "range",
                "$/epoch", "range", "$/run", "util %", "GiB/GPU", "memory"):
        t.add_column(col, justify="left" if col in ("", "gpu", "precision", "memory") else "right")
    rows = range(len(advice.options)) if show_all else advice.shown()
    for i in rows:
        o = advice.options[i]
        mark = "*" if i == advice.recommended else ("front" if show_all and i in advice.front else "")
        batch = f"{o.batch_size}" + (f" x{o.accumulation}" if o.accumulation > 1 else "")
        t.add_row(mark, o.gpu, str(o.gpus), batch, o.precision, _share_cell(o),
                  f"{o.step_time_s * 1e3:.1f}", f"{o.samples_per_s:,.0f}", duration(o.epoch_s),
                  duration_range(*o.epoch_interval_s), usd(o.cost_per_epoch),
                  f"{usd(o.cost_per_epoch_interval[0])}-{usd(o.cost_per_epoch_interval[1])}", usd(o.cost_per_run), f"{o.util_pct:.0f}",
                  f"{o.memory_bytes / 2**30:.1f}", o.memory_fit)
    return t


def plan_table(advice, show_all: bool = False):
    """The plans: one row each (the front and the pick, or ``show_all``); the epoch's and the
    cost's ranges are in ``--json`` and ``--report``."""
    from rich.table import Table

    from gpucast.advisor.units import duration, usd

    rows = list(range(len(advice.options))) if show_all else advice.shown()
    precisions = len({advice.options[i].precision for i in rows}) > 1
    t = Table(title=f"gpucast advise --plans: {advice.job.get('model')} ({advice.samples_per_epoch:,.0f} "
                    f"samples/epoch, {advice.epochs:g} epochs)")
    shape = "t/p/d"
    extra = [(k, name) for k, name in (("context", "c"), ("expert", "e"), ("virtual_pipeline", "v"))
             if any(getattr(advice.options[i].plan, k) > 1 for i in rows)]
    if extra:
        shape = "t/p/" + "/".join(n for _, n in extra) + "/d"
    cols = ["", "GPUs", "nodes", shape, "sharding", "recompute", "micro x acc"] + (["precision"] if precisions else [])
    cols += ["step s", "tok/s/GPU", "MFU %", "epoch", "$/epoch", "$/run", "GiB/GPU", "memory"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("", "GPUs", "sharding", "recompute", "precision", "memory")
                     else "right")
    for i in rows:
        o = advice.options[i]
        pl = o.plan
        mark = "*" if i == advice.recommended else ("front" if show_all and i in advice.front else "")
        degrees = [pl.tensor, pl.pipeline] + [getattr(pl, k) for k, _ in extra] + [pl.data]
        cells = [mark, f"{o.gpu} x{o.gpus}", str(pl.nodes), "/".join(map(str, degrees)), pl.sharding,
                 pl.recompute, f"{o.batch_size} x{o.accumulation}"] + ([o.precision] if precisions else [])
        cells += [f"{o.step_time_s:.3g}", f"{pl.tokens_per_s_per_gpu:,.0f}", f"{pl.mfu * 100:.0f}",
                  duration(o.epoch_s),
                  usd(o.cost_per_epoch), usd(o.cost_per_run), f"{o.memory_bytes / 2**30:.1f}", o.memory_fit]
        t.add_row(*cells)
    return t


def plan_time_table(advice, show_all: bool = False):
    """Where each shown plan's optimizer step goes: exposed communication by kind and the pipeline
    bubble, as % of the step (``step_breakdown_s`` in ``--json`` has the seconds)."""
    from rich.table import Table

    from gpucast.advisor.options import PlanFields

    rows = list(range(len(advice.options))) if show_all else advice.shown()
    t = Table(title="where the step goes: exposed communication and bubble, % of the step")
    for col in ["plan", *(k for k, _ in PlanFields.COMM_KINDS), "bubble"]:
        t.add_column(col, justify="left" if col == "plan" else "right")
    for i in rows:
        o = advice.options[i]
        sh = o.plan.shares(o.step_time_s)   # a plan's step is one optimizer step
        t.add_row(f"{o.gpu} x{o.gpus} {o.plan.label} b{o.batch_size} x{o.accumulation}",
                  *(f"{100 * sh[k]:.1f}" for k, _ in PlanFields.COMM_KINDS),
                  f"{100 * sh['bubble']:.1f}")
    return t


def register(app: typer.Typer, cli) -> None:
    """Add ``advise`` to ``app``; ``cli`` is the module of ``app``."""

    @app.command("advise")
    def advise_cmd(model: Optional[str] = cli._MODEL, job: Optional[Path] = cli._JOB,
                   batch_size: Optional[int] = cli._BS, seq_len: Optional[int] = cli._SEQ,
                   input_shape: Optional[str] = cli._SHAPE, precision: Optional[str] = cli._PREC,
                   mode: Optional[str] = cli._MODE, optimizer: Optional[str] = cli._OPT,
                   input_pipeline_ms: Optional[float] = cli._PIPE, gpus: Optional[int] = cli._NGPU,
                   hf_config: Optional[str] = cli._HF, module: Optional[str] = cli._MOD,
                   input_fn: Optional[str] = cli._INFN, loss: Optional[str] = cli._LOSS,
                   input_dtype: Optional[str] = cli._INDT, data: Optional[str] = cli._DATA,
                   set_: Optional[List[str]] = cli._SET, dataset: Optional[str] = cli._DATASET,
                   collate: Optional[str] = cli._COLLATE, environment: Optional[str] = cli._RLENV,
                   gpu: List[str] = typer.Option([], "--gpu", "-g", help="GPU types to consider (names or spec files; "
                                                                        "repeatable or comma-separated; default: "
                                                                        "every priced catalog GPU)."),
                   counts: Optional[str] = typer.Option(None, "--counts", help="GPU counts to try, e.g. 1,2,4,8 "
                                                                              "(default: 1,2,4,8 in one node; "
                                                                              "plans: 1 and 8,16,...,512)."),
                   max_gpus: Optional[int] = typer.Option(None, "--max-gpus", help="At most this many GPUs "
                                                                                  "(default: 8, one node; "
                                                                                  "plans: 512)."),
                   batches: Optional[str] = typer.Option(None, "--batches", help="Per-GPU batch sizes to try, e.g. "
                                                                                "64,128,256 (default: the job's "
                                                                                "and 2x, 4x, 8x; plans: micro-"
                                                                                "batches, the job's, half, twice)."),
                   keep_global_batch: Optional[bool] = typer.Option(
                       None, "--keep-global-batch/--no-keep-global-batch",
                       help="Keep the job's global batch (micro-batch x accumulation x data-parallel GPUs): "
                            "smaller micro-batches with gradient accumulation (default: off; on for plans)."),
                   plans: bool = typer.Option(False, "--plans", help="Search parallel plans beyond one node: "
                                                                    "sharding, tensor, pipeline, recompute, "
                                                                    "micro-batch (implied by a job with a "
                                                                    "parallel group)."),
                   shardings: Optional[str] = typer.Option(None, "--shardings", help="Plans: shardings to try, e.g. "
                                                                                    "zero1,fsdp-full (default: the "
                                                                                    "job's, ddp, zero1, fsdp-full, "
                                                                                    "fsdp-hybrid above a node)."),
                   tensors: Optional[str] = typer.Option(None, "--tensors", help="Plans: tensor-parallel degrees, "
                                                                                "e.g. 1,2,4,8 (default)."),
                   pipelines: Optional[str] = typer.Option(None, "--pipelines", help="Plans: pipeline degrees, e.g. "
                                                                                    "1,2,4,8 (default)."),
                   contexts: Optional[str] = typer.Option(None, "--contexts", help="Plans: context-parallel "
                                                                                  "degrees, e.g. 1,2,4 (default: "
                                                                                  "the job's)."),
                   experts: Optional[str] = typer.Option(None, "--experts", help="Plans: expert-parallel degrees "
                                                                                "of a mixture-of-experts model, "
                                                                                "e.g. 1,8,16 (default: the job's; "
                                                                                "unset there: 1 and 8-64 dividing "
                                                                                "the experts)."),
                   virtuals: Optional[str] = typer.Option(None, "--virtual-pipelines", help="Plans: interleaved "
                                                                                           "chunks per pipeline rank, "
                                                                                           "e.g. 1,2,4 (default: the "
                                                                                           "job's)."),
                   sequence_parallel: Optional[str] = typer.Option(None, "--sequence-parallel", help="Plans: "
                                                                   "sequence parallelism at tensor > 1: on, off or "
                                                                   "on,off (default: the job's)."),
                   global_batch: Optional[str] = typer.Option(None, "--global-batch", help="Plans: the global batch "
                                                                                          "every plan keeps, in "
                                                                                          "sequences (1024) or tokens "
                                                                                          "(4194304tok), instead of "
                                                                                          "the job's grad_accum."),
                   recomputes: Optional[str] = typer.Option(None, "--recomputes", help="Plans: activation "
                                                                                      "recompute modes, e.g. "
                                                                                      "none,full (default: none, "
                                                                                      "selective, full)."),
                   max_plans: Optional[int] = typer.Option(None, "--max-plans", help="Plans: predict at most this "
                                                                                    "many (default 400)."),
                   precisions: Optional[str] = typer.Option(None, "--precisions", help="Precisions to try, e.g. "
                                                                                      "fp32,amp-bf16 (default: "
                                                                                      "fp32, amp-fp16, amp-bf16 "
                                                                                      "where the GPU runs them)."),
                   share: bool = typer.Option(True, "--share/--no-share", help="Also offer a share of one GPU "
                                                                              "(MPS/MIG/HAMi/Ray) to small jobs."),
                   prices: Optional[str] = typer.Option(None, "--prices", help="Price table: a packaged name "
                                                                              "(cloud-2024, cloud-2026, gavel-2020) or a "
                                                                              "YAML file of your own."),
                   provider: Optional[str] = typer.Option(None, "--provider", help="Only this provider's offers "
                                                                                  "(aws, gcp, azure, ...)."),
                   samples_per_epoch: Optional[int] = typer.Option(None, "--samples-per-epoch",
                                                                   help="Samples per epoch (default: the "
                                                                        "workload's dataset size)."),
                   epochs: float = typer.Option(1.0, "--epochs", help="Epochs per run (cost per run)."),
                   deadline: Optional[str] = typer.Option(None, "--deadline", help="The run must finish within "
                                                                                  "this long: 90m, 12h, 2d."),
                   budget: Optional[str] = typer.Option(None, "--budget", help="The run must cost at most this "
                                                                              "(USD)."),
                   show_all: bool = typer.Option(False, "--all", help="List every option, not only the front."),
                   serve: bool = typer.Option(False, "--serve", help="Size an LLM deployment (a mode 'serve' job, "
                                                                    "implied by --mode serve): GPU type, tensor "
                                                                    "degree (--tensors), precision and engine "
                                                                    "(--engines) meeting --ttft/--tpot at the "
                                                                    "job's load, cheapest per million tokens."),
                   ttft: Optional[float] = typer.Option(None, "--ttft", help="Serving: p90 time to first token "
                                                                            "at most this many seconds."),
                   tpot: Optional[float] = typer.Option(None, "--tpot", help="Serving: p90 time per output token "
                                                                            "at most this many seconds."),
                   engines: Optional[str] = typer.Option(None, "--engines", help="Serving: engines to try, e.g. "
                                                                                "vllm,sglang (default: the job's)."),
                   replicas: int = typer.Option(1, "--replicas", help="Serving: at most this many replicas of a "
                                                                      "deployment behind a load balancer, each "
                                                                      "serving its share of the load."),
                   layouts: Optional[str] = typer.Option(None, "--layouts", help="Serving: tp (tensor "
                                                                                 "parallelism) and/or dep (attention "
                                                                                 "data parallelism with expert "
                                                                                 "parallelism; default both for a "
                                                                                 "mixture-of-experts model) and/or "
                                                                                 "pd (disaggregated prefill and "
                                                                                 "decode over --replicas)."),
                   spec_tokens: Optional[str] = typer.Option(None, "--spec-tokens", help="Serving: draft counts "
                                                                               "to try for a job that drafts "
                                                                               "(serve.spec_method), e.g. 1,2,4; "
                                                                               "its acceptance carried to each."),
                   prefill_tensors: Optional[str] = typer.Option(None, "--prefill-tensors", help="Serving, pd "
                                                                                         "layouts: prefill "
                                                                                         "instances' tensor "
                                                                                         "degrees to try besides "
                                                                                         "the decode side's."),
                   report: Optional[Path] = typer.Option(None, "--report", help="Write the plot of the front here: an "
                                                                               "HTML page (offline) or, for "
                                                                               "FILE.svg, a static image."),
                   as_json: bool = cli._JSON, constants: Optional[Path] = cli._CFG,
                   env_file: Optional[Path] = cli._ENV) -> None:
        """Which GPU type, how many, what batch size and precision, and whether to share: time and cost per epoch."""
        from gpucast.advisor import advise

        def _search(kw):
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            searching_plans = plans or kw["job"].parallel is not None
            with Progress(TextColumn("plans" if searching_plans else "advising"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=cli.err, transient=True) as bar:
                task = bar.add_task("options", total=None)
                return cli._run(lambda: advise(
                    kw.pop("job"), kw.pop("gpus"), keep_global_batch=keep_global_batch, share=share,
                    max_gpus=max_gpus, prices=prices, provider=provider, samples_per_epoch=samples_per_epoch,
                    epochs=epochs, progress=lambda done, total: bar.update(task, completed=done, total=total),
                    plans=plans, max_plans=max_plans, **kw))

        def setup():
            j = cli._build_job(model, job, batch_size, seq_len, input_shape, precision, mode, optimizer,
                               input_pipeline_ms, gpus, hf_config, module, input_fn, loss, input_dtype)
            j = cli._with_surroundings(j, data, set_, dataset, collate, environment)
            cfg, env = cli._config(constants, env_file)
            names = [g.strip() for item in gpu for g in item.split(",") if g.strip()]
            return dict(job=j, gpus=names or None, counts=parse_list(counts, "--counts"),
                        batches=parse_list(batches, "--batches"),
                        precisions=parse_list(precisions, "--precisions", str),
                        shardings=parse_list(shardings, "--shardings", str),
                        tensors=parse_list(tensors, "--tensors"), pipelines=parse_list(pipelines, "--pipelines"),
                        recomputes=parse_list(recomputes, "--recomputes", str),
                        contexts=parse_list(contexts, "--contexts"), experts=parse_list(experts, "--experts"),
                        virtual_pipelines=parse_list(virtuals, "--virtual-pipelines"),
                        sequence_parallel=parse_on_off(sequence_parallel, "--sequence-parallel"),
                        global_batch=parse_global_batch(global_batch, j) if global_batch is not None else None,
                        deadline_s=parse_duration(deadline) if deadline is not None else None,
                        budget_usd=parse_money(budget) if budget is not None else None, config=cfg, env=env)

        from gpucast.fileio import reserve_output

        # Reserve --report before the search: an unwritable one is one error line, not lost advice.
        reserved = cli._run(lambda: reserve_output(report, "--report")) if report is not None else None
        try:
            kw = cli._run(setup)
            if serve or kw["job"].mode == "serve":
                from gpucast.cli.advise_serving import advise_serving_cmd

                advise_serving_cmd(cli, kw, parse_list(tensors, "--tensors"), parse_list(engines, "--engines", str),
                                   ttft, tpot, prices, provider, as_json, replicas,
                                   parse_list(layouts, "--layouts", str), parse_list(spec_tokens, "--spec-tokens"),
                                   parse_list(prefill_tensors, "--prefill-tensors"))
                return
            result = _search(kw)
            if reserved is not None:
                from gpucast.advisor.report import write_report

                cli._run(lambda: write_report(reserved, result))
        finally:
            if reserved is not None:
                reserved.discard()
        if as_json:
            print(json.dumps(result.to_dict(), indent=2))
        else:
            cli.console.print(plan_table(result, show_all) if result.plans else table(result, show_all))
            if result.plans:
                cli.console.print(plan_time_table(result, show_all))
            cli.console.print(result.message, highlight=False)
            p = result.prices
            cli.console.print(f"prices: {p.name} ({p.origin}; {p.currency} per GPU-hour"
                              + ("; packaged examples of list prices that go stale: --prices FILE for yours"
                                 if p.origin == "packaged" else "") + f"); model: {result.model_version}",
                              highlight=False)
            for n in result.notes:
                cli.console.print(f"[yellow]note:[/] {n}", highlight=False)
        if report is not None:
            cli.err.print(f"wrote {report}")
