"""What a training framework's own Python adds to each rank's host time, around the traced ops.

The trace is the model's aten ops, each priced at dispatch (:mod:`gpucast.estimate.host`). A
framework wraps them in Python of its own, and a small model on many GPUs (micro-batch 1, tensor
parallelism) spends its step there: kernels of a few microseconds each are issued faster than
the host can issue them. This module counts that Python per transformer layer, per parameter
tensor, per micro-batch and per step from each framework's source, and prices each kind of call
(:class:`FrameworkConstants`). The plan adds it to the rank's host clock, so it costs time only
where the host, not the GPU, sets the pace (:func:`gpucast.estimate.step.simulate`).

Frameworks (``parallel.framework``; unset: Megatron-LM when the plan has tensor or pipeline
parallelism, DeepSpeed for ``zero1``-``zero3``, PyTorch FSDP for ``fsdp-*``, plain PyTorch DDP
otherwise, :func:`framework_of`):

* ``megatron`` (Megatron-LM's GPT layer, ``megatron/core/tensor_parallel`` and the fused kernels):
  per layer and forward, ten ``torch.autograd.Function`` calls: two fused LayerNorms (apex
  ``FusedLayerNormAffineFunction``), four linears (``LinearWithGradAccumulationAndAsyncCommunication``),
  two ``_ReduceFromModelParallelRegion`` after the row-parallel linears, the fused masked softmax
  and the bias-GeLU; each runs its backward in Python, whose ops are then issued from Python;
  the CUDA RNG tracker's fork around attention dropout (three state reads and writes); under
  tensor parallelism two all-reduces in forward and two in backward, each a c10d call on the host.
  Full recompute wraps each layer in ``CheckpointFunction`` (one Function more, the RNG states
  saved and restored, ``torch.autograd.backward`` called) and issues the layer's forward again.
  Per parameter tensor and micro-batch, Megatron's DDP grad-accumulation hook (``main_grad.add_``
  from Python). Per micro-batch, ``get_batch`` (the batch broadcast over the tensor group, the
  masks and position ids built in about ten ops) and the loss averaged over the data-parallel group
  (one all-reduce). Per step, the mixed-precision optimizer's loop copying each gradient to its
  fp32 main gradient, the inf check's and the gradient norm's all-reduces.
* ``deepspeed`` (ZeRO stages 1-2): per parameter tensor and micro-batch, the gradient hook that
  copies the gradient into the reduce bucket (one Python hook, one copy, two views); ZeRO-3
  adds, per parameter tensor, the module hooks that fetch and release it in forward and backward
  (two hooks and three bookkeeping views each way). Per micro-batch, the engine's ``forward``,
  ``backward`` and ``step`` calls (about ten Python ops). Per step, a Python op per parameter tensor
  (the fp32 partition's gradient) and the overflow and norm all-reduces.
* ``fsdp`` (PyTorch FSDP, ``FlatParameter``): per unit (a transformer layer) and micro-batch, four
  hooks (pre- and post-forward, pre- and post-backward) of about five Python ops each; per
  parameter tensor, a view of the unsharded flat parameter in forward and another in backward.
* ``torch`` (DDP): its reducer's hooks are C++; nothing is added.

Every collective of the plan (``comm_calls``: tensor-parallel all-reduces, pipeline sends,
FSDP/ZeRO units' gathers and reduce-scatters, the once-a-step collectives) also costs the host a
c10d call (``collective_call_s``), whatever the framework.

Kernels: Megatron-Core builds its layers from Transformer Engine's modules, whose attention
(``DotProductAttention``) gives its fused cuDNN backend preference over FlashAttention on compute
capability 9.0 and newer (Transformer Engine's ``get_attention_backend``: "Disabling FlashAttention
to give FusedAttention preference on Hopper+ for performance reasons"); a ``megatron`` plan on such a
GPU runs ``cudnn`` attention unless ``stack.attention`` says otherwise (:func:`framework_stack`). The
layers' own fused kernels are the capture's business (``stack.kernels``, :mod:`gpucast.graph.te`,
set for a Megatron plan by :func:`gpucast.api.capture_job`).

Not modelled: Transformer Engine's modules' host work (fewer, larger Functions, FP8 bookkeeping), Megatron
core's CUDA graphs (which remove this host time), sequence parallelism's extra collectives,
DeepSpeed's timers, Python's garbage collector. The counts are read from the frameworks' code and
the prices measured on a CPU (``benchmarks/host_calls.py``); neither is fitted to a measured step.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.constants import EstimatorConfig, NamedConstants, _c
from gpucast.plan import FRAMEWORKS


@dataclass(frozen=True)
class FrameworkConstants(NamedConstants):
    """Host prices of the framework's calls (module docstring), in seconds at the reference core."""

    _KIND = "framework"

    function_forward_s: float = _c(
        2.0e-6, "s",
        "Extra host time of calling an op through a torch.autograd.Function in forward (the Function's "
        "node, its ctx, its Python forward): 0.3 of an eager op recorded by autograd on the same CPU "
        "(benchmarks/host_calls.py, median of paired runs on the project's 2-vCPU Xeon VM, torch 2.14: "
        "0.25-0.31), times the reference op without its launch (python_op_s - launch_s = 6.5 us).")
    function_backward_s: float = _c(
        4.2e-6, "s",
        "Extra host time of the autograd engine calling a Function's backward in Python (the GIL, the "
        "Python frame) over a C++ backward node: 0.65 of an eager op (benchmarks/host_calls.py: "
        "0.55-0.72) x 6.5 us; the backward's own ops are then issued from Python (python_op_s, not "
        "engine_op_s).")
    hook_s: float = _c(
        1.6e-6, "s",
        "One Python hook on a module or a gradient, empty: 0.25 of an eager op (benchmarks/host_calls.py: "
        "0.23-0.34) x 6.5 us; the work a hook does is counted as its ops.")
    collective_launches: int = _c(
        4, "launches",
        "CUDA calls ProcessGroupNCCL makes on the host for one collective besides its Python entry "
        "(priced as one python_op_s): an event recorded on the compute stream and waited on by the NCCL "
        "stream (syncStream), the work's end event, and NCCL's kernel launch (PyTorch "
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, collective()); each priced at launch_s.")


