"""Hugging Face architectures from a config alone: random weights on the meta device, no hub.

``resolve_config(x)`` turns what a user has into a config dict with a ``model_type``:

* a ``config.json`` path (read as JSON; nothing else in its folder is opened);
* a dict, or a ``transformers.PretrainedConfig``;
* the name of a transformers config class (``"BertConfig"``) or a model type (``"bert"``):
  that class's defaults (``to_diff_dict``), which are the architecture's reference size.

A string that is neither (e.g. a hub id like ``org/model``) is an error: gpucast never
downloads. A few remote-code architectures are read as the transformers one they run as
(:mod:`gpucast.graph.hf_remote`: DeciLM as vLLM's Llama with uniform K/V heads). The list of model types and a named class's defaults come from transformers once per
installed version: they are remembered in gpucast's disk cache (:func:`_remembered`), so making a
job from a config (and a ``gpucast predict`` answered from the prediction cache) imports neither
transformers nor torch. ``transformers_version`` and ``_name_or_path`` are dropped, so a config's key does
not change with the library version that wrote it.

``factories(job)`` builds the model class the config names in ``architectures`` (the first one
transformers has), else the first of masked-LM, causal-LM, seq2seq-LM, image-classification
and base model that transformers maps this ``model_type`` to (encoder-decoder models prefer
seq2seq). Attention is HF's SDPA path under gpucast's registered name (see
``gpucast.zoo.transformers_lm``), falling back to ``eager`` for architectures without SDPA.
Inputs follow the model's ``main_input_name``: token ids ``(batch, seq_len)`` (plus decoder
ids of the same length for encoder-decoders), images ``(batch, channels, size, size)`` from
the config, audio samples ``(batch, seq_len)``, or log-mel features. Loss: cross-entropy on
logits (per token for language models), else the mean of squares of the first output.

Not modelled: a checkpoint's actual weights (only shapes matter), tokenizers, generation.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from gpucast import imports
from gpucast.faults import internal_cause
from gpucast.job import JobError
from gpucast.model_sources import Built, Source, register

_DROP_KEYS = ("transformers_version", "_name_or_path", "_commit_hash")
_DEFAULT_SEQ_LEN = 512
_DEFAULT_AUDIO_SAMPLES = 16_000  # one second at 16 kHz
_WHISPER_FRAMES = 3000  # 30 s of 10 ms log-mel frames (Whisper's fixed input)
_ATTN = "gpucast_sdpa"


def _import_model_types() -> dict[str, str]:
    # imports.load takes the import lock only while the module is not yet imported, so the
    # service's event loop, making a job from a config, waits for no other thread's build after that.
    return dict(imports.load("transformers.models.auto.configuration_auto").CONFIG_MAPPING_NAMES)


def _auto_digest() -> str | None:
    """A digest of transformers' version and of the sources of its ``models/auto`` package (where
    the model types are listed), found without importing transformers; None if not found."""
    import hashlib
    import importlib.util
    from importlib import metadata

    try:
        spec = importlib.util.find_spec("transformers")
        where = Path(next(iter(spec.submodule_search_locations))) / "models" / "auto"
        h = hashlib.sha256(f"transformers=={metadata.version('transformers')}\0".encode())
        files = sorted(where.glob("*.py"))
        for f in files:
            h.update(f"{f.name}\0".encode() + f.read_bytes())
    except (ImportError, AttributeError, TypeError, StopIteration, OSError, ValueError, metadata.PackageNotFoundError):
        return None
    return h.hexdigest() if files else None


_TYPES: dict[str, str] | None = None
_DIGEST: list = []  # [the digest of _auto_digest()] once computed


def _remembered(name: str, compute):
    """``compute()``, kept in gpucast's disk cache (:func:`gpucast.disk_cache.remembered`) under a
    digest of the installed transformers' sources; computed each time where none is found."""
    if not _DIGEST:
        _DIGEST.append(_auto_digest())
    if _DIGEST[0] is None:
        return compute()
    from gpucast import disk_cache

    return disk_cache.remembered(name, _DIGEST[0], compute)


def _model_types() -> dict[str, str]:
    """The model types transformers knows (``bert`` -> ``BertConfig``). Importing transformers to
    list them takes seconds (it imports torch), so the list is remembered on disk
    (:func:`_remembered`): a config file asked about again is checked, keyed and answered from the
    prediction cache without importing transformers."""
    global _TYPES
    if _TYPES is None:
        _TYPES = dict(_remembered("hf-model-types", _import_model_types))
    return _TYPES


