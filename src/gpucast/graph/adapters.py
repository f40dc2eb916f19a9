"""LoRA and QLoRA on a built model: frozen base weights, trainable low-rank adapters.

``apply_adapter(model, adapter, precision)`` does to a model on the meta device what PEFT's
``get_peft_model`` (and, for QLoRA, transformers' 4-bit loading through bitsandbytes) does to a
real one, so a captured step shows the same ops and the same bytes:

* **Frozen base.** Every existing parameter stops requiring a gradient, so the tracer's
  optimizer, gradients and optimizer state cover the adapters only. The frozen weights are
  held in the compute dtype (bf16 under ``amp-bf16``, fp16 under ``amp-fp16``, fp32 otherwise):
  the models are built in fp32, but LoRA runs load the base with ``torch_dtype`` set to the
  half type they compute in (buffers, such as rotary frequencies, keep their dtype).
* **Adapters** (PEFT's ``lora.Linear``): every ``nn.Linear`` or GPT-2 ``Conv1D`` whose name
  matches a target pattern (``fnmatch`` on its last name or on the dotted path) becomes
  ``base(x) + B(A(x)) * alpha / r`` with ``A: in -> r`` and ``B: r -> out`` (no bias), in fp32
  (PEFT's ``autocast_adapter_dtype``), ``lora_alpha`` :data:`LORA_ALPHA` and no dropout
  (PEFT's defaults). As PEFT does, the input is cast to the adapter dtype before ``A`` and the
  sum back to the base output's dtype; over a 4-bit base (``lora.bnb.Linear4bit``) the base
  output is cloned first and the casts happen only outside autocast. Under autocast the
  adapters' matmuls still run in the half type (autocast casts them).
* **QLoRA.** Every ``nn.Linear``/``Conv1D`` becomes a :class:`gpucast.graph.nf4.Linear4bit`
  (NF4, double quantisation; costs and storage there) except those transformers' bitsandbytes
  integration keeps dense (``get_keys_to_not_convert`` when ``llm_int8_skip_modules`` is unset):
  the output embedding (``lm_head``), Linear layers whose weight is tied to another module, the
  module of the model's last parameter, and a model's ``_keep_in_fp32_modules``. Embeddings and
  norms are never quantised (bitsandbytes replaces Linear layers only); they stay frozen in the
  compute dtype.

Not modelled: ``prepare_model_for_kbit_training`` (it casts the dense frozen weights to fp32 and
turns on gradient checkpointing: set the job's recompute for the latter), LoRA on embeddings or
convolutions, ``nn.MultiheadAttention``'s ``out_proj`` (PEFT wraps the whole attention; its
Linear is skipped), DoRA and other variants, adapter dropout.
"""

from __future__ import annotations

import fnmatch

import torch
from torch import nn

from gpucast.graph.nf4 import Linear4bit

# PEFT LoraConfig defaults: lora_alpha=8 (scaling = alpha / r), lora_dropout=0.0.
LORA_ALPHA = 8
COMPUTE_DTYPES = {"fp8": torch.bfloat16, "mxfp8": torch.bfloat16, "nvfp4": torch.bfloat16, "amp-bf16": torch.bfloat16, "amp-fp16": torch.float16, "bf16": torch.bfloat16,
                  "fp16": torch.float16}
_SHOWN = 8  # Linear names listed when no target matches


