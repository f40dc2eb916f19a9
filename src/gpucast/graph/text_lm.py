"""A causal LM for a vision-language model's language model that transformers only has as a base model.

Qwen2.5-VL, Qwen3-VL (dense and MoE) and GLM-4.5V nest their language model in ``text_config`` under a model type
(``qwen3_vl_moe_text``, ...) whose only class is the decoder without its head (``Qwen3VLMoeTextModel``): the
vision-language class adds the ``lm_head``. Serving engines run text prompts through the decoder and that head,
and a text-only training step does the same, so :func:`causal_lm` builds the decoder with a bias-free
``hidden -> vocab`` head (tied to the input embedding when the config ties them), taking the decoder's cache
argument by its own name and, like transformers' causal LMs, projecting only the last ``logits_to_keep`` positions
when asked.

Not modelled: the vision tower and its projector (an engine loads their weights too: a few hundred million
parameters beside the decoder's billions), image tokens.
"""

from __future__ import annotations

import functools
import inspect

from torch import nn


class _TextCausalLM(nn.Module):
    base: type = nn.Module   # the decoder class (set per subclass by causal_lm)

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = self.base(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if getattr(config, "tie_word_embeddings", False):
            self.lm_head.weight = self.model.get_input_embeddings().weight
        names = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in names else "past_key_values"

    def forward(self, input_ids=None, past_key_values=None, use_cache=None, logits_to_keep: int = 0, **kwargs):
        out = self.model(input_ids=input_ids, use_cache=use_cache, **{self._cache_kw: past_key_values}, **kwargs)
        hidden = out[0] if logits_to_keep == 0 else out[0][:, -logits_to_keep:]
        return (self.lm_head(hidden),)


@functools.cache
def causal_lm(base: type) -> type:
    """A causal-LM class around the decoder class ``base`` (module docstring), named ``<base>ForCausalLM``."""
    return type(f"{base.__name__}ForCausalLM", (_TextCausalLM,), {"base": base})
