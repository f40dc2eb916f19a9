"""Capture as a whole: no op is dropped, inference traces only the forward, a 7B model costs no
memory to trace, and bad user code fails with one line naming the stage."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpucast.graph import capture
from gpucast.graph.tracer import CaptureError
from gpucast.job import Job


# --------------------------------------------------------------------------- no op dropped
class _Exotic(nn.Module):
    """A linear layer followed by an op no cost rule knows (logcumsumexp: no FLOP formula, no
    category, no decomposition)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.logcumsumexp(self.lin(x), dim=1)


def test_an_op_without_a_rule_is_listed_with_a_default_cost():
    trace = capture(Job.from_module(_Exotic, lambda b: (torch.randn(b, 16),), batch_size=4))
    assert trace.uncosted.get("logcumsumexp", 0) >= 1
    assert trace.coverage < 1.0
    fwd = [o for o in trace.ops if o.op == "logcumsumexp" and o.phase == "fwd"]
    assert len(fwd) == 1
    o = fwd[0]
    assert not o.costed and o.category == "other"
    # The default cost: one kernel that reads its input and writes its output once (4x16 fp32).
    assert o.kernels == 1 and o.bytes_read == 4 * 16 * 4 and o.bytes_written == 4 * 16 * 4
    assert o.dispatch == "python" and o.out_shapes == ((4, 16),)
    # Every uncosted op is in the list, with its count.
    assert sum(trace.uncosted.values()) == sum(not r.costed for r in trace.ops)
    # Its output is memory like any other activation (the 256 B output is one block, saved by
    # logcumsumexp's backward with the output of the linear).
    assert trace.memory.at_backward_start["activations"] >= 2 * 512


def test_ops_are_in_dispatch_order_with_phases_in_order(cap):
    trace = cap(Job("resnet18", batch_size=4, input_shape=(3, 32, 32)))
    assert [o.index for o in trace.ops] == list(range(len(trace.ops)))
    order = {"fwd": 0, "loss": 1, "bwd": 2, "optim": 3}
    phases = [order[o.phase] for o in trace.ops]
    assert phases == sorted(phases) and set(phases) == {0, 1, 2, 3}
    assert trace.coverage == 1.0 and trace.uncosted == {}
    assert all(o.bytes_read >= 0 and o.bytes_written >= 0 and o.kernels >= 0 for o in trace.ops)


# --------------------------------------------------------------------------- inference
def test_infer_mode_traces_the_forward_only(cap):
    trace = cap(Job("resnet18", batch_size=4, input_shape=(3, 32, 32), mode="infer"))
    train = cap(Job("resnet18", batch_size=4, input_shape=(3, 32, 32)))
    assert trace.mode == "infer" and {o.phase for o in trace.ops} == {"fwd"}
    m = trace.memory
    assert m.totals["optimizer_state"] == m.totals["gradients"] == 0
    assert trace.gradient_bytes == 0 and m.at_backward_start == {}
    assert not any(o.op.startswith("_foreach_") for o in trace.ops)
    # Same forward FLOPs as training's forward; under no_grad nothing is saved, so activations
    # at the peak are a few layers' worth, far below what training keeps for backward.
    assert trace.flops == sum(o.flops for o in train.ops if o.phase == "fwd")
    assert m.at_peak["activations"] < train.memory.at_backward_start["activations"] / 3
    # Batch norm in eval mode: no running-stat updates, and the model is in eval (no dropout).
    assert m.totals["parameters"] == train.memory.totals["parameters"]


def test_inference_of_a_7b_model_allocates_no_real_memory(tmp_path):
    """llama-7b (Llama-2-7B shape) at batch 1, seq 128: the trace says ~27 GB of weights, the
    process's peak RSS grows by far less than 1 GiB while capturing it."""
    script = textwrap.dedent("""
        import json, resource, sys
        import torch, transformers
        from transformers import LlamaConfig, LlamaForCausalLM  # import cost before the baseline
        from gpucast.graph import capture
        from gpucast.job import Job
        job = Job("llama-7b", batch_size=1, seq_len=128, mode="infer")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        trace = capture(job)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(dict(before_kib=before, after_kib=after, parameters=trace.parameters,
                              parameter_bytes=trace.parameter_bytes,
                              peak=trace.memory.peak_allocated_bytes,
                              phases=sorted({o.phase for o in trace.ops}))))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert 6.5e9 < r["parameters"] < 7e9
    assert r["parameter_bytes"] == 4 * r["parameters"]
    assert r["peak"] >= r["parameter_bytes"]
    assert r["phases"] == ["fwd"]
    grew = (r["after_kib"] - r["before_kib"]) * 1024
    assert grew < 1 << 30, f"peak RSS grew by {grew / 2**20:.0f} MiB"


# --------------------------------------------------------------------------- bad input
class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)


def _inputs(b):
    return (torch.randn(b, 8),)


def _raise(*_):
    raise ValueError("bad config: hidden must be even\nTraceback-like second line")


def _no_modes_left():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return (_get_current_dispatch_mode() is None and torch._C._len_torch_function_stack() == 0
            and F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention)


@pytest.mark.parametrize("kwargs, stage, detail", [
    (dict(model_fn=_raise, input_fn=_inputs), "building the model", "ValueError: bad config"),
    (dict(model_fn=lambda: 42, input_fn=_inputs), "building the model", "int"),
    (dict(model_fn=_Tiny, input_fn=_raise), "building the inputs", "ValueError: bad config"),
    (dict(model_fn=_Tiny, input_fn=lambda b: 5), "building the inputs", "not a tuple"),
    (dict(model_fn=_Tiny, input_fn=lambda b: {"x": torch.randn(b, 8)}), "building the inputs", "dict"),
    (dict(model_fn=_Tiny, input_fn=lambda b: (torch.randn(b, 7),)), "the forward pass", "RuntimeError"),
    (dict(model_fn=_Tiny, input_fn=_inputs, loss_fn=lambda out, inputs: out), "the loss", "scalar"),
    (dict(model_fn=_Tiny, input_fn=_inputs, loss_fn=lambda out, inputs: 1.0), "the loss", "scalar"),
    (dict(model_fn=_Tiny, input_fn=_inputs, loss_fn=_raise), "the loss", "ValueError: bad config"),
    (dict(model_fn=_Tiny, input_fn=_inputs, loss_fn=lambda out, inputs: out.detach().sum()),
     "the loss", "does not depend on any trainable parameter"),
])
def test_bad_user_code_gives_one_line_naming_the_stage(kwargs, stage, detail):
    job = Job.from_module(batch_size=2, **kwargs)
    with pytest.raises(CaptureError) as info:
        capture(job)
    msg = str(info.value)
    assert "\n" not in msg and msg.strip() == msg and len(msg) <= 500
    assert msg.startswith(stage + " failed"), msg
    assert detail in msg, msg
    assert isinstance(info.value, RuntimeError)
    # Capture leaves no mode active and F.scaled_dot_product_attention restored.
    assert _no_modes_left()


def test_a_failed_capture_does_not_break_the_next_one():
    with pytest.raises(CaptureError):
        capture(Job.from_module(_Tiny, lambda b: (torch.randn(b, 7),), batch_size=2))
    trace = capture(Job.from_module(_Tiny, _inputs, batch_size=2))
    # The forward GEMM (2x8 @ 8x4) and the weight-gradient GEMM; the input needs no gradient.
    assert trace.flops == 2 * (2 * 2 * 8 * 4)
    assert _no_modes_left()
