"""Total FLOPs of a traced step equal ``torch.utils.flop_counter.FlopCounterMode``'s on the same step.

Two references, each computed without gpucast's recorder:

* every zoo entry: an independent meta-device step (build, forward, loss, backward) under
  ``FlopCounterMode``; no autocast, no CUDA mirroring.
* three small models: a *real* CPU step (real tensors) under ``FlopCounterMode``.

The first documented difference is attention. The trace mirrors CUDA, which runs SDPA as a fused
kernel (memory-efficient attention in fp32, flash in half precision); the plain meta step takes
SDPA's math path (explicit ``bmm``s and a softmax). flop_counter's formulas agree on the forward
(QK^T and PV: two bmms either way) but not on the backward: the fused backward kernels do not
keep the attention matrix, they recompute S = QK^T, and flop_counter's
``sdpa_backward_flop_count`` counts that recompute ("Step 1: We recompute the scores matrix"),
five bmm-sized products against the math path's four. So, exactly,

    trace FLOPs == reference FLOPs + sum over fused attention backwards of 2 * b * h * s_q * s_k * d

(a FlopCounterMode run on a CUDA GPU would see the fused ops and report the trace's number).

RNNs are the second documented difference. The trace mirrors cuDNN (``_cudnn_rnn``, see
``gpucast.graph.rnn``), whose backward-data pass always produces the gradient of the initial
hidden state (``dhx``), so it runs the recurrent input-gradient GEMM at every time step. The
decomposed recurrence of the plain meta step skips it at t = 0 when the initial state is a
constant (``hx`` omitted, or not requiring grad). That is, per layer and direction of such an RNN,
one GEMM of ``2 * batch * gates * hidden * hidden`` FLOPs (gates: 4 LSTM, 3 GRU, 1 RNN), counted
here from forward pre-hooks on the reference run's ``nn.RNNBase`` modules.

Grouped convolutions are the third. flop_counter's ``conv_backward_flop`` counts a weight gradient
on the transposed shapes, which lose the group division: ``groups`` times the forward's
multiply-adds where the gradient has exactly the forward's (pytorch/pytorch PR #183405 divides by
``groups``). The trace counts the forward's (``gpucast.graph.rules``), so, per grouped backward
that computes the weight gradient, the reference is ``(groups - 1) x`` its forward FLOPs higher,
recomputed here from the op's shapes (the forward's FLOPs: ``2 n k P Q (c / g) R S``).

Causal fused attention is the fourth. A fused kernel with ``is_causal`` computes the causal triangle, and
the trace counts that share of flop_counter's square (``gpucast.graph.causal``): per causal fused op, the
reference is ``1 - (s + 1) / (2 s)`` of the op's whole count higher, recomputed here from the op's shapes
with flop_counter's own SDPA formulas (each op is either whole or exactly that share of it).

The issue's "within 1%" holds on top of the first two at the small sizes used here (grouped
convolutions and causal attention excepted: their reference is off by what the kernels skip).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

from gpucast import zoo
from gpucast.graph import causal
from gpucast.graph.tracer import resolve
from gpucast.job import Job

# Sequence models run at seq_len <= 32 (attention's share of FLOPs, the part that differs from
# the reference, grows with seq_len; the RNN dhx term shrinks as 1/seq_len and is ~1% at 8).
# Everything else keeps its default spec; the batch is 2.
_MAX_SEQ = 32
_FUSED_ATTENTION_BACKWARD = {"_scaled_dot_product_efficient_attention_backward",
                             "_scaled_dot_product_flash_attention_backward"}


def _zoo_job(w) -> Job:
    seq = None
    if w.default_seq_len is not None:
        seq = min(w.default_seq_len, _MAX_SEQ)
    return Job(w.name, batch_size=2, seq_len=seq)


_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _meta_reference_flops(job: Job) -> tuple[int, int]:
    """FlopCounterMode over forward + loss + backward of a plain meta-device step, and the
    FLOPs of the t = 0 recurrent input-gradient GEMMs it skips (see module docstring)."""
    built = resolve(job)
    with torch.device("meta"):
        model = built.model_fn()
        inputs = built.input_fn(job.batch_size)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    model.train()
    skipped_dhx = []

    def rnn_pre_hook(mod, args, kwargs):
        x = args[0]
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        hx = [hx] if isinstance(hx, torch.Tensor) else list(hx or ())
        if not any(h.requires_grad for h in hx):
            batch = x.shape[0 if mod.batch_first else 1] if x.dim() == 3 else 1
            gates = _GATES[mod.mode]
            skipped_dhx.append(mod.num_layers * (1 + mod.bidirectional)
                               * 2 * batch * gates * mod.hidden_size * mod.hidden_size)

    for m in model.modules():
        if isinstance(m, nn.RNNBase):
            assert m.proj_size == 0  # (the formula above is for plain RNNs)
            m.register_forward_pre_hook(rnn_pre_hook, with_kwargs=True)
    with FlopCounterMode(display=False) as counter:
        out = model(*inputs)
        loss = built.loss_fn(out, inputs)
        loss.backward()
    return counter.get_total_flops(), sum(skipped_dhx)


def _grouped_weight_grad_overcount(trace) -> int:
    """What flop_counter counts too much on grouped convolutions' weight gradients (module docstring),
    from the trace's shapes alone: a weight ``(k, c/g, R, S)`` (or, transposed, ``(c, k/g, R, S)``)."""
    total = 0
    for o in trace.ops:
        if o.op != "convolution_backward" or not any(s == o.shapes[2] for s in o.out_shapes):
            continue
        grad, x, w = o.shapes[:3]
        if w[0] == grad[1]:  # (k, c/g, ...): the forward's n k P Q (c/g) R S
            groups = x[1] // w[1]
            forward = 2 * grad[0] * grad[1] * _prod(grad[2:]) * w[1] * _prod(w[2:])
        else:  # transposed, (c, k/g, ...): every input point times its group's k/g outputs
            groups = grad[1] // w[1]
            forward = 2 * x[0] * x[1] * _prod(x[2:]) * w[1] * _prod(w[2:])
        total += (groups - 1) * forward
    return total


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _score_recompute_flops(trace) -> int:
    """FLOPs of the S = QK^T recompute inside fused attention backwards (see module docstring)."""
    total = 0
    for o in trace.ops:
        if o.op in _FUSED_ATTENTION_BACKWARD:
            _, q, k = o.shapes[:3]  # (grad_out, query, key, ...)
            b, h, s_q, d = q
            s_k = k[2]
            total += 2 * b * h * s_q * s_k * d
    return total