def _import_defaults(model_type: str) -> dict:
    with imports.LOCK:
        return imports.load("transformers").AutoConfig.for_model(model_type).to_diff_dict()


def _defaults(model_type: str) -> dict:
    """The config class's defaults of a known ``model_type`` (remembered on disk as the list of
    types is, so ``--hf-config bert`` asked again imports no transformers either)."""
    return dict(_remembered(f"hf-defaults-{model_type}", lambda: _import_defaults(model_type)))


def _unknown(name: str) -> JobError:
    types = _model_types()
    candidates = list(types) + list(types.values())
    close = difflib.get_close_matches(name, candidates, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return JobError(f"unknown Hugging Face architecture {name!r}{hint}; pass a config.json, a transformers "
                    f"config class name or a model type (gpucast never downloads from the hub)")


def resolve_config(config) -> dict:
    """A config dict with ``model_type`` (see module docstring); a JobError otherwise."""
    if isinstance(config, (str, os.PathLike)) and (Path(config).suffix.lower() == ".json" or Path(config).is_file()):
        path = Path(config)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise JobError(f"cannot read Hugging Face config {str(path)!r}: {exc.strerror}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise JobError(f"Hugging Face config {str(path)!r} is not valid JSON: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise JobError(f"Hugging Face config {str(path)!r} must be a JSON object")
        return _check(data, str(path))
    if isinstance(config, dict):
        return _check(dict(config), "the config")
    if isinstance(config, str):
        types = _model_types()
        by_class = {v: k for k, v in types.items()}
        model_type = config if config in types else by_class.get(config)
        if model_type is None:
            raise _unknown(config)
        data = _defaults(model_type)
        data["model_type"] = model_type
        return _check(data, config)
    if isinstance(config, imports.load("transformers").PretrainedConfig):
        return _check(config.to_diff_dict() | {"model_type": config.model_type}, type(config).__name__)
    raise JobError(f"hf config must be a config.json path, a dict, a PretrainedConfig or a name, "
                   f"got {type(config).__name__}")


def _check(data: dict, origin: str) -> dict:
    from gpucast.graph.hf_remote import runs_as

    data = runs_as(data)  # remote-code architectures as the transformers one they run as
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise JobError(f"Hugging Face config {origin}: no 'model_type' (which architecture is it?)")
    if model_type not in _model_types():
        raise _unknown(model_type)
    for k in _DROP_KEYS:
        data.pop(k, None)
    return data


def _model_class(cfg):
    transformers = imports.load("transformers")
    ma = imports.load("transformers.models.auto.modeling_auto")

    for arch in cfg.architectures or ():
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    t = cfg.model_type
    order = [ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES, ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
             ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
             ma.MODEL_MAPPING_NAMES]
    if getattr(cfg, "is_encoder_decoder", False):
        order.insert(0, order.pop(2))
    for mapping in order:
        name = mapping.get(t)
        if isinstance(name, (tuple, list)):
            name = name[0]
        cls = getattr(transformers, name, None) if name else None
        if cls is not None and mapping is ma.MODEL_MAPPING_NAMES and name.endswith("TextModel") \
                and getattr(cfg, "vocab_size", None):   # a VLM's decoder alone: with its head (gpucast.graph.text_lm)
            from gpucast.graph.text_lm import causal_lm

            return causal_lm(cls)
        if cls is not None:
            return cls
    raise JobError(f"Hugging Face model type {t!r} has no model class gpucast can build")


def _config(job):
    from gpucast.graph import sparse_attention

    transformers = imports.load("transformers")
    # a sparse-attention model (DeepSeek-V3.2, GLM-5) as its dense sibling: transformers' own masks a dense
    # attention eagerly and needs the mask a fused path leaves out (gpucast.graph.sparse_attention)
    try:
        full = sparse_attention.traced_data(json.loads(job.hf_config))
        data = {k: v for k, v in full.items() if k != "model_type"}
        return transformers.AutoConfig.for_model(full["model_type"], **data)
    except Exception as exc:  # a config transformers rejects; gpucast's own faults are not the config's
        if internal_cause(exc) is not None:
            raise
        raise JobError(f"Hugging Face config for {job.model!r} is invalid: {str(exc).splitlines()[0]}") from None


def _build(cfg):
    transformers = imports.load("transformers")
    sdpa = imports.load("transformers.integrations.sdpa_attention")
    transformers.AttentionInterface.register(_ATTN, sdpa.sdpa_attention_forward)
    cls = _model_class(cfg)
    want = getattr(cls, "config_class", None)
    if isinstance(want, type) and not isinstance(cfg, want) and hasattr(cfg, "get_text_config"):
        text = cfg.get_text_config()   # a composite config without architectures: its language model's class
        if isinstance(text, want):
            cfg = text
    cfg._attn_implementation = _ATTN
    try:
        model = cls(cfg)
    except ValueError:  # an architecture without SDPA support
        cfg._attn_implementation = "eager"
        model = cls(cfg)
    from gpucast.graph import routed_experts

    routed_experts.route(model)   # MoE layers that run every expert on every token, as frameworks route them
    return model


def _image_size(cfg) -> int:
    size = getattr(cfg, "image_size", None) or getattr(getattr(cfg, "vision_config", None), "image_size", 224)
    return size[0] if isinstance(size, (list, tuple)) else int(size)


def factories(job):
    import torch
    from torch import nn

    from gpucast.graph import linear_attention, linear_attention_backward  # noqa: F401  (the fused ops' backwards)
    from gpucast.zoo.base import default_loss, first_tensor

    cfg = _config(job)
    main = getattr(_model_class(cfg), "main_input_name", "input_ids")
    is_seq2seq = bool(getattr(cfg, "is_encoder_decoder", False))
    seq_len = job.seq_len
    vocab = getattr(cfg, "vocab_size", None) or 2

    names: list[str] = []
    if main == "input_ids":
        seq_len = seq_len or min(_DEFAULT_SEQ_LEN, getattr(cfg, "max_position_embeddings", None) or
                                 getattr(cfg, "n_positions", None) or _DEFAULT_SEQ_LEN)
        names = ["input_ids"] + (["decoder_input_ids"] if is_seq2seq else [])
    elif main == "pixel_values":
        names = ["pixel_values"]
    elif main == "input_values":
        seq_len = seq_len or _DEFAULT_AUDIO_SAMPLES
        names = ["input_values"]
    elif main == "input_features":
        names = ["input_features"] + (["decoder_input_ids"] if is_seq2seq else [])
        seq_len = seq_len or 448 if is_seq2seq else seq_len
    else:
        raise JobError(f"Hugging Face model {job.model!r} takes {main!r}, an input gpucast cannot make")

    def input_fn(batch_size: int):
        out = []
        for name in names:
            if name in ("input_ids", "decoder_input_ids"):
                out.append(torch.randint(0, vocab, (batch_size, seq_len)))
            elif name == "pixel_values":
                size = job.input_shape or (getattr(cfg, "num_channels", 3), _image_size(cfg), _image_size(cfg))
                out.append(torch.randn((batch_size,) + tuple(size)))
            elif name == "input_values":
                out.append(torch.randn(batch_size, seq_len))
            else:  # input_features (log-mel)
                out.append(torch.randn(batch_size, getattr(cfg, "num_mel_bins", 80), _WHISPER_FRAMES))
        return tuple(out)

    class HFModel(nn.Module):
        """Passes the positional inputs to the HF model by name (no cache, no labels)."""

        def __init__(self):
            super().__init__()
            self.model = _build(cfg)
            self.fused = linear_attention.patch_model(self.model)   # delta-nets, KDA, Mamba-2 (linear_attention)

        def forward(self, *inputs):
            kwargs = dict(zip(names, inputs))
            if "use_cache" in self.model.forward.__code__.co_varnames:
                kwargs["use_cache"] = False
            if not (self.fused and inputs and inputs[0].device.type == "meta"):   # a real GPU runs transformers'
                return self.model(**kwargs)                                       # own (hub or torch) kernels
            token = linear_attention.ACTIVE.set(linear_attention.STATELESS)
            try:
                return self.model(**kwargs)
            finally:
                linear_attention.ACTIVE.reset(token)

    def loss_fn(output, inputs):
        import torch.nn.functional as F

        logits = first_tensor(output)
        if logits.dim() in (2, 3) and logits.shape[-1] > 1:
            flat = logits.float().reshape(-1, logits.shape[-1])
            target = torch.randint(0, logits.shape[-1], (flat.shape[0],), device=logits.device)
            return F.cross_entropy(flat, target)
        return default_loss(output, inputs)

    return Built(HFModel, input_fn, loss_fn)


register(Source("hf", factories, resolve=resolve_config))