DEFAULT_FRAMEWORK = FrameworkConstants()


@dataclass(frozen=True)
class Calls:
    """Counts of host calls of one kind of place (a layer in one phase, a parameter, a micro-batch,
    a step): autograd Functions forward and backward, hooks, Python ops with and without a kernel,
    and the extra ops issued from a Python backward instead of the engine."""

    functions: float = 0.0
    function_backwards: float = 0.0
    hooks: float = 0.0
    ops: float = 0.0
    views: float = 0.0
    python_backward_ops: float = 0.0

    def seconds(self, cfg: EstimatorConfig, fc: FrameworkConstants) -> float:
        return (self.functions * fc.function_forward_s + self.function_backwards * fc.function_backward_s
                + self.hooks * fc.hook_s + self.ops * cfg.python_op_s + self.views * cfg.python_view_s
                + self.python_backward_ops * max(0.0, cfg.python_op_s - cfg.engine_op_s))


@dataclass(frozen=True)
class FrameworkHost:
    """Host seconds the framework adds on one rank, by where they fall."""

    framework: str
    forward_s: float      # a micro-batch's forward on this stage
    recompute_s: float    # its recomputed forward
    backward_s: float     # its backward
    micro_batch_s: float  # once a micro-batch, at its start
    step_s: float         # once a step, with the optimizer

    def per_micro_batch(self) -> float:
        return self.forward_s + self.recompute_s + self.backward_s + self.micro_batch_s


# Megatron-LM's GPT layer (module docstring): Functions per layer in forward, their backward ops
# (each Function's backward issues about two ops: a linear's dgrad and wgrad, a norm's or a
# softmax's backward kernel and its reduction), the RNG tracker's three state calls.
MEGATRON_LAYER_FUNCTIONS = 10
MEGATRON_BACKWARD_OPS_PER_FUNCTION = 2
MEGATRON_RNG_VIEWS = 3
MEGATRON_CHECKPOINT = Calls(functions=1, function_backwards=1, views=4, ops=1)  # RNG save/restore, autograd.backward
MEGATRON_GET_BATCH = Calls(ops=10)
ENGINE_MICRO_BATCH = Calls(ops=10)  # DeepSpeed's engine.forward/backward/step bookkeeping
FSDP_HOOK_OPS = 5


# Collectives the framework itself calls (module docstring): Megatron-LM's get_batch broadcasts the
# batch's key sizes and its data over the tensor group (two broadcasts, tensor_parallel.broadcast_data)
# and each micro-batch's loss is averaged over the data-parallel group (one all-reduce); a step's
# inf check and gradient norm are one all-reduce each in Megatron-LM and in DeepSpeed.
MEGATRON_BATCH_BROADCASTS = 2
STEP_COLLECTIVES = {"megatron": 2, "deepspeed": 2}


def framework_micro_collectives(framework: str, tensor: int, data: int) -> int:
    """c10d calls the framework makes once a micro-batch besides the plan's collectives."""
    if framework != "megatron":
        return 0
    return (MEGATRON_BATCH_BROADCASTS if tensor > 1 else 0) + (1 if data > 1 else 0)


