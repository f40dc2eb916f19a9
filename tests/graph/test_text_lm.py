"""A vision-language model's language model, which transformers has only as a decoder without its head.

The independent reasons: an engine serves a Qwen3-VL text prompt through the decoder and the ``lm_head`` the
vision-language class adds (``hidden x vocab`` weights, untied in Qwen3-VL's configs), so the served model has the
decoder's parameters plus exactly those; a tied head adds none."""

from __future__ import annotations

import torch

import gpucast
from gpucast.graph import hf
from gpucast.job import Job

TEXT = {"model_type": "qwen3_vl_text", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
        "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6,
                                                             "mrope_section": [8, 12, 12]}}
VLM = {"model_type": "qwen3_vl", "text_config": TEXT,
       "vision_config": {"depth": 1, "hidden_size": 64, "num_heads": 2, "out_hidden_size": 256,
                         "intermediate_size": 128}}


def _decoder_parameters(tied: bool) -> int:
    cfg = hf._config(Job.from_hf_config(dict(TEXT, tie_word_embeddings=tied), batch_size=1))
    with torch.device("meta"):
        decoder = type(hf._build(cfg).model)(cfg)
    return sum(p.numel() for p in decoder.parameters())


def test_the_decoder_gets_its_head():
    cfg = hf._config(Job.from_hf_config(TEXT, batch_size=1))
    cls = hf._model_class(cfg)
    assert cls.__name__ == "Qwen3VLTextModelForCausalLM"
    with torch.device("meta"):
        lm = cls(cfg)
    assert sum(p.numel() for p in lm.parameters()) == _decoder_parameters(False) + 256 * 1000
    cfg_tied = hf._config(Job.from_hf_config(dict(TEXT, tie_word_embeddings=True), batch_size=1))
    with torch.device("meta"):
        tied = hf._model_class(cfg_tied)(cfg_tied)
    assert sum(p.numel() for p in tied.parameters()) == _decoder_parameters(True)


def test_a_vision_language_config_serves_and_trains_its_language_model():
    served = gpucast.predict(Job.from_hf_config(VLM, batch_size=1, mode="serve", precision="bf16",
                                                serve=dict(input_len=256, output_len=16, concurrency=2)), "h100")
    assert served.serving["finished"] == served.serving["requests"] > 0
    trained = gpucast.predict(Job.from_hf_config(VLM, batch_size=2, seq_len=128, precision="bf16"), "h100")
    # the head's GEMM (2 x tokens x hidden x vocab forward) is in the step
    assert trained.flops > 3 * 2 * (2 * 128) * 256 * 1000
