"""Which models cut to a few layers stand for the whole one in the serving estimator's traces.

A decoder whose per-layer config lists (``layer_types``, windows, ...) repeat with a period of ``P`` layers
(``P = 1``: its layers are alike; Qwen3-Next's three gated delta-net layers and one full-attention layer:
``P = 4``; GPT-OSS's sliding and full layers: ``P = 2``) costs ``f(P) + (L / P - 1) (f(2P) - f(P))`` for any
cost ``f`` that adds up over layers (the embedding, final norm and head once, each period ``L / P`` times):
:func:`layer_period` finds ``P`` and :func:`layer_sample` cuts the model's config to ``P`` or ``2P`` layers,
per-layer lists cut alike. :class:`gpucast.estimate.serving.iteration.IterationModel` checks the cut
models against the whole model's decode step once per model and plan before it trusts them.

Not modelled here: models whose layers differ without a per-layer list saying so (fields in
:data:`UNALIKE_FIELDS`: such a model is traced whole).
"""

from __future__ import annotations

LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
# Config fields that make some layers unlike the others (dense layers among MoE ones, every-other-layer
# experts, layers without RoPE): a model setting any of them is traced whole.
UNALIKE_FIELDS = ("first_k_dense_replace", "mlp_only_layers", "moe_layer_freq", "no_rope_layers",
                  "cross_attention_layers", "dense_layers")
_SAMPLES: dict = {}  # (job key, layers) -> the cut job or None


def _layer_lists(job) -> tuple[dict, str | None, dict]:
    """(the job's config, its layer-count field, its per-layer lists), ``layer_types`` taken from the
    transformers config where the file leaves it to a default (Qwen3-Next's ``full_attention_interval``)."""
    import json

    cfg = json.loads(job.hf_config) if job.hf_config else {}
    name = next((k for k in LAYER_FIELDS if isinstance(cfg.get(k), int) and cfg[k] > 0), None)
    if name is None and isinstance(cfg.get("text_config"), dict):   # a composite config: its language model
        from gpucast.graph.serving_config import hf_config                  # (gpucast.graph.serving._text)

        cfg = dict(cfg["text_config"])
        cfg.setdefault("model_type", hf_config(job).model_type)
        name = next((k for k in LAYER_FIELDS if isinstance(cfg.get(k), int) and cfg[k] > 0), None)
    if name is None:
        return cfg, None, {}
    total = cfg[name]
    if "layer_types" not in cfg and total > 1:
        from gpucast.graph.serving_config import hf_config

        types = getattr(hf_config(job), "layer_types", None)
        if isinstance(types, list) and len(types) == total and len(set(types)) > 1:
            cfg = dict(cfg, layer_types=list(types))
    return cfg, name, {k: v for k, v in cfg.items() if isinstance(v, list) and len(v) == total and total > 1}


def layer_period(job) -> int | None:
    """The fewest layers ``P`` after which the model's per-layer lists repeat (1: its layers are alike), ``P``
    dividing the layer count; None when they do not repeat or a field makes some layers dense and others
    sparse (:data:`UNALIKE_FIELDS`)."""
    import json

    cfg, name, lists = _layer_lists(job)
    if name is None or any(cfg.get(f) for f in UNALIKE_FIELDS):
        return None
    total = cfg[name]
    keys = {k: [json.dumps(x, sort_keys=True) for x in v] for k, v in lists.items()}
    for p in range(1, total // 2 + 1):
        if total % p == 0 and all(v[i] == v[i % p] for v in keys.values() for i in range(total)):
            return p
    return None


def layer_sample(job, layers: int):
    """The job's model cut to its first ``layers`` layers (per-layer lists cut alike), or None unless its
    layers repeat with a period (:func:`layer_period`) that divides ``layers``. Memoised."""
    key = (job.key, layers)
    if key in _SAMPLES:
        return _SAMPLES[key]
    from gpucast.job import canonical_json

    period = layer_period(job)
    cut = None
    if period and layers % period == 0:
        cfg, name, lists = _layer_lists(job)
        small = dict(cfg, **{name: layers}, **{k: v[:layers] for k, v in lists.items()})
        # a composite config's language model is a model of its own type (Qwen3.5's qwen3_5_text)
        cut = job.with_(model=f"hf:{small.get('model_type') or job.model[3:]}", hf_config=canonical_json(small))
    _SAMPLES[key] = cut
    return cut