def framework_step_collectives(framework: str) -> int:
    """c10d calls the framework makes once a step besides the plan's collectives."""
    return STEP_COLLECTIVES.get(framework, 0)


# Transformer Engine prefers its fused (cuDNN) attention from this compute capability on (module docstring).
TE_FUSED_ATTENTION_FROM = (9, 0)


def framework_stack(framework: str, stack, gpu):
    """The job's stack as ``framework`` runs it on ``gpu`` (module docstring, Kernels): the job's own
    ``stack.attention`` wins; else Megatron-Core's Transformer Engine attention on Hopper and later."""
    from gpucast.surroundings import Stack

    if framework != "megatron" or tuple(gpu.compute_capability) < TE_FUSED_ATTENTION_FROM:
        return stack
    return (stack or Stack()).merged(Stack(attention="cudnn"))


def framework_of(par) -> str:
    """The framework a plan runs under (module docstring): ``parallel.framework`` or its default."""
    if getattr(par, "framework", None):
        return par.framework
    if (par.tensor or 1) > 1 or (par.pipeline or 1) > 1:
        return "megatron"
    sharding = par.sharding or "ddp"
    if sharding.startswith("zero"):
        return "deepspeed"
    if sharding.startswith("fsdp"):
        return "fsdp"
    return "torch"


def framework_host(framework: str, sharding: str, recompute: str, layers: int, param_tensors: float,
                   cfg: EstimatorConfig, fc: FrameworkConstants | None = None) -> FrameworkHost:
    """The framework's host seconds on a rank holding ``layers`` transformer layers and
    ``param_tensors`` parameter tensors (module docstring); the c10d calls of the plan's
    collectives are :func:`collective_host_s`'."""
    fc = fc or DEFAULT_FRAMEWORK
    fwd = bwd = re = micro = step = Calls()
    if framework == "megatron":
        fwd = Calls(functions=MEGATRON_LAYER_FUNCTIONS * layers, views=MEGATRON_RNG_VIEWS * layers)
        bwd = Calls(function_backwards=MEGATRON_LAYER_FUNCTIONS * layers,
                    python_backward_ops=MEGATRON_LAYER_FUNCTIONS * MEGATRON_BACKWARD_OPS_PER_FUNCTION * layers,
                    hooks=param_tensors, ops=param_tensors)  # the grad-accumulation hook's main_grad.add_
        if recompute == "full":
            re = Calls(functions=(MEGATRON_LAYER_FUNCTIONS + MEGATRON_CHECKPOINT.functions) * layers,
                       function_backwards=MEGATRON_CHECKPOINT.function_backwards * layers,
                       views=(MEGATRON_RNG_VIEWS + MEGATRON_CHECKPOINT.views) * layers,
                       ops=MEGATRON_CHECKPOINT.ops * layers)
        micro = MEGATRON_GET_BATCH
        step = Calls(ops=param_tensors)
    elif framework == "deepspeed":
        bwd = Calls(hooks=param_tensors, ops=param_tensors, views=2 * param_tensors)
        if sharding == "zero3":
            fwd = Calls(hooks=2 * param_tensors, views=3 * param_tensors)
            bwd = Calls(hooks=3 * param_tensors, ops=param_tensors, views=5 * param_tensors)
        micro = ENGINE_MICRO_BATCH
        step = Calls(ops=param_tensors)
    elif framework == "fsdp":
        fwd = Calls(hooks=2 * layers, ops=2 * FSDP_HOOK_OPS * layers, views=param_tensors)
        bwd = Calls(hooks=2 * layers, ops=2 * FSDP_HOOK_OPS * layers, views=param_tensors)
    s = lambda c: c.seconds(cfg, fc)  # noqa: E731
    return FrameworkHost(framework=framework, forward_s=s(fwd), recompute_s=s(re), backward_s=s(bwd),
                         micro_batch_s=s(micro), step_s=s(step))


def collective_host_s(calls: float, cfg: EstimatorConfig, fc: FrameworkConstants | None = None) -> float:
    """Host seconds of ``calls`` c10d collectives (their Python entry and ProcessGroupNCCL's CUDA calls)."""
    fc = fc or DEFAULT_FRAMEWORK
    return calls * (cfg.python_op_s + fc.collective_launches * cfg.launch_s)


__all__ = ["FRAMEWORKS", "FrameworkConstants", "DEFAULT_FRAMEWORK", "FrameworkHost", "Calls", "framework_of",
           "framework_host", "collective_host_s", "framework_micro_collectives", "framework_step_collectives"]
