"""DeepSeek sparse attention (DSA, DeepSeek-V3.2) as serving engines run it: an indexer, then top-k MLA.

DeepSeek-V3.2 keeps DeepSeek-V3's multi-head latent attention (MLA) and adds, per layer, a lightning
**indexer** (DeepSeek-AI, "DeepSeek-V3.2-Exp: boosting long-context efficiency with DeepSeek sparse
attention", 2025): ``index_n_heads`` small heads of ``index_head_dim`` score every cached token for each query
in FP8, and the attention then reads only each query's ``index_topk`` best tokens (2,048 in the released
config). The engines (vLLM's and SGLang's DSA backends, FlashMLA's sparse kernels) cache, per token and layer,
the MLA latent and the indexer's key (``index_head_dim`` FP8 values and one FP32 scale: :data:`INDEX_SCALE_BYTES`).

A serving trace builds the model as its dense sibling (:data:`SIBLINGS`: transformers' DeepSeek-V3, the same
weights but the indexer's; transformers' own V3.2 masks a dense attention eagerly, which is not what the
engines run), and the serving estimator adds what DSA changes (:mod:`gpucast.estimate.serving.sparse`): each
query attends at most ``index_topk`` keys (the window machinery's count of query-key pairs:
:func:`gpucast.graph.windows.chunk_share`), and the indexer's FP8 scores over every cached token plus its top-k
selection run as kernels of their own.

Not modelled: the indexer's projections (``wq_b``, ``wk``, ``weights_proj``: about 0.1 % of V3.2's weights)
in the weights and the dense part; vLLM's ``fp8_ds_mla`` cache layout (656 bytes a latent, its default for
V3.2: gpucast caches the latent at ``serve.kv_cache_dtype``). GLM-5 (``glm_moe_dsa``) is built as DeepSeek-V3 too,
its ``"shared"`` indexer layers (which reuse the previous layer's selection) costed as a share of the indexer's
work and keys (:func:`dims`).
"""

from __future__ import annotations

# Sparse-attention model types and the dense model transformers builds with the same attention weights.
# GLM-5 (glm_moe_dsa) keeps DeepSeek-V3's MLA and MoE layout (its config's fields are V3's).
SIBLINGS = {"deepseek_v32": "deepseek_v3", "glm_moe_dsa": "deepseek_v3"}
SPARSE_LAYER = "indexed_attention"
# The indexer key's scale: one FP32 value per cached token and layer (DeepSeek's reference index_k_scale_cache).
INDEX_SCALE_BYTES = 4
INDEX_KEY_BYTES = 1   # FP8 index keys


def traced_data(data: dict) -> dict:
    """A sparse model's config data as its dense sibling's (model type swapped, its indexed-attention layers
    full attention); any other config unchanged."""
    sibling = SIBLINGS.get(data.get("model_type"))
    if sibling is None:
        return data
    from gpucast import imports

    # the model's own config, its class defaults (GLM-5's one expert group, its indexer schedule) written out
    rest = {k: v for k, v in data.items() if k != "model_type"}
    full = imports.load("transformers").AutoConfig.for_model(data["model_type"], **rest).to_dict()
    out = dict({k: v for k, v in full.items() if not k.startswith("_") and k != "transformers_version"},
               model_type=sibling)
    if isinstance(out.get("layer_types"), list):
        out["layer_types"] = ["full_attention" if t == SPARSE_LAYER else t for t in out["layer_types"]]
    return out


def dims(cfg) -> dict | None:
    """``{'topk', 'heads', 'dim', 'share'}`` of a config's indexer; None without one. ``share``: the layers that
    run their own indexer (GLM-5's ``indexer_types``: a ``"shared"`` layer reuses the previous full layer's
    selection, with no index keys or scores of its own)."""
    topk = getattr(cfg, "index_topk", None)
    if not topk:
        return None
    kinds = list(getattr(cfg, "indexer_types", None) or ())
    share = sum(k == "full" for k in kinds) / len(kinds) if kinds else 1.0
    return {"topk": int(topk), "heads": int(cfg.index_n_heads), "dim": int(cfg.index_head_dim), "share": share}


def key_bytes(sparse: dict | None) -> float:
    """Bytes a token's indexer key takes in one layer's cache, over the layers (0 without an indexer)."""
    return (sparse["dim"] * INDEX_KEY_BYTES + INDEX_SCALE_BYTES) * sparse.get("share", 1.0) if sparse else 0