def _causal_skipped_flops(trace) -> int:
    """What flop_counter counts beyond the causal triangle on the trace's fused attention ops (module
    docstring); each op is checked to carry its whole count or exactly the causal share of it."""
    total = 0
    for o in trace.ops:
        if o.op not in causal.FUSED:
            continue
        backward = o.op.endswith("_backward")
        q, k = (o.shapes[1], o.shapes[2]) if backward else (o.shapes[0], o.shapes[1])
        whole = sdpa_backward_flop_count(*o.shapes[:4]) if backward else sdpa_flop_count(*o.shapes[:3])
        assert o.flops in (whole, int(whole * causal.pairs_share(q[-2], k[-2]))), (o.op, o.flops, whole)
        total += whole - o.flops
    return total


_ZOO = [pytest.param(w, id=w.name) for w in zoo.workloads()]


@pytest.mark.parametrize("workload", _ZOO)
def test_zoo_flops_equal_flop_counter(workload, cap):
    job = _zoo_job(workload)
    trace = cap(job)
    ref, dhx = _meta_reference_flops(job)
    assert ref > 0
    recompute = _score_recompute_flops(trace)
    assert (recompute > 0) == any(o.op in _FUSED_ATTENTION_BACKWARD for o in trace.ops)
    assert (dhx > 0) == any(o.op == "_cudnn_rnn_backward" for o in trace.ops)
    grouped = _grouped_weight_grad_overcount(trace)
    skipped = _causal_skipped_flops(trace)
    # Exact, once the four documented differences are accounted for.
    assert trace.flops == ref + recompute + dhx - grouped - skipped, (trace.flops, ref, recompute, dhx, grouped,
                                                                      skipped)
    # The requirement on the raw totals.
    assert abs(trace.flops + grouped + skipped - ref) <= 0.01 * ref
    # FLOPs are only counted on the GPU: nothing on host ops, nothing in the optimizer step.
    assert all(o.flops == 0 for o in trace.ops if o.category in ("host", "view"))
    assert sum(o.flops for o in trace.ops if o.phase == "optim") == 0


