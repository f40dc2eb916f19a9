"""How the CLI shows a parallel plan (``Prediction.plan``): one line for ``predict``, the step's
breakdown and the stages for ``explain``."""

from __future__ import annotations

from rich.table import Table


def plan_line(pl: dict) -> str:
    """One line for a parallel plan: its shape, batch, throughput and MFU."""
    where = f"{pl['nodes']} nodes x {pl['gpus_per_node']} GPUs" if pl["nodes"] > 1 else f"{pl['gpus']} GPUs in one node"
    inter = f" ({pl['virtual_pipeline']} chunks a stage, interleaved)" if pl.get("virtual_pipeline", 1) > 1 else ""
    seq = (" (sequence-parallel, overlapped)" if pl.get("tp_overlap") else
           " (sequence-parallel)" if pl.get("sequence") else "")
    ctx = f" x context {pl['context']}" if pl.get("context", 1) > 1 else ""
    states = [f"{what} {pl[key]}" for key, what in (("optimizer_moments", "moments"), ("master_weights", "master"))
              if pl.get(key, "fp32") != "fp32"]
    if pl.get("grad_dtype") == "fp32" and str(pl.get("sharding")).startswith("zero"):
        states.append("fp32 gradients")
    opt = f" (optimizer {', '.join(states)})" if states else ""
    return (f"{where}, tensor {pl['tensor']}{seq}{ctx} x pipeline {pl['pipeline']}{inter} x data {pl['data']}, {pl['sharding']}{opt}, "
            f"recompute {pl['recompute']}, micro-batch {pl['micro_batch']} x {pl['grad_accum']} accumulated = global "
            f"{pl['global_batch']}; {pl['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, {pl['tokens_per_s']:,.0f} for "
            f"the job; MFU {pl['mfu']:.1%} (HFU {pl['hfu']:.1%})")


def print_plan(console, p, gib) -> None:
    """``explain``'s view of a parallel plan: the optimizer step's parts and each stage's GPUs."""
    pl = p.plan
    console.print(f"plan: {plan_line(pl)}", highlight=False)
    t = Table(title=f"One optimizer step ({p.step_time_s * 1e3:.1f} ms) on the slowest stage's GPUs")
    t.add_column("part")
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    for k, v in pl["step_breakdown_s"].items():
        if v > 0:
            t.add_row(k.removesuffix("_s").replace("_", " "), f"{v * 1e3:.1f}", f"{v / p.step_time_s:.0%}")
    console.print(t)
    st = Table(title="Per pipeline stage (each stage's GPUs alike)")
    for col in ("stage", "layers", "memory GiB", "util %"):
        st.add_column(col, justify="right")
    for i, (layers, mem, util) in enumerate(zip(pl["layers_per_stage"], pl["memory_per_stage_bytes"],
                                                pl["util_per_stage_pct"])):
        st.add_row(str(i), str(layers), gib(mem), f"{util:.1f}")
    console.print(st)
    console.print(f"links: {pl['links']['intra']} inside a node; network {pl['links']['network']}; pipeline bubble "
                  f"{pl['bubble_fraction']:.1%} of the pipeline; model FLOPs: {pl['flops_convention']}",
                  highlight=False)
    if pl.get("comm_calls"):
        console.print(f"collectives: {pl['comm_calls']} NCCL calls a step, {pl['comm_fixed_s'] * 1e3:.2f} ms of fixed "
                      f"costs (base latency and ring steps; hidden behind compute where the overlap allows)",
                      highlight=False)
    if pl.get("framework"):
        console.print(f"framework: {pl['framework']}, {pl.get('framework_host_s', 0.0) * 1e3:.2f} ms of host work a step "
                      f"around the model's ops (its Python calls and the collectives' c10d calls; step time only "
                      f"where the host sets the pace)", highlight=False)
