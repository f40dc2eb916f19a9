"""Capture one step of a job on the meta device, op by op.

``capture(job)`` builds the job's model and inputs under ``torch.device("meta")`` (nothing is
allocated; a 7B-parameter model costs no memory), then runs one steady-state step through a
``TorchDispatchMode`` that records every dispatched aten op:

* training: forward (``fwd``), loss (``loss``), backward (``bwd``, ops issued by the autograd
  engine), optimizer step (``optim``), ``zero_grad(set_to_none=True)`` (no ops) on PyTorch >=
  2.0; before 2.0 ``zero_grad()`` zeroed every gradient in place (``set_to_none=False``, the 1.x
  default: one ``zero_`` per parameter from Python), so the gradients stay allocated across
  steps and the backward accumulates into them (one ``add_`` per parameter from the engine);
* inference: forward only, under ``torch.no_grad()``, with autocast's weight casts made at every
  use and not kept, as under ``torch.inference_mode()`` (``gpucast.graph.mirror``), which is how
  ``gpucast profile`` and PyTorch's recommended inference loops run it.

Precision ``bf16``/``fp16`` (pure half precision) casts the model's floating weights and inputs
before the step, as FSDP's ``MixedPrecision(param_dtype=...)`` and DeepSpeed's/Megatron-LM's bf16
modes run the model; ``amp-*`` runs fp32 weights under autocast; ``fp8`` runs them under bf16
autocast with the linear layers' GEMMs in FP8, as Transformer Engine does (``gpucast.graph.fp8``).
``stack.kernels: transformer-engine`` (a plan under Megatron, by default) runs the norms, gated MLPs
and rotary embeddings as Transformer Engine's and Megatron-Core's fused kernels, and ``fp8`` over
bf16 weights without autocast (``gpucast.graph.te``).

Steady state: the optimizer's state (momentum, Adam moments) exists before the traced step,
as it does from the second step of a real run; it is created beforehand by one untraced
optimizer step on zero gradients.

What CUDA would run differently from the meta device is mirrored (``gpucast.graph.mirror``):
autocast for ``amp-fp16``/``amp-bf16``, fused SDPA kernels, cuDNN RNN dispatch, and
``foreach`` optimizer kernels (CUDA's default). ``amp-fp16`` also runs GradScaler's work:
scaling the loss, unscaling the gradients (one foreach pass; one kernel per gradient on PyTorch
1.6, ``Stack.foreach_unscale``), and the ``found_inf`` check,
which synchronises host and GPU. ``tf32`` changes no op (it changes GEMM speed, see
``gpucast.estimate``).

Every op is recorded; ops without a cost rule are marked ``costed=False`` with a default
cost (``gpucast.graph.rules``). Ops whose tensors all live on the host (the optimizer's
step counters) launch no GPU kernel.

One module of this size because capture is one pass: the model built on the meta device, one step run under
one dispatch mode, whose state every part reads.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from gpucast import imports
from gpucast.graph import layouts, rules
from gpucast.graph.batchnorm import batch_norm_name
from gpucast.graph.blocks import PRE, BlockWatch, activation_regions, find_blocks, heads_of, tagged
from gpucast.graph.memory import MemoryTracker
from gpucast.graph.precision import TE_RECIPES, amp_dtype, pure_dtype, te_layers_of
from gpucast.graph.mirror import CudaMirror
from gpucast.graph.trace import FP8_WEIGHT_WORK, WEIGHT_COPIES, OpRecord, Trace
from gpucast.graph.sparse_attention import SIBLINGS as SPARSE_SIBLINGS
from gpucast.job import Job
from gpucast.optim import make_optimizer
from gpucast.surroundings import DEFAULT_STACK, Stack
from gpucast.zoo import factories

aten = torch.ops.aten

# GradScaler's default initial scale (torch.amp.GradScaler init_scale).
GRAD_SCALE = 65536.0
# Per-dimension cap on recorded shapes of list arguments (foreach ops take hundreds).
_MAX_LIST_SHAPES = 4


class CaptureError(RuntimeError):
    """The model, its inputs or its step could not be traced; one line, names the stage. The input's
    fault unless its cause is gpucast's (:mod:`gpucast.faults`); ``user_code`` is True when it was
    raised in a ``module:`` job's own code."""

    input_error = True
    user_code = False


