"""Whose fault an exception is (gpucast.faults): the line between 4xx/exit 2 and 5xx/exit 1, per type."""

from __future__ import annotations

import pytest

from gpucast.faults import INTERNAL, internal_cause, is_input_error
from gpucast.graph.tracer import CaptureError
from gpucast.job import JobError


def _capture_error(cause: BaseException, user_code: bool = False) -> CaptureError:
    try:
        try:
            raise cause
        except Exception as exc:
            raise CaptureError(f"the forward pass failed: {type(exc).__name__}: {exc}") from exc
    except CaptureError as err:
        err.user_code = user_code
        return err


@pytest.mark.parametrize("exc, input_fault", [
    (JobError("batch_size must be positive"), True),
    (KeyError("unknown zoo workload 'x'"), True),
    (ValueError("bad"), True),
    # what a model raises while traced from what the client sent: the input's
    (_capture_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied")), True),
    (_capture_error(TypeError("forward() got an unexpected keyword argument")), True),
    (_capture_error(NotImplementedError("no meta kernel")), True),
    # a library or gpucast broke: not the input's, raw or as a capture failure's cause
    (_capture_error(AttributeError("module 'transformers' has no attribute 'AttentionInterface'")), False),
    (_capture_error(ImportError("cannot import name 'X'")), False),
    (AttributeError("module 'transformers' has no attribute 'AutoConfig'"), False),
    (ModuleNotFoundError("No module named 'x'"), False),
    (AssertionError(), False),
    (TypeError("unsupported operand"), False),
    (RuntimeError("anything else"), False),
    # the user's own code (a module: job) is the input, whatever it raises
    (_capture_error(AttributeError("'Net' object has no attribute 'fc'"), user_code=True), True),
])
def test_whose_fault(exc, input_fault):
    assert is_input_error(exc) is input_fault


def test_internal_cause_walks_the_cause_chain():
    inner = AttributeError("x")
    err = _capture_error(inner)
    assert internal_cause(err) is inner
    assert internal_cause(_capture_error(RuntimeError("y"))) is None
    assert all(issubclass(t, BaseException) for t in INTERNAL)


def test_capture_marks_a_module_jobs_failures_as_user_code():
    import torch

    from gpucast.graph.tracer import capture
    from gpucast.job import Job

    class Broken(torch.nn.Module):
        def forward(self, x):
            return self.missing(x)

    job = Job.from_module(Broken, lambda b: (torch.randn(b, 4),), batch_size=2, mode="infer")
    with pytest.raises(CaptureError) as info:
        capture(job)
    assert info.value.user_code and isinstance(info.value.__cause__, AttributeError)
    assert is_input_error(info.value)


def test_the_cli_says_a_capture_broken_inside_gpucast_in_one_line_with_exit_1(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from gpucast.cli import app
    from gpucast.graph import hf

    def broken(cfg):
        raise AttributeError("module 'transformers' has no attribute 'AttentionInterface'")

    monkeypatch.setattr(hf, "_build", broken)
    monkeypatch.setenv("GPUCAST_NO_CACHE", "1")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2}))
    r = CliRunner().invoke(app, ["predict", "--hf-config", str(config), "-b", "2", "--seq-len", "16"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 1, r.output
    assert len(lines) == 1 and lines[0].startswith("error: building the model failed: AttributeError")
    assert "not your input's fault" in lines[0]
