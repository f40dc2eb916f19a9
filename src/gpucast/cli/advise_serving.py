"""``gpucast advise --serve``: the serving advisor's search (gpucast.advisor.serving) and its table."""

from __future__ import annotations

import json

from rich.table import Table

from gpucast.advisor.serving import DEFAULT_GPUS


def _table(advice) -> Table:
    t = Table(title="gpucast advise --serve")
    numbers = ("n", "replicas", "TTFT p90 s", "TPOT p90 ms", "out tok/s", "$/M tokens")
    for col in ("", "gpu", "n", "replicas", "layout", "spec", "precision", "engine", "TTFT p90 s", "TPOT p90 ms",
                "out tok/s", "$/M tokens", "why"):
        t.add_column(col, justify="right" if col in numbers else "left")
    for i, o in enumerate(advice.options):
        layout = f"pd {o.prefill_replicas}:{o.replicas - o.prefill_replicas}" if o.prefill_replicas else o.layout
        if o.prefill_tensor and o.prefill_tensor != o.tensor:   # prefill instances of their own degree
            layout += f" (prefill x{o.prefill_tensor})"
        spec = f"{o.spec} x{o.spec_tokens}" if o.spec else "-"
        t.add_row("*" if i == advice.best else "", o.gpu, str(o.tensor), str(o.replicas), layout, spec,
                  o.precision,
                  o.engine,
                  "-" if o.ttft_p90_s is None else f"{o.ttft_p90_s:.3g}",
                  "-" if o.tpot_p90_s is None else f"{o.tpot_p90_s * 1e3:.3g}",
                  "-" if o.output_tokens_per_s is None else f"{o.output_tokens_per_s:,.0f}",
                  "-" if o.usd_per_million_tokens is None else f"{o.usd_per_million_tokens:.2f}", o.why)
    return t


def advise_serving_cmd(cli, kw: dict, tensors: list | None, engines: list | None, ttft, tpot, prices, provider,
                       as_json: bool, replicas: int = 1, layouts: list | None = None, spec_tokens: list | None = None,
                       prefill_tensors: list | None = None) -> None:
    """Search (``tensors``/``engines`` already parsed by :mod:`.advise`) and print the table or JSON."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpucast.advisor.serving import DEFAULT_TENSORS, advise_serving
    from gpucast.job import JobError

    job = kw["job"]

    def go(bar, task):
        if job.mode != "serve":
            raise JobError("advise --serve takes a mode 'serve' job: --mode serve with an --hf-config decoder")
        eng = engines or [(job.serve.engine if job.serve and job.serve.engine
                                                         else "vllm")]
        return advise_serving(job, kw["gpus"] or list(DEFAULT_GPUS),
                              tensors=tensors or DEFAULT_TENSORS,
                              precisions=kw["precisions"], engines=eng, ttft_s=ttft, tpot_s=tpot, prices=prices,
                              provider=provider, progress=lambda d, n: bar.update(task, completed=d, total=n),
                              replicas=replicas, layouts=layouts, spec_tokens=spec_tokens,
                              prefill_tensors=prefill_tensors)

    with Progress(TextColumn("deployments"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=cli.err, transient=True) as bar:
        task = bar.add_task("deployments", total=None)
        advice = cli._run(lambda: go(bar, task))
    if as_json:
        print(json.dumps(advice.to_dict(), indent=2))
        return
    cli.console.print(_table(advice))
    cli.console.print(advice.message, highlight=False)