resolve = factories  # the job's model, input and loss factories (gpucast.zoo.factories)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[OpRecord] = []
        self.phase = "fwd"
        self.block = PRE  # gpucast.graph.blocks: the block being run (BlockWatch moves it)
        self.tags: list[str] = []  # the block's recompute-module roles being run (BlockWatch; gpucast.graph.blocks)
        self.in_rnn = 0
        self._rnn_fused_open = False
        self.memory = MemoryTracker(lambda: len(self.ops))
        self.host_storages: set[int] = set()
        self._meta: dict[Any, tuple[str, str | None, bool]] = {}
        self._out_cache: dict[tuple, Any] = {}

    def on_rnn(self, entering: bool) -> None:
        self.in_rnn += 1 if entering else -1
        self._rnn_fused_open = False

    def _info(self, func):
        info = self._meta.get(func)
        if info is None:
            cat = rules.category(func)
            info = (rules.op_name(func), cat, func._overloadpacket in flop_registry)
            self._meta[func] = info
        return info

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            t = args[0]
            value = func(*args, **kwargs) if t.device.type == "cpu" else (False if t.dtype == torch.bool else 0)
            self._record(func, "host", True, args, kwargs, None, on_host=True, sync=t.device.type != "cpu")
            return value
        name, cat, has_flops = self._info(func)
        if cat is None and not has_flops:
            # Like FlopCounterMode: an op with a decomposition is traced through it.
            with self:
                r = func.decompose(*args, **kwargs)
            if r is not NotImplemented:
                return r
        out = self._run(func, args, kwargs)
        self._record(func, cat, cat is not None or has_flops, args, kwargs, out)
        if cat == "conv":
            for op, t in layouts.transposes(name, args, out):
                self._record_kernel(op, "copy", t)
        return out

    def _run(self, func, args, kwargs):
        """Run ``func`` on meta tensors, reusing output metadata of an identical earlier call.

        Many meta kernels are Python reference implementations (batch norm: ~10 ms a call);
        repeated layers call them with identical shapes. For ops whose outputs alias no input,
        the outputs' shapes, strides and dtypes depend only on the inputs' metadata and the
        non-tensor arguments, so a hit rebuilds them with ``empty_strided``.
        """
        if not _cacheable(func):
            return func(*args, **kwargs)
        try:
            key = (func, _meta_key(args), _meta_key(kwargs))
            hash(key)
        except _Uncacheable:
            return func(*args, **kwargs)
        spec = self._out_cache.get(key)
        if spec is not None:
            return _rebuild(spec)
        out = func(*args, **kwargs)
        spec = _out_spec(out)
        if spec is not None:
            self._out_cache[key] = spec
        return out

    def _record_kernel(self, name: str, category: str, t: torch.Tensor) -> None:
        """A kernel a library runs inside the op recorded last (:mod:`gpucast.graph.layouts`): it reads
        and writes ``t``'s bytes, is launched from C++ and allocates nothing the step keeps."""
        nbytes = rules.effective_bytes(t)
        self.ops.append(OpRecord(
            index=len(self.ops), phase=self.phase, op=name, category=category, shapes=(tuple(t.shape),),
            out_shapes=(tuple(t.shape),), dtype=str(t.dtype).removeprefix("torch."), flops=0, bytes_read=nbytes,
            bytes_written=nbytes, kernels=1, dispatch="cpp", costed=True, block=self.block,
        ))

    def _record(self, func, cat, costed, args, kwargs, out, on_host=None, sync=False):
        name, _, _ = self._info(func)
        if name == "onnx_node":  # gpucast.graph.onnx.custom: an ONNX node with no cost rule
            name = f"onnx:{args[1]}"
        name = batch_norm_name(name, args)   # eval-mode BatchNorm under its own name (.batchnorm)
        ins = rules._tensors(args) + rules._tensors(kwargs)
        outs = rules._tensors(out)
        if on_host is None:
            on_host = all(t.device.type == "cpu" for t in ins + outs) if (ins or outs) else False
        category = "host" if on_host and cat != "view" else (cat or "other")
        flops = rules.flops(func, args, kwargs, out) if not on_host else 0
        if category in ("view", "host"):
            read = written = 0
        else:
            read, written = rules.bytes_moved(func, args, kwargs, out)
        kernels = rules.kernels(func, category, args, on_host)
        dispatch = "engine" if self.phase == "bwd" else "python"
        if self.in_rnn:
            dispatch = "cpp"
            if category in ("matmul", "rnn"):
                self._rnn_fused_open = False
            elif category == "elementwise" and kernels:
                # cuDNN fuses a cell's gate arithmetic into one pointwise kernel.
                kernels = 0 if self._rnn_fused_open else 1
                self._rnn_fused_open = True
        # the dtype the op computes in: its output's, but a scaled (FP8) GEMM's operands' (it writes bf16)
        order = ins + outs if name in ("_scaled_mm", "_scaled_grouped_mm") else outs + ins
        dtype = next((str(t.dtype).removeprefix("torch.") for t in order if t.is_floating_point()),
                     str(order[0].dtype).removeprefix("torch.") if order else "")
        self.ops.append(OpRecord(
            index=len(self.ops), phase=self.phase, op=name, category=category,
            shapes=_shapes(args), out_shapes=tuple(tuple(t.shape) for t in outs[:_MAX_LIST_SHAPES]),
            dtype=dtype, flops=flops, bytes_read=read, bytes_written=written, kernels=kernels,
            dispatch="none" if kernels == 0 and category in ("view", "host") else dispatch,
            costed=costed, sync=sync, block=self.block, module="|".join(dict.fromkeys(self.tags)),
        ))
        cls = "activations" if self.phase in ("fwd", "loss") else "temporaries"
        for t in outs:
            if t.device.type == "meta":
                self.memory.track(t, cls)


