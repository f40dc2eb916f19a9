"""The parallel plan's combinations that need the model: one clear error line each.

Checked here (the model's blocks and heads come from the trace, :mod:`gpucast.graph.blocks`):
tensor or pipeline parallelism needs repeated blocks; the tensor degree must divide the attention
heads (Megatron-LM splits whole heads; key/value heads are split too, or replicated when there are
fewer than the degree, as Megatron-LM does for grouped-query attention); no more pipeline stages
than blocks; interleaved stages (``virtual_pipeline`` *v*) split the layers into ``p v`` equal
chunks unless a custom layout or split says how (:mod:`gpucast.pipeline_layout`: its decoder layers
and MTP depths must be the model's, its embedding and loss slots must split evenly); a context degree *c* splits the sequence into ``2 c`` equal chunks; an expert degree
needs routed experts and divides their number; DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only. :func:`gpucast.plan.check_job`
checks what needs no model (``gpus`` a multiple of ``tensor * pipeline``).
"""

from __future__ import annotations

from gpucast import pipeline_layout as layout
from gpucast.estimate.parallel import sequence
from gpucast.estimate.parallel.framework import framework_of
from gpucast.graph.trace import Trace
from gpucast.job import JobError
from gpucast.plan import Parallel


def v_of(par) -> int:
    return par.virtual_pipeline or 1


def check_plan(trace: Trace, par: Parallel) -> list[str]:
    """Raise :class:`JobError` for an impossible plan; return notes for a legal but unusual one."""
    lay = trace.layout
    t, p = par.tensor, par.pipeline
    notes: list[str] = []
    c = par.context or 1
    if (t > 1 or p > 1 or c > 1) and lay is None:
        field = "tensor" if t > 1 else ("pipeline" if p > 1 else "context")
        raise JobError(f"field 'parallel.{field}': {trace.model} has no repeated blocks (a transformer's "
                       f"layers) to split; use parallel.sharding to spread it over GPUs")
    if t > 1 and par.tp_overlap and not sequence.enabled(par, framework_of(par)):
        raise JobError("field 'parallel.tp_overlap' overlaps sequence parallelism's all-gathers and reduce-scatters "
                       "with the GEMMs: it needs parallel.sequence (Megatron-Core asserts it)")
    if t > 1:
        if lay.heads is None:
            raise JobError(f"field 'parallel.tensor': no attention heads found in {trace.model} to split "
                           f"over {t} ranks")
        if lay.heads % t:
            raise JobError(f"field 'parallel.tensor' ({t}) must divide the {lay.heads} attention heads of "
                           f"{trace.model}")
        kv = lay.kv_heads or lay.heads
        if kv % t and t % kv:
            raise JobError(f"field 'parallel.tensor' ({t}) must divide the {kv} key/value heads of "
                           f"{trace.model} or be a multiple of them")
        if t > (par.gpus_per_node or 8):
            notes.append(f"tensor parallelism over {t} GPUs spans nodes: its all-reduces cross the network")
    uneven = par.first_stage_layers is not None or par.last_stage_layers is not None
    if uneven and lay is not None:
        if p < 2 or v_of(par) > 1:
            raise JobError("fields 'parallel.first_stage_layers'/'last_stage_layers' set the first and last stages' "
                           "layers: they need parallel.pipeline > 1 and no virtual pipeline (not modelled with one)")
        first, last = par.first_stage_layers, par.last_stage_layers
        rest = lay.blocks - (first or 0) - (last or 0)
        middle = p - 2
        ok = rest >= 0 and (rest % (middle + (first is None) + (last is None)) == 0 if (middle or first is None
                                                                                       or last is None) else rest == 0)
        if not ok:
            raise JobError(f"fields 'parallel.first_stage_layers'/'last_stage_layers' ({first}, {last}) must leave "
                           f"{trace.model}'s {lay.blocks} layers splitting evenly over the other {p - 2} stages")
    if p > 1 and p > lay.blocks:
        raise JobError(f"field 'parallel.pipeline' ({p}) is more stages than the {lay.blocks} layers of "
                       f"{trace.model}")
    if c > 1 and lay.tokens % (2 * c):
        raise JobError(f"field 'parallel.context' ({c}) must split the {lay.tokens}-token sequence into 2 x {c} equal "
                       f"chunks (Megatron-Core's load-balanced causal split)")
    laid_out = bool(par.pipeline_layout or par.embedding_in_split or par.loss_in_split)
    if laid_out:   # Megatron-Core's custom layout or split (gpucast.pipeline_layout)
        if lay is None:
            raise JobError(f"field 'parallel.pipeline_layout': {trace.model} has no repeated blocks (a "
                           f"transformer's layers) to lay out")
        try:
            layout.of_plan(par, lay.blocks, lay.mtp_layers if framework_of(par) == "megatron" else 0)
        except layout.LayoutError as exc:
            name = "pipeline_layout" if par.pipeline_layout else "embedding_in_split'/'loss_in_split"
            raise JobError(f"field 'parallel.{name}': {exc}") from None
    v = par.virtual_pipeline or 1
    if v > 1 and lay.blocks % (p * v) and not laid_out:
        # the embedding and/or the loss counted as a layer each (Megatron's --account-for-*-in-pipeline-split)
        extra = next((k for k in (1, 2) if (lay.blocks + k) % (p * v) == 0), None)
        both = "and" if extra == 2 else "or"
        hint = (f" ({lay.blocks} + {extra} do, as Megatron's --account-for-embedding/loss-in-pipeline-split count "
                f"them: set parallel.embedding_in_split {both} parallel.loss_in_split)") if extra else ""
        raise JobError(f"field 'parallel.virtual_pipeline' ({v}) must divide the layers of each of the {p} "
                       f"stages: {trace.model}'s {lay.blocks} layers do not split into {p} x {v} equal chunks{hint}")
    e = par.expert or 1
    if (e > 1 or par.expert_tensor is not None) and not (lay is not None and lay.experts and lay.moe_blocks):
        field = "expert" if e > 1 else "expert_tensor"
        raise JobError(f"field 'parallel.{field}': {trace.model} has no routed experts (a mixture-of-experts "
                       f"model's) to spread")
    if e > 1 and lay.experts % e:
        raise JobError(f"field 'parallel.expert' ({e}) must divide the {lay.experts} routed experts of {trace.model}")
    if (par.offload or 0) > 0:
        if lay is None:
            raise JobError(f"field 'parallel.offload': {trace.model} has no repeated blocks (a transformer's layers) "
                           f"whose activations to offload")
        fewest = lay.blocks // p
        if par.offload >= max(fewest, 1):
            raise JobError(f"field 'parallel.offload' ({par.offload}) must leave a layer of each stage on the GPU: "
                           f"a stage holds {fewest} of {trace.model}'s {lay.blocks} layers (Transformer Engine "
                           f"offloads fewer layers than it runs)")
    if p > 1 and par.sharding in ("zero2", "zero3"):
        raise JobError(f"field 'parallel.sharding': {par.sharding} cannot run with pipeline parallelism "
                       f"(DeepSpeed's pipeline engine supports ZeRO stage 0 and 1 only); use zero1 or fsdp-*")
    if p > 1 and lay.blocks % p and not uneven and not laid_out:
        notes.append(f"{lay.blocks} layers over {p} stages: the first stages hold one more layer, and the "
                     f"pipeline runs at the pace of the fullest stage")
    return notes
