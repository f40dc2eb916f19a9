"""Hugging Face architectures from config files written by the tests (no hub, no weights).

The independent reference for sizes is transformers itself: the same config instantiated for
real on the CPU (tiny configs, so it is cheap) gives the parameter count the meta trace must
report.
"""

from __future__ import annotations

import json

import pytest
import transformers

from gpucast.api import explain
from gpucast.job import Job, JobError

TINY_BERT = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000,
             "max_position_embeddings": 256, "transformers_version": "4.0.0"}
TINY_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 500, "n_positions": 128}
TINY_VIT = {"model_type": "vit", "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 96, "image_size": 32, "patch_size": 8, "num_labels": 10}
TINY_T5 = {"model_type": "t5", "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4,
           "vocab_size": 300}


def _real_params(cfg: dict, cls) -> int:
    config = transformers.AutoConfig.for_model(**cfg)
    return sum(p.numel() for p in cls(config).parameters())


@pytest.mark.parametrize("cfg, cls, seq", [
    (TINY_BERT, transformers.BertForMaskedLM, 64),
    (TINY_GPT2, transformers.GPT2LMHeadModel, 32),
    (TINY_VIT, transformers.ViTForImageClassification, None),
    (TINY_T5, transformers.T5ForConditionalGeneration, 16),
])
def test_config_file_builds_the_architecture(tmp_path, cfg, cls, seq):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    job = Job.from_hf_config(path, batch_size=4, seq_len=seq)
    ex = explain(job, "a100-80gb")
    assert ex.prediction.parameters == _real_params(cfg, cls)
    assert ex.prediction.flops > 0 and ex.prediction.op_coverage >= 0.99
    assert {op.phase for op in ex.trace.ops} == {"fwd", "loss", "bwd", "optim"}


def test_gpt2_flops_scale_with_tokens(tmp_path):
    a = explain(Job.from_hf_config(TINY_GPT2, batch_size=2, seq_len=32), "a100-80gb").prediction
    b = explain(Job.from_hf_config(TINY_GPT2, batch_size=4, seq_len=32), "a100-80gb").prediction
    assert b.flops == pytest.approx(2 * a.flops, rel=1e-9)


def test_named_config_class_is_the_reference_size():
    # BertConfig's defaults are BERT-base: the zoo's bert-base has the same shapes (110M params).
    hf = explain(Job.from_hf_config("BertConfig", batch_size=2, seq_len=128), "a100-80gb").prediction
    zoo = explain(Job(model="bert-base", batch_size=2, seq_len=128), "a100-80gb").prediction
    assert hf.parameters == zoo.parameters
    assert hf.flops == pytest.approx(zoo.flops, rel=0.01)


def test_key_is_content_and_ignores_writer_version(tmp_path):
    a = Job.from_hf_config(TINY_BERT, batch_size=2)
    b = Job.from_hf_config({**TINY_BERT, "transformers_version": "9.9.9"}, batch_size=2)
    c = Job.from_hf_config({**TINY_BERT, "hidden_size": 128}, batch_size=2)
    assert a.key == b.key != c.key
    assert Job.from_dict(json.loads(a.to_json())) == a


@pytest.mark.parametrize("config, message", [
    ({"model_type": "no-such-arch"}, "unknown Hugging Face architecture 'no-such-arch'"),
    ({"hidden_size": 3}, "no 'model_type'"),
    ("bertt", "did you mean bert"),
    ("someorg/some-model", "never downloads"),
])
def test_bad_configs_are_one_line_errors(config, message):
    with pytest.raises(JobError, match=message):
        Job.from_hf_config(config, batch_size=2)


def test_bad_json_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(JobError, match="not valid JSON"):
        Job.from_hf_config(path, batch_size=2)