def test_recompute_term_is_what_flop_counter_says_for_fused_backward():
    """The documented difference, checked on flop_counter itself: one fused SDPA backward minus
    the math path's backward is one QK^T product."""
    b, h, s, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, s, d, device="meta", requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as fused:
        o = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True)[0]
        o.sum().backward()
    q, k, v = (torch.randn(b, h, s, d, device="meta", requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as math:
        o = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1) @ v
        o.sum().backward()
    qk = 2 * b * h * s * s * d
    assert math.get_total_flops() == 2 * qk + 4 * qk  # fwd: QK^T, PV; bwd: dV, dP, dQ, dK
    assert fused.get_total_flops() == math.get_total_flops() + qk


# --------------------------------------------------------------------------- real CPU steps
class _SmallCNN(nn.Module):
    """Conv (grouped and depthwise), BN, pooling and a linear head: the conv formulas' corners."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16), nn.ReLU(),
            nn.Conv2d(16, 32, 1, groups=4), nn.MaxPool2d(2),
            nn.ConvTranspose2d(32, 8, 2, stride=2))
        self.head = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def _small_cnn_job():
    return Job.from_module(_SmallCNN, lambda b: (torch.randn(b, 3, 32, 32),), batch_size=3,
                           loss_fn=lambda out, inputs: F.cross_entropy(
                               out, torch.zeros(out.shape[0], dtype=torch.long, device=out.device)),
                           name="tests.small_cnn")


_REAL = {
    "mlp-small": lambda: Job("mlp-small", batch_size=4),
    "resnet18-cifar": lambda: Job("resnet18-cifar", batch_size=2),
    "small-cnn": _small_cnn_job,
}


@pytest.mark.parametrize("name", sorted(_REAL))
def test_flops_equal_flop_counter_on_a_real_cpu_step(name, cap):
    job = _REAL[name]()
    built = resolve(job)
    torch.manual_seed(0)
    model = built.model_fn()
    inputs = built.input_fn(job.batch_size)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    assert all(p.device.type == "cpu" for p in model.parameters())
    model.train()
    with FlopCounterMode(display=False) as counter:
        out = model(*inputs)
        loss = built.loss_fn(out, inputs)
        loss.backward()
    assert torch.isfinite(loss)  # a real step ran
    trace = cap(job)
    assert counter.get_total_flops() > 0
    assert trace.flops == counter.get_total_flops() - _grouped_weight_grad_overcount(trace)


def test_a_grouped_convolutions_backward_does_twice_its_forwards_multiply_adds(cap):
    # Independent of any formula: the data gradient and the weight gradient each pair every weight
    # tap with every output point of its group once, as the forward does.
    class Depthwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)

        def forward(self, x):
            return self.conv(x)

    job = Job.from_module(Depthwise, lambda b: (torch.randn(b, 32, 16, 16, requires_grad=True),), batch_size=4,
                          loss_fn=lambda out, inputs: out.sum(), name="tests.depthwise")
    trace = cap(job)
    fwd = [o for o in trace.ops if o.op == "convolution"]
    bwd = [o for o in trace.ops if o.op == "convolution_backward"]
    assert len(fwd) == 1 and len(bwd) == 1
    assert fwd[0].flops == 2 * 4 * 32 * 16 * 16 * 1 * 9
    assert bwd[0].flops == 2 * fwd[0].flops
