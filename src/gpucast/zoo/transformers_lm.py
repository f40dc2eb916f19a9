"""Transformer language and translation models.

Hugging Face ``transformers`` models are built from a config with random init
(``Model(config)`` / ``AutoModelForCausalLM.from_config``), SDPA attention and no KV cache; no
weights, tokenizer or data is downloaded. Configs copy the published shapes; position tables
grow if a job asks for a longer ``seq_len`` than the checkpoint supports. Losses are computed
here, in fp32, from the logits (HF models are not given ``labels``).
"""

from __future__ import annotations

from functools import partial

from gpucast import imports
from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec, next_token_loss, token_input


# HF's own "sdpa" implementation, registered under a name of ours that has no mask builder.
# With "sdpa", HF's mask code reads tensor values to decide whether a mask is needed (the
# packed-sequence probe, the all-ones padding check): ``.item()`` on meta tensors, which fails.
# On a GPU those checks end with no mask and ``is_causal`` set on SDPA, which is exactly what
# this name gives: the same attention kernel call, minus the probe.
_ATTN = "gpucast_sdpa"


def _hf(config_cls: str, model_cls: str, **config):
    """model_fn for ``transformers.<model_cls>(<config_cls>(**config))``; ``config`` values that
    are callables get the spec (for sizes that follow ``seq_len``)."""

    def model_fn(spec: WorkloadSpec):
        transformers = imports.load("transformers")
        sdpa = imports.load("transformers.integrations.sdpa_attention")
        transformers.AttentionInterface.register(_ATTN, sdpa.sdpa_attention_forward)
        kwargs = {k: (v(spec) if callable(v) else v) for k, v in config.items()}
        cfg = getattr(transformers, config_cls)(**kwargs)
        cfg._attn_implementation = _ATTN
        return getattr(transformers, model_cls)(cfg)

    return model_fn


# --- torch.nn.Transformer for translation -------------------------------------------------

def _nmt_model(spec: WorkloadSpec, vocab=32_000, d_model=512, heads=8, layers=6, ffn=2048):
    """Transformer-base (Vaswani et al. 2017) over ``torch.nn.Transformer``: shared source/target
    embedding tied to the output projection, sinusoidal positions, post-LN, dropout 0.1."""
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class TransformerNMT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model)
            self.transformer = nn.Transformer(d_model, heads, layers, layers, ffn, 0.1,
                                              batch_first=True)

        def _embed(self, tokens):
            t = tokens.shape[1]
            pos = torch.arange(t, device=tokens.device, dtype=torch.float32)[:, None]
            freq = torch.exp(torch.arange(0, d_model, 2, device=tokens.device) *
                             (-math.log(10000.0) / d_model))
            pe = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1)
            return self.embed(tokens) * math.sqrt(d_model) + pe

        def forward(self, src, tgt):
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
            h = self.transformer(self._embed(src), self._embed(tgt), tgt_mask=mask,
                                 tgt_is_causal=True)
            return F.linear(h, self.embed.weight)

    return TransformerNMT()


register(Workload(
    name="transformer-nmt", family="transformer", source="gpucast",
    description="Transformer-base NMT (Vaswani et al. 2017) over torch.nn.Transformer, 6+6 layers, "
                "d_model 512, shared vocab 32k",
    model_fn=_nmt_model, input_fn=token_input(32_000, streams=2),
    loss_fn=partial(next_token_loss, stream=1),
    default_batch_size=64, default_seq_len=64, tags=("translation",),
))


# --- BERT (masked LM) ---------------------------------------------------------------------