class _Uncacheable(Exception):
    pass


_CACHEABLE: dict[Any, bool] = {}


def _cacheable(func) -> bool:
    ok = _CACHEABLE.get(func)
    if ok is None:
        schema = func._schema
        name = rules.op_name(func)
        ok = (bool(schema.returns) and all(r.alias_info is None for r in schema.returns)
              and (not schema.is_mutable or name in _MUTATES_ONLY_BUFFERS)
              and not name.startswith(("_foreach", "_local", "rand", "normal", "bernoulli")))
        _CACHEABLE[func] = ok
    return ok


# Ops that write only to inputs they also return nothing of (running statistics):
# on meta tensors the write changes no metadata, so their outputs can be rebuilt.
_MUTATES_ONLY_BUFFERS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "cudnn_batch_norm",
                                   "_batch_norm_with_update", "miopen_batch_norm"})


def _meta_key(obj):
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "meta":
            raise _Uncacheable
        return (tuple(obj.shape), obj.stride(), obj.dtype, obj.storage_offset(), obj.requires_grad)
    if isinstance(obj, (list, tuple)):
        return tuple(_meta_key(o) for o in obj)
    if isinstance(obj, dict):
        return tuple((k, _meta_key(v)) for k, v in sorted(obj.items()))
    if obj is None or isinstance(obj, (int, float, bool, str, torch.dtype, torch.device, torch.memory_format,
                                       torch.layout)):
        return obj
    raise _Uncacheable


def _out_spec(out):
    if isinstance(out, torch.Tensor):
        if out.device.type != "meta":
            return None
        return ("t", tuple(out.shape), out.stride(), out.dtype)
    if isinstance(out, (tuple, list)):
        specs = [_out_spec(o) for o in out]
        if any(s is None for s in specs):
            return None
        return ("seq", type(out), tuple(specs))
    if out is None or isinstance(out, (int, float, bool)):
        return ("v", out)
    return None


def _rebuild(spec):
    kind = spec[0]
    if kind == "t":
        return torch.empty_strided(spec[1], spec[2], dtype=spec[3], device="meta")
    if kind == "seq":
        return spec[1](_rebuild(s) for s in spec[2])
    return spec[1]


def _shapes(args) -> tuple:
    shapes = []
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(tuple(a.shape))
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            shapes.append(tuple(tuple(t.shape) for t in a[:_MAX_LIST_SHAPES]) + ((f"+{len(a) - _MAX_LIST_SHAPES}",)
                                                                                  if len(a) > _MAX_LIST_SHAPES else ()))
    return tuple(shapes)


def _stage(stage: str, fn, *args):
    try:
        return fn(*args)
    except CaptureError:
        raise
    except Exception as exc:  # user code: report one line naming the stage
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CaptureError(f"{stage} failed: {type(exc).__name__}: {msg}"[:500]) from exc


def capture(job: Job) -> Trace:
    """Trace one step of ``job`` (see module docstring)."""
    try:
        return _capture(job)
    except CaptureError as exc:
        exc.user_code = job.is_module
        raise


def _build(job: Job):
    """The job's model and inputs on the meta device, built under the import lock
    (:data:`gpucast.imports.LOCK`: a model's library modules are imported on first use)."""
    with imports.LOCK:
        built = resolve(job)
        with torch.device("meta"):
            model = _stage("building the model", built.model_fn)
            if not isinstance(model, torch.nn.Module):
                raise CaptureError(f"building the model failed: model_fn returned {type(model).__name__}, "
                                   f"not nn.Module")
            model = model.to("meta")
            if pure_dtype(job) is not None:
                model = model.to(pure_dtype(job))
            if job.adapter is not None:  # LoRA/QLoRA: frozen (4-bit) base weights, trainable adapters
                from gpucast.graph.adapters import apply_adapter

                model = _stage("adding the adapters", apply_adapter, model, job.adapter.resolved(), job.precision)
                if te_layers_of(job) and pure_dtype(job) is not None:  # Megatron's adapters in the model's dtype
                    model = model.to(pure_dtype(job))
            inputs = _stage("building the inputs", built.input_fn, job.batch_size)
    return built, model, inputs


