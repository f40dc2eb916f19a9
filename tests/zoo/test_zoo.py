"""The zoo: every entry builds, runs forward, loss and backward on the meta device."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from gpucast import zoo
from gpucast.zoo.base import FAMILIES, default_loss

NAMES = zoo.names()

# Recurrent nets unroll one set of ops per time step on meta, so their cost in this test grows
# with seq_len; a short sequence exercises the same code (defaults are checked in test_defaults).
_TEST_SEQ = {"rnn": 8}


def _step(workload, batch_size=2, **overrides):
    """Build under meta, forward, loss, backward; return (model, inputs, output, loss)."""
    spec = workload.resolve(**overrides)
    with torch.device("meta"):
        model = workload.model_fn(spec)
        inputs = workload.input_fn(spec, batch_size)
        output = model(*inputs)
        loss = (workload.loss_fn or default_loss)(output, inputs)
        loss.backward()
    return model, inputs, output, loss


def test_registry_size_and_names():
    assert len(NAMES) >= 40
    assert len(set(NAMES)) == len(NAMES)
    for name in NAMES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name


def test_every_family_has_an_entry():
    assert {w.family for w in zoo.workloads()} == set(FAMILIES)


def test_defaults():
    for w in zoo.workloads():
        assert w.description and w.default_input != "-", w.name
        assert w.default_batch_size > 0, w.name
        spec = w.resolve()
        with torch.device("meta"):
            inputs = w.input_fn(spec, 3)
        assert isinstance(inputs, tuple) and inputs, w.name
        for x in inputs:
            assert x.device.type == "meta" and x.shape[0] == 3, w.name
            assert x.is_floating_point() or x.dtype == torch.long, w.name
        if spec.input_shape is not None:
            assert any(tuple(x.shape[1:]) == spec.input_shape for x in inputs), w.name
        if spec.seq_len is not None:
            assert any(x.dim() >= 2 and x.shape[1] == spec.seq_len for x in inputs), w.name


@pytest.mark.parametrize("name", NAMES)
def test_train_step_on_meta(name):
    """Build, forward, loss (a 0-dim float), backward; every parameter on meta, grads reached.

    On meta a step still costs ~0.15-1 ms of Python per aten op (meta kernels and decompositions,
    batch norm the dearest), so this is most of the file's ~35 s of CPU.
    """
    w = zoo.get(name)
    model, _, _, loss = _step(w, seq_len=_TEST_SEQ.get(w.family))
    assert loss.dim() == 0 and loss.is_floating_point()
    params = list(model.parameters())
    assert params and all(p.device.type == "meta" for p in params)
    assert any(p.grad is not None for p in params)


def test_vision_input_shape_override():
    _, _, out, _ = _step(zoo.get("resnet18"), batch_size=5, input_shape=(3, 64, 64))
    assert tuple(out.shape) == (5, 1000)
    _, _, out, _ = _step(zoo.get("vit-b16"), batch_size=2, input_shape=(3, 96, 96))
    assert tuple(out.shape) == (2, 1000)


@pytest.mark.parametrize("name,seq", [("gpt2", 2048), ("lstm-lm-small", 12)])
def test_lm_seq_len_override(name, seq):
    w = zoo.get(name)
    _, inputs, out, _ = _step(w, seq_len=seq)
    assert tuple(inputs[0].shape) == (2, seq)
    logits = out if isinstance(out, torch.Tensor) else out.logits
    assert tuple(logits.shape[:2]) == (2, seq)


def test_listing_imports_no_frameworks():
    code = ("import sys; from gpucast import zoo; zoo.workloads(); "
            "print([m for m in ('torch', 'torchvision', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