class LoraLinear(nn.Module):
    """``base_layer(x) + lora_B(lora_A(x)) * scaling``, as PEFT's LoRA layers compute it."""

    def __init__(self, base_layer: nn.Module, in_features: int, out_features: int, rank: int,
                 autocast: bool) -> None:
        super().__init__()
        device = next(base_layer.parameters()).device
        self.base_layer = base_layer
        self.lora_A = nn.Linear(in_features, rank, bias=False, device=device, dtype=torch.float32)
        self.lora_B = nn.Linear(rank, out_features, bias=False, device=device, dtype=torch.float32)
        self.scaling = LORA_ALPHA / rank
        self.autocast = autocast
        self.quantized = isinstance(base_layer, Linear4bit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        adapter_dtype = self.lora_A.weight.dtype
        if self.quantized:  # peft/tuners/lora/bnb.py, Linear4bit.forward
            result = result.clone()
            if self.autocast:
                return result + self.lora_B(self.lora_A(x)) * self.scaling
            out = self.lora_B(self.lora_A(x.to(adapter_dtype))) * self.scaling
            return result + out.to(result.dtype)
        # peft/tuners/lora/layer.py, Linear.forward
        result_dtype = result.dtype
        result = result + self.lora_B(self.lora_A(x.to(adapter_dtype))) * self.scaling
        return result.to(result_dtype)


def apply_adapter(model: nn.Module, adapter, precision: str) -> nn.Module:
    """Freeze ``model``, quantise it for QLoRA, add the adapters (module docstring); returns it.

    ``adapter`` is a resolved :class:`gpucast.plan.Adapter` (``kind``, ``rank``, ``targets``).
    Raises ValueError when no Linear layer matches the targets."""
    dtype = COMPUTE_DTYPES.get(precision, torch.float32)
    linears = _linears(model)
    targets = [name for name in linears if _matches(name, adapter.targets)]
    if not targets:
        shown = list(dict.fromkeys(name.rsplit(".", 1)[-1] for name in linears))
        more = f" (and {len(shown) - _SHOWN} more)" if len(shown) > _SHOWN else ""
        raise ValueError(f"adapter targets {', '.join(adapter.targets)} match no Linear layer; the model's are "
                         f"named {', '.join(shown[:_SHOWN]) or 'nothing (it has none)'}{more}")
    for p in model.parameters():
        p.requires_grad_(False)
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
    if adapter.kind == "qlora":
        keep = _kept_dense(model, linears)
        for name, module in linears.items():
            if name not in keep:
                model.set_submodule(name, Linear4bit.from_dense(module, dtype))
    for name in targets:
        base = model.get_submodule(name)
        in_f, out_f = _features(linears[name])
        model.set_submodule(name, LoraLinear(base, in_f, out_f, adapter.rank, autocast=dtype != torch.float32))
    return model


def _conv1d_type():
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # transformers absent: no GPT-2-style layers to find
        return ()
    return (Conv1D,)


def _linears(model: nn.Module) -> dict[str, nn.Module]:
    """Dotted name -> the ``nn.Linear``/``Conv1D`` layers an adapter or 4-bit weights can replace.

    ``nn.MultiheadAttention`` reads its ``out_proj.weight`` directly, so that Linear is left out."""
    kinds = (nn.Linear,) + _conv1d_type()
    mha = {f"{name}.out_proj" if name else "out_proj" for name, m in model.named_modules()
           if isinstance(m, nn.MultiheadAttention)}
    return {name: m for name, m in model.named_modules() if isinstance(m, kinds) and name not in mha}


def _features(module: nn.Module) -> tuple[int, int]:
    """(in, out) of a Linear (weight out x in) or a Conv1D (weight in x out)."""
    rows, cols = module.weight.shape
    return (cols, rows) if isinstance(module, nn.Linear) else (rows, cols)


def _matches(name: str, patterns) -> bool:
    last = name.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatchcase(last, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def _kept_dense(model: nn.Module, linears: dict[str, nn.Module]) -> set[str]:
    """The Linear layers transformers' bitsandbytes integration leaves unquantised (module docstring)."""
    owners: dict[int, list[str]] = {}
    for name, m in model.named_modules():
        for p in m.parameters(recurse=False):
            owners.setdefault(id(p), []).append(name)
    keep = {name for names in owners.values() if len(names) > 1 for name in names}  # tied weights
    params = list(model.named_parameters())
    if params:
        keep.add(params[-1][0].rpartition(".")[0])  # the last module
    by_id = {id(m): name for name, m in model.named_modules()}
    for prefix, m in model.named_modules():
        out_emb = _output_embeddings(m)
        if out_emb is not None and id(out_emb) in by_id:
            keep.add(by_id[id(out_emb)])
        fp32 = getattr(m, "_keep_in_fp32_modules", None) or ()
        for name in linears:
            if prefix and not name.startswith(prefix + "."):
                continue
            rel = name[len(prefix) + 1:] if prefix else name
            if any(rel == pat or rel.endswith("." + pat) for pat in fp32):
                keep.add(name)
    return keep & set(linears)


def _output_embeddings(module: nn.Module) -> nn.Module | None:
    """A transformers model's output layer (``get_output_embeddings``), or None."""
    get = getattr(module, "get_output_embeddings", None)
    if not callable(get):
        return None
    try:
        out = get()
    except (NotImplementedError, AttributeError):  # a model class without an output layer
        return None
    return out if isinstance(out, nn.Module) else None


def parameter_count(model: nn.Module) -> int:
    """Parameters the model stands for, counting a 4-bit weight as its ``in x out`` values
    (``sum(p.numel())`` counts its packed bytes, half as many, as it does for bitsandbytes)."""
    packed = {id(m.weight): m.in_features * m.out_features for m in model.modules() if isinstance(m, Linear4bit)}
    return sum(packed.get(id(p), p.numel()) for p in model.parameters())