def _capture(job: Job) -> Trace:
    built, model, inputs = _build(job)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise CaptureError(f"building the inputs failed: input_fn returned {type(inputs).__name__}, not a tuple")
    inputs = tuple(t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs)
    if pure_dtype(job) is not None:
        inputs = tuple(t.to(pure_dtype(job)) if isinstance(t, torch.Tensor) and t.is_floating_point()
                       else t for t in inputs)
    train = job.mode == "train"
    model.train(train)
    params = [p for p in model.parameters() if p.requires_grad]
    stack = (job.stack or Stack()).merged(DEFAULT_STACK)
    loss_fn = built.loss_fn
    if train and stack.loss in ("fused", "chunked"):  # the trainer's loss kernels (gpucast.graph.lm_loss)
        from gpucast.graph import lm_loss
        from gpucast.zoo.base import first_tensor

        model, loss_fn = _stage("choosing the loss", lm_loss.replace, model, stack.loss, first_tensor,
                                amp_dtype(job))
    blocks = find_blocks(model)
    fp8_layers, bf16_kept = None, []
    if job.precision in TE_RECIPES:  # the linear layers' GEMMs as Transformer Engine runs them
        from gpucast.graph import fp8, lm_loss

        bf16_kept = fp8.bf16_blocks(blocks, stack.bf16_layers)   # the recipe's bf16 layers
        fp8_layers = _stage("converting the linear layers to FP8", fp8.apply, model, lm_loss.output_head(model),
                            bf16_kept)
    te_layers = None
    if te_layers_of(job):  # Megatron-Core's Transformer Engine layers (gpucast.graph.te)
        from gpucast.graph import te

        te_layers = _stage("fusing the layers as Transformer Engine runs them", te.apply, model,
                           job.precision in TE_RECIPES, bf16_kept)
    optimizer = make_optimizer(job.optimizer, params, foreach=stack.foreach_optimizers) if train and params else None
    if optimizer is not None:
        _stage("initialising the optimizer", _warm_optimizer, optimizer, params)
    zero_in_place = train and not stack.zero_grad_sets_none
    if zero_in_place:  # the previous step's zeroed gradients, alive when this step starts
        for p in params:
            p.grad = torch.zeros_like(p)

    rec = _Recorder()
    for p in model.parameters():
        rec.memory.track(p, "parameters", before_step=True)
    for b in model.buffers():
        rec.memory.track(b, "parameters", before_step=True)
    if optimizer is not None:
        for state in optimizer.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    rec.memory.track(v, "optimizer_state", before_step=True)
    for t in inputs:
        if isinstance(t, torch.Tensor):
            rec.memory.track(t, "inputs", before_step=True)
    if zero_in_place:
        for p in params:
            rec.memory.track(p.grad, "gradients", before_step=True)

    watch = BlockWatch(rec, model, blocks) if blocks else None
    regions = None
    amp = amp_dtype(job)
    mirror = CudaMirror(amp_dtype=amp, on_rnn=rec.on_rnn, cache_casts=train)
    fused = (te.active(lambda t: rec.memory.reclassify(t, WEIGHT_COPIES), bool(te_layers["fp8_experts"]),
                       lambda: tagged(rec, FP8_WEIGHT_WORK))
             if te_layers is not None else contextlib.nullcontext())
    scaling = (fp8.recipe(job.stack.fp8_recipe if job.stack is not None else None) if fp8_layers is not None
               else contextlib.nullcontext())   # precision fp8's scaling recipe (gpucast.graph.fp8)
    with rec, fused, scaling:
        if train:
            with mirror:
                out = _stage("the forward pass", model, *inputs)
                rec.phase = "loss"
                loss = _stage("the loss", loss_fn, out, inputs)
                mirror.autocast_off()
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise CaptureError("the loss failed: loss_fn must return a scalar tensor")
            if job.precision == "amp-fp16":
                loss = loss * GRAD_SCALE
            if not loss.requires_grad:
                raise CaptureError("the loss failed: it does not depend on any trainable parameter "
                                   "(nothing to back-propagate; predict with --mode infer)")
            at_backward_start = rec.memory.live_by_class()
            if watch is not None:
                regions = activation_regions(rec.memory.live("activations"), rec.ops, watch.hidden)
            rec.phase = "bwd"
            _stage("the backward pass", loss.backward)
            for p in params:
                if p.grad is not None:
                    rec.memory.reclassify(p.grad, "gradients")
            rec.phase = "optim"
            grads = [p.grad for p in params if p.grad is not None]
            if job.precision == "amp-fp16" and grads:
                _unscale(grads, foreach=stack.foreach_unscale)
            if optimizer is not None:
                _stage("the optimizer step", optimizer.step)
            if zero_in_place:
                for g in grads:
                    g.zero_()
            elif optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            else:
                for p in params:
                    p.grad = None
            del out, loss, grads
        else:
            with torch.no_grad(), mirror:
                out = _stage("the forward pass", model, *inputs)
            del out
    layout = None
    if watch is not None:
        watch.remove()
        layout = watch.layout(model, heads_of(model))
        if regions is None:  # inference: what the forward left live is not saved for a backward
            regions = dict.fromkeys(("pre", "post", "sharded", "replicated", "attention_core"), 0)
        layout.activations = regions
    phases = [o.phase for o in rec.ops]
    memory = rec.memory.report(len(rec.ops), phases, at_backward_start if train else None)
    if job.adapter is not None:  # a 4-bit weight stands for twice the elements it stores
        from gpucast.graph.adapters import parameter_count

        n_params = parameter_count(model)
    else:
        n_params = sum(p.numel() for p in model.parameters())
    notes = []
    if job.precision == "amp-fp16":
        notes.append("amp-fp16: GradScaler's unscale and found_inf check are included")
    if job.model.removeprefix("hf:") in SPARSE_SIBLINGS:   # built as the dense sibling (gpucast.graph.hf._config)
        notes.append("DeepSeek sparse attention is costed dense here, as V3.2's dense warm-up trains (no indexer)")
    if te_layers is not None:
        notes.append(f"Transformer Engine's fused layers (Megatron-Core): {te_layers['norms']} norms, "
                     f"{te_layers['gated_mlps']} gated MLPs as one kernel each way, the rotary embedding fused"
                     + (f"; bf16 weights under {job.precision}" if job.precision in TE_RECIPES else "")
                     + ("; the routed experts as FP8 grouped GEMMs" if te_layers["fp8_experts"] else "")
                     + ("; attention with sinks as TE's fused kernel" if te_layers.get("fused_sink_attention") else ""))
    if fp8_layers is not None:
        kept = f"; {len(bf16_kept)} blocks kept in bf16 (stack.bf16_layers)" if bf16_kept else ""
        notes.append(f"fp8: {fp8_layers} linear layers run their GEMMs in FP8 (Transformer Engine's recipe); "
                     f"everything else in bf16{kept}" if fp8_layers else
                     f"fp8: no linear layer with sizes that are multiples of 16 runs in FP8 (bf16 throughout){kept}")
    return Trace(
        job_key=job.key, model=job.model, mode=job.mode, precision=job.precision, batch_size=job.batch_size,
        ops=rec.ops, memory=memory, parameters=n_params,
        parameter_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        input_bytes=sum(rules.effective_bytes(t) for t in inputs if isinstance(t, torch.Tensor)),
        modules=getattr(model, "gpucast_module_count", None) or sum(1 for _ in model.modules()),
        param_tensors=len(params),
        gradient_bytes=sum(p.numel() * p.element_size() for p in params) if train else 0,
        trainable_parameters=sum(p.numel() for p in params) if train else 0,
        input_tensors=sum(isinstance(t, torch.Tensor) for t in inputs),
        input_kinds=[(str(t.dtype).removeprefix("torch."), tuple(t.shape[1:])) for t in inputs
                     if isinstance(t, torch.Tensor)],
        notes=notes, layout=layout,
    )


def _warm_optimizer(optimizer, params) -> None:
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _unscale(grads, foreach: bool = True) -> None:
    """GradScaler.unscale_ and its found_inf check, as CUDA runs them: one foreach pass, or
    (``foreach=False``, PyTorch 1.6) one unscale kernel per gradient from Python."""
    found_inf = torch.zeros((), device="meta")
    if foreach:
        torch._foreach_mul_(grads, 1.0 / GRAD_SCALE)
    else:
        for g in grads:
            g.mul_(1.0 / GRAD_SCALE)
    found_inf.item()  # GradScaler.step reads found_inf on the host: a sync point
