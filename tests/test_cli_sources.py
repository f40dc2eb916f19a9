"""The three ways a user's own model reaches the CLI: an ONNX file, --hf-config and --module,
with their refusals. Real processes of the installed `gpucast`, started in parallel."""

from __future__ import annotations

import json
import pickle
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpucast.graph.onnx.export import export_zoo
from tests.test_cli import CMD, TIMEOUT_S

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

MODULE_PY = """\
import torch.nn as nn

def build():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
"""
RAISES_PY = "raise RuntimeError('boom at import')\n"
CUSTOM_ONNX = None  # built in the fixture
TINY_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 1000}


def _custom_onnx(path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], [0.0] * 64)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("FancyOp", ["h"], ["f"], domain="com.example"),
             helper.make_node("Relu", ["f"], ["y"])]
    g = helper.make_graph(nodes, "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]),
              str(path))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sources")
    export_zoo("mlp-small", d / "mlp.onnx")
    _custom_onnx(d / "custom.onnx")
    (d / "model.py").write_text(MODULE_PY)
    (d / "raises.py").write_text(RAISES_PY)
    (d / "config.json").write_text(json.dumps(TINY_BERT))
    (d / "unknown.json").write_text(json.dumps({"model_type": "no-such-arch"}))
    (d / "trunc.onnx").write_bytes((d / "mlp.onnx").read_bytes()[:5000])
    (d / "model.pt").write_bytes(pickle.dumps({"weights": [1, 2]}))
    work = d / "cwd"
    work.mkdir()
    cases = {
        "onnx": ["predict", str(d / "mlp.onnx"), "-b", "64", "--json"],
        "hf": ["predict", "--hf-config", str(d / "config.json"), "--seq-len", "64", "-b", "4", "--json"],
        "module": ["predict", "--module", f"{d / 'model.py'}:build", "--input-shape", "3,32,32", "-b", "16", "--json"],
        "explain_custom": ["explain", str(d / "custom.onnx"), "-b", "4"],
        "bad_trunc": ["predict", str(d / "trunc.onnx")],
        "bad_pickle": ["predict", str(d / "model.pt")],
        "bad_hf": ["predict", "--hf-config", str(d / "unknown.json")],
        "bad_module_raises": ["predict", "--module", f"{d / 'raises.py'}:build", "--input-shape", "3"],
        "bad_module_shape": ["predict", "--module", f"{d / 'model.py'}:build", "--input-shape", "5,32,32"],
        "bad_module_no_input": ["predict", "--module", f"{d / 'model.py'}:build"],
        "bad_onnx_shape": ["predict", str(d / "mlp.onnx"), "--input-shape", "2,28,28"],
        "bad_two_sources": ["predict", "resnet50", "--hf-config", "bert"],
    }

    def run(args):
        return subprocess.run(CMD + args, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=work)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(cases, pool.map(run, cases.values())))
    results["_cwd_after"] = sorted(p.name for p in work.iterdir())
    return results


def test_onnx_file(runs):
    r = runs["onnx"]
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["job"]["model"].startswith("onnx:") and p["job"]["model_digest"]
    assert p["job"]["batch_size"] == 64 and p["op_coverage"] == 1.0 and p["uncosted_ops"] == {}
    assert p["parameters"] == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10  # mlp-small's layers


def test_hf_config_file(runs):
    r = runs["hf"]
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["job"]["model"] == "hf:bert" and json.loads(p["job"]["hf_config"])["hidden_size"] == 64
    assert p["job"]["seq_len"] == 64 and p["step_time_s"] > 0


def test_user_module(runs):
    r = runs["module"]
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["job"]["model"].startswith("module:") and "model.py:build" in p["job"]["model"]
    assert p["parameters"] == 3 * 8 * 9 + 8 + 8 * 10 + 10


def test_explain_names_uncosted_ops(runs):
    r = runs["explain_custom"]
    assert r.returncode == 0, r.stderr
    assert "uncosted ops (default cost applied): onnx:com.example.FancyOp x1" in r.stdout


@pytest.mark.parametrize("case, message", [
    ("bad_trunc", "not a valid ONNX model"),
    ("bad_pickle", "unpickling runs arbitrary code"),
    ("bad_hf", "unknown Hugging Face architecture 'no-such-arch'"),
    ("bad_module_raises", "raised RuntimeError on import: boom at import"),
    ("bad_module_shape", "the forward pass failed"),
    ("bad_module_no_input", "--module needs the input"),
    ("bad_onnx_shape", "shapes do not fit"),
    ("bad_two_sources", "give one model source"),
])
def test_bad_input_is_one_line_and_exit_2(runs, case, message):
    r = runs[case]
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert message in lines[0]
    assert r.stdout == ""


def test_nothing_written(runs):
    assert runs["_cwd_after"] == []