def _mlm_loss(output, inputs, mask_prob: float = 0.15):
    """BERT's masked-LM loss: cross-entropy at ~15% of positions (the rest are ignored)."""
    import torch
    import torch.nn.functional as F

    logits = output.logits.float()
    ids = inputs[0]
    labels = torch.where(torch.rand(ids.shape, device=ids.device) < mask_prob, ids, -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


for _name, _hidden, _layers, _heads, _batch in (("bert-base", 768, 12, 12, 32),
                                                ("bert-large", 1024, 24, 16, 16)):
    register(Workload(
        name=_name, family="transformer", source="transformers",
        description=f"BERT-{_name[5:]} masked LM (Devlin et al. 2019), "
                    f"{_layers} layers, hidden {_hidden}, seq 128",
        model_fn=_hf("BertConfig", "BertForMaskedLM", hidden_size=_hidden,
                     num_hidden_layers=_layers, num_attention_heads=_heads,
                     intermediate_size=4 * _hidden,
                     max_position_embeddings=lambda spec: max(512, spec.seq_len)),
        input_fn=token_input(30_522), loss_fn=_mlm_loss,
        default_batch_size=_batch, default_seq_len=128, tags=("mlm",),
    ))


# --- GPT-2 (causal LM) --------------------------------------------------------------------

for _name, _hidden, _layers, _heads, _batch in (("gpt2", 768, 12, 12, 8),
                                                ("gpt2-medium", 1024, 24, 16, 4),
                                                ("gpt2-large", 1280, 36, 20, 2),
                                                ("gpt2-xl", 1600, 48, 25, 1)):
    register(Workload(
        name=_name, family="transformer", source="transformers",
        description=f"GPT-2 {_name.partition('-')[2] or 'small'} (Radford et al. 2019), "
                    f"{_layers} layers, hidden {_hidden}, seq 1024",
        model_fn=_hf("GPT2Config", "GPT2LMHeadModel", n_embd=_hidden, n_layer=_layers,
                     n_head=_heads, n_positions=lambda spec: max(1024, spec.seq_len),
                     use_cache=False),
        input_fn=token_input(50_257), loss_fn=next_token_loss,
        default_batch_size=_batch, default_seq_len=1024, tags=("causal-lm",),
    ))


# --- T5 (encoder-decoder) -----------------------------------------------------------------

def _t5_input(spec: WorkloadSpec, batch_size: int, vocab: int = 32_128):
    """(input_ids, attention_mask, decoder_input_ids): encoder seq_len, decoder seq_len // 4."""
    import torch

    src = torch.randint(0, vocab, (batch_size, spec.seq_len), dtype=torch.long)
    tgt = torch.randint(0, vocab, (batch_size, max(2, spec.seq_len // 4)), dtype=torch.long)
    return src, torch.ones(batch_size, spec.seq_len, dtype=torch.long), tgt


register(Workload(
    name="t5-small", family="transformer", source="transformers",
    description="T5-small (Raffel et al. 2020) span-corruption, 6+6 layers, d_model 512, "
                "seq 512 in / 128 out",
    model_fn=_hf("T5Config", "T5ForConditionalGeneration", d_model=512, d_ff=2048, d_kv=64,
                 num_layers=6, num_heads=8, vocab_size=32_128, use_cache=False),
    input_fn=_t5_input, loss_fn=partial(next_token_loss, stream=2),
    default_batch_size=32, default_seq_len=512, tags=("seq2seq",),
))


# --- Llama (causal LM) --------------------------------------------------------------------

_LLAMAS = {
    # Llama-3.2-1B shape (rope scaling omitted: it changes no kernel shape).
    "llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, vocab_size=128_256,
                     rope_theta=500_000.0, tie_word_embeddings=True, _what="Llama-3.2-1B"),
    # Llama-2-7B shape.
    "llama-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32_000,
                     tie_word_embeddings=False, _what="Llama-2-7B"),
}

for _name, _cfg in _LLAMAS.items():
    _cfg = dict(_cfg)
    _what = _cfg.pop("_what")
    register(Workload(
        name=_name, family="transformer", source="transformers",
        description=f"{_what} shape (Touvron et al. / Meta 2023-24), "
                    f"{_cfg['num_hidden_layers']} layers, hidden {_cfg['hidden_size']}, seq 2048",
        model_fn=_hf("LlamaConfig", "LlamaForCausalLM", rms_norm_eps=1e-5, use_cache=False,
                     max_position_embeddings=lambda spec: max(4096, spec.seq_len), **_cfg),
        input_fn=token_input(_cfg["vocab_size"]), loss_fn=next_token_loss,
        default_batch_size=1, default_seq_len=2048, tags=("causal-lm",),
    ))
