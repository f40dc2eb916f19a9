"""The trace's memory classes against what a real CPU step holds, and against autograd's own view.

References, none computed by gpucast's tracker:

* a real CPU step of the same job (real tensors): the parameters and buffers, ``p.grad`` after
  backward, the optimizer's state after a real ``step()`` (Adam's ``step`` counters excluded:
  they are host scalars on CUDA too, and the trace does not put them on the GPU), and the
  storages autograd saved for backward (``saved_tensors_hooks``) plus the output and the loss,
  which is what is live when backward starts;
* the same saved-tensor accounting run *inside* the meta capture (hooks around ``capture``),
  for the case where a CPU run takes a different path than CUDA (RNNs, see below).

Every storage is one allocation rounded as the CUDA caching allocator rounds it (512-byte
blocks, ``kMinBlockSize``); the comparison is exact. Storages are deduplicated (a view costs
nothing), and storages that exist before the step (parameters, inputs) are not activations.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpucast.graph import MEMORY_CLASSES, capture
from gpucast.graph.memory import round_size
from gpucast.graph.tracer import resolve
from gpucast.job import Job


def _block(nbytes: int) -> int:
    """CUDACachingAllocator::round_size: 512-byte blocks; a 0-byte request allocates nothing."""
    return 0 if nbytes == 0 else 512 * math.ceil(nbytes / 512)


def _key(t: torch.Tensor):
    s = t.untyped_storage()
    return s._cdata if t.device.type == "meta" else s.data_ptr()


def _storages(tensors) -> dict:
    return {_key(t): t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor)}


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if hasattr(obj, "to_tuple"):
        obj = obj.to_tuple()
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    return []


class _SavedForBackward:
    """``saved_tensors_hooks`` that remember every storage autograd saves (by storage identity)."""

    def __init__(self):
        self.saved: dict = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t):
        self.saved[_key(t)] = t.untyped_storage().nbytes()
        return t.detach()  # same storage, no reference cycle through grad_fn

    def live_activations(self, before_step: dict, out, loss) -> int:
        """Rounded bytes live when backward starts: saved storages, the output and the loss,
        less the storages that existed before the step."""
        live = dict(self.saved)
        live.update(_storages(_tensors(out) + [loss]))
        return sum(_block(n) for k, n in live.items() if k not in before_step)


def _real_cpu_step(job: Job, optimizer) -> dict[str, int]:
    built = resolve(job)
    torch.manual_seed(0)
    model = built.model_fn()
    inputs = built.input_fn(job.batch_size)
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    assert all(p.device.type == "cpu" for p in model.parameters())
    model.train()
    state = list(model.parameters()) + list(model.buffers())
    before = _storages(state + list(inputs))
    hooks = _SavedForBackward()
    with hooks.hooks:
        out = model(*inputs)
        loss = built.loss_fn(out, inputs)
    activations = hooks.live_activations(before, out, loss)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    opt = optimizer(model.parameters())
    opt.step()
    opt_state = [v for s in opt.state.values() for k, v in s.items() if isinstance(v, torch.Tensor) and k != "step"]
    assert torch.isfinite(loss)
    return {
        "activations": activations,
        "parameters": sum(map(_block, _storages(state).values())),
        "gradients": sum(map(_block, _storages(grads).values())),
        "gradient_nbytes": sum(g.nbytes for g in grads),
        "optimizer_state": sum(map(_block, _storages(opt_state).values())),
    }


class _TinyLSTMLM(nn.Module):
    """Embedding -> 2-layer LSTM -> linear to a 64-token vocabulary (no dropout)."""

    def __init__(self, vocab=64, hidden=48):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.out(self.rnn(self.embed(tokens))[0])


def _next_token(out, inputs):
    tokens = inputs[0]
    return F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), tokens[:, 1:].reshape(-1))


def _lstm_job():
    return Job.from_module(_TinyLSTMLM, lambda b: (torch.randint(0, 64, (b, 12)),), batch_size=4,
                           optimizer="adam", loss_fn=_next_token, name="tests.tiny_lstm_lm")


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def _adam(params):
    return torch.optim.Adam(params, lr=1e-3)


_JOBS = {
    # name: (job factory, the optimizer the trace models, compare activations with the CPU run)
    "mlp-small": (lambda: Job("mlp-small", batch_size=4), _sgd, True),
    "resnet18-32px": (lambda: Job("resnet18", batch_size=4, input_shape=(3, 32, 32)), _sgd, True),
    "resnet18-32px-adam": (lambda: Job("resnet18", batch_size=4, input_shape=(3, 32, 32), optimizer="adam"),
                           _adam, False),
    # A CPU nn.LSTM is not cuDNN: ATen's CPU branch precomputes the input GEMM for all steps and
    # saves different intermediates, while the trace mirrors CUDA's _cudnn_rnn and its reserve
    # space. Its activations are checked against autograd inside the capture instead (below).
    "tiny-lstm-lm": (_lstm_job, _adam, False),
}


@pytest.mark.parametrize("name", sorted(_JOBS))
def test_memory_classes_match_a_real_cpu_step(name, cap):
    make_job, optimizer, check_activations = _JOBS[name]
    job = make_job()
    trace = cap(job)
    real = _real_cpu_step(job, optimizer)
    totals, start = trace.memory.totals, trace.memory.at_backward_start
    assert totals["parameters"] == real["parameters"]
    assert totals["gradients"] == real["gradients"]
    assert totals["optimizer_state"] == real["optimizer_state"]
    assert trace.gradient_bytes == real["gradient_nbytes"]
    if check_activations:
        assert start["activations"] == real["activations"]
    # When backward starts: the state of a steady-state step, no gradients yet
    # (zero_grad(set_to_none=True)), nothing from backward or the optimizer.
    assert set(start) == set(MEMORY_CLASSES)
    assert start["parameters"] == totals["parameters"]
    assert start["optimizer_state"] == totals["optimizer_state"]
    assert start["inputs"] == totals["inputs"]
    assert start["gradients"] == start["temporaries"] == 0


def _capture_with_autograd_accounting(job: Job):
    """Capture ``job`` with saved-tensor hooks around it; return (trace, expected activation
    bytes when backward starts) where the expectation is computed from what autograd saved."""
    hooks = _SavedForBackward()
    seen = {}

    def model_fn():
        seen["model"] = model = job.model_fn()
        return model

    def input_fn(b):
        seen["inputs"] = inputs = job.input_fn(b)
        return inputs

    def loss_fn(out, inputs):
        loss = job.loss_fn(out, inputs)
        seen["saved"] = dict(hooks.saved)  # backward starts right after the loss
        seen["out"], seen["loss"] = _storages(_tensors(out)), _storages([loss])
        return loss

    wrapped = Job.from_module(model_fn, input_fn, batch_size=job.batch_size, optimizer=job.optimizer,
                              precision=job.precision, loss_fn=loss_fn, name=job.model)
    with hooks.hooks:
        trace = capture(wrapped)
    model = seen["model"]
    before = _storages(list(model.parameters()) + list(model.buffers()) + _tensors(seen["inputs"]))
    live = {**seen["saved"], **seen["out"], **seen["loss"]}
    return trace, sum(_block(n) for k, n in live.items() if k not in before)


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16"])
def test_lstm_activations_are_what_autograd_saved(precision):
    base = _lstm_job().with_(precision=precision)
    trace, expected = _capture_with_autograd_accounting(base)
    assert any(o.op == "_cudnn_rnn" for o in trace.ops)
    assert trace.memory.at_backward_start["activations"] == expected


def test_resnet_activations_are_what_autograd_saved_under_amp():
    built = resolve(Job("resnet18", batch_size=4, input_shape=(3, 32, 32)))
    job = Job.from_module(built.model_fn, built.input_fn, batch_size=4, precision="amp-bf16",
                          loss_fn=built.loss_fn, name="tests.resnet18_amp")
    trace, expected = _capture_with_autograd_accounting(job)
    assert trace.memory.at_backward_start["activations"] == expected


def test_amp_bf16_lowers_saved_activations(cap):
    # At 224x224 activations dominate (at 32x32 the bf16 weight copies autocast makes and the
    # convs save, 2 bytes per weight, would outweigh the activations saved).
    fp32 = cap(Job("resnet18", batch_size=8))
    bf16 = cap(Job("resnet18", batch_size=8, precision="amp-bf16"))
    a32 = fp32.memory.at_backward_start["activations"]
    a16 = bf16.memory.at_backward_start["activations"]
    built = resolve(Job("resnet18"))
    with torch.device("meta"):
        model = built.model_fn()
    copies = sum(_block(2 * p.numel()) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))
                 for p in m.parameters(recurse=False))
    assert a16 < a32
    # Without the weight copies, about half: conv/BN/ReLU tensors are bf16; max-pool indices
    # (int64), BN statistics and the fp32 loss are not halved.
    assert 0.45 * a32 < a16 - copies < 0.6 * a32
    assert bf16.memory.at_peak["activations"] < fp32.memory.at_peak["activations"]
    assert bf16.memory.peak_allocated_bytes < fp32.memory.peak_allocated_bytes
    # Parameters, gradients and optimizer state stay fp32 under autocast.
    for cls in ("parameters", "gradients", "optimizer_state"):
        assert bf16.memory.totals[cls] == fp32.memory.totals[cls]


def test_report_is_consistent(cap):
    trace = cap(Job("resnet18", batch_size=4, input_shape=(3, 32, 32)))
    m = trace.memory
    assert len(m.timeline) == len(trace.ops)
    assert m.peak_allocated_bytes == max(m.timeline) == m.timeline[m.peak_op_index]
    assert sum(m.at_peak.values()) == m.peak_allocated_bytes
    assert m.peak_phase == trace.ops[m.peak_op_index].phase
    assert m.peak_reserved_bytes >= m.peak_allocated_bytes
    # Parameters and optimizer state are live throughout, and the peak holds every gradient
    # or comes later, in the optimizer step.
    assert min(m.timeline) >= m.totals["parameters"] + m.totals["optimizer_state"] + m.totals["inputs"]
    assert m.peak_phase in ("bwd", "optim")


def test_allocator_rounding():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(0) == 0  # CUDA's allocator returns no block for an empty tensor


def test_empty_tensors_cost_nothing():
    class WithEmpty(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return self.lin(x) + x.new_zeros(0).sum()

    job = Job.from_module(WithEmpty, lambda b: (torch.randn(b, 8),), batch_size=2, optimizer="none",
                          mode="infer")
    trace = capture(job)
    # Forward allocations: the linear's output, the empty tensor, its sum, the result.
    assert [o.op for o in trace.ops if o.category != "view"] == ["addmm", "new_zeros", "sum", "add"]
    assert trace.memory.totals["activations"] == 3 * 512
