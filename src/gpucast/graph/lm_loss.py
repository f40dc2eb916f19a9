"""A language model's loss as trainers compute it (``stack.loss``): the logits upcast, one fused
kernel over the logits, or the logits never held whole.

A language model's last layer, the head (``get_output_embeddings()``: a ``Linear`` of
``hidden -> vocabulary``, often tied to the input embeddings), writes ``tokens x vocabulary``
logits: for a 2,048-token micro-batch of 8 and a 50k vocabulary, 0.8 G values, more than the rest of
a small model's activations. How the trainer turns them into a loss decides what the step holds:

* ``upcast`` (transformers' own loss, and what a zoo or Hugging Face language model's capture does
  with ``stack.loss`` unset): the logits are copied to fp32 and PyTorch's cross-entropy runs on the
  copy; the fp32 log-softmax is saved for the backward, beside the logits in the compute dtype
  (about 6 bytes per token and vocabulary entry at bf16).
* ``fused``: one cross-entropy kernel reads the logits in the compute dtype once, saves them and
  each row's log-sum-exp, and its backward rewrites them in place as the gradient (flash-attn's
  ``CrossEntropyLoss`` with ``inplace_backward``, llm-foundry's default ``loss_fn:
  fused_crossentropy``; Megatron-LM's fused vocab-parallel cross-entropy works the same way): about
  2 bytes per entry at bf16 and two passes over them.
* ``chunked``: the head and the loss fused and taken in chunks of tokens (Liger-Kernel's
  ``LigerFusedLinearCrossEntropy``; Apple's Cut Cross-Entropy avoids the chunk's logits too): per
  chunk, the chunk's logits are computed, a kernel turns them into their gradient in place, and the
  gradients of the hidden states and of the head's weight are accumulated in the forward; the
  backward only scales them. The whole logits never exist; the chunk size is Liger's
  (:func:`liger_chunk`).

:func:`replace` applies ``fused`` or ``chunked`` to a model at capture time: it finds the head,
makes the model return what the head was given (``chunked``) or its logits (``fused``), and gives the
loss that stands for the trainer's kernels, built from aten ops whose FLOPs, bytes and kernel
counts are those kernels' (one reduction for the fused forward, one softmax-like pass for the
in-place gradient, the chunk GEMMs). ``upcast`` is the capture's ordinary path.

Not modelled: label smoothing, ignored (padding) tokens, z-loss, the vocabulary split across
tensor-parallel ranks (the plan divides the head's work by the degree like any GEMM), Cut
Cross-Entropy's blockwise kernel (taken as ``chunked``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LossError(ValueError):
    """``stack.loss`` asks for something this model cannot do (one line)."""


def output_head(model: nn.Module) -> nn.Linear | None:
    """The model's head (``get_output_embeddings()`` of the first Hugging Face module in it that has
    one and whose head is a ``Linear``), or None."""
    for module in model.modules():
        get = getattr(module, "get_output_embeddings", None)
        if callable(get):
            head = get()
            if isinstance(head, nn.Linear):
                return head
    return None


def liger_chunk(tokens: int, hidden: int, vocab: int) -> int:
    """Liger-Kernel's chunk size for the fused linear cross-entropy: the tokens split into
    ``ceil(vocab / hidden)`` chunks, rounded up to a power of two (``fused_linear_cross_entropy.py``:
    ``inc_factor = triton.cdiv(V, H)``, ``chunk_size = triton.next_power_of_2(triton.cdiv(BT, inc_factor))``)."""
    per = math.ceil(tokens / max(1, math.ceil(vocab / hidden)))
    return 1 << max(0, (per - 1).bit_length())


class _Fused(torch.autograd.Function):
    """One cross-entropy kernel over logits in their own dtype (see the module docstring)."""

    @staticmethod
    def forward(ctx, logits, target):
        lse = torch.amax(logits, dim=-1)  # the kernel's one pass over the logits: each row's log-sum-exp
        picked = torch.gather(logits, -1, target.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(logits, lse)
        return (lse.float() - picked.float()).mean()

    @staticmethod
    def backward(ctx, grad):
        logits, _ = ctx.saved_tensors
        # In place: softmax(logits) - one_hot, scaled, written over the saved logits.
        return torch.ops.aten._softmax.out(logits, -1, False, out=logits), None


class _Chunked(torch.autograd.Function):
    """The head and the loss, fused and chunked (see the module docstring)."""

    @staticmethod
    def forward(ctx, hidden, weight, chunk):
        tokens = hidden.shape[0]
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, tokens, chunk):
            h = hidden[start:start + chunk]
            logits = h @ weight.t()
            torch.ops.aten._softmax.out(logits, -1, False, out=logits)  # loss and gradient in place
            grad_hidden[start:start + chunk] = logits @ weight
            if grad_weight is not None:
                torch.addmm(grad_weight, logits.t(), h, out=grad_weight)  # as Liger accumulates it
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss

    @staticmethod
    def backward(ctx, grad):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (grad_hidden.mul_(grad), None if grad_weight is None else grad_weight.mul_(grad), None)


def _targets(rows: int, vocab: int, device) -> torch.Tensor:
    return torch.randint(0, vocab, (rows,), device=device)


def replace(model: nn.Module, how: str, first_tensor, amp_dtype: torch.dtype | None = None
            ) -> tuple[nn.Module, object]:
    """(the model, a loss function ``(output, inputs) -> scalar``) that compute the language model's
    loss the ``how`` way (``fused`` or ``chunked``); ``first_tensor(output)`` reads the logits (or,
    for ``chunked``, the hidden states) from the model's output; ``amp_dtype``: the autocast dtype
    the head's GEMMs run in under ``amp-*`` (None: the weights' own). :class:`LossError` when the
    model has no ``Linear`` head."""
    if how not in ("fused", "chunked"):
        raise ValueError(f"replace() takes 'fused' or 'chunked', got {how!r}")
    head = output_head(model)
    if head is None:
        raise LossError(f"stack.loss={how} applies to language models (a Hugging Face model whose "
                        f"get_output_embeddings() is a Linear head); this model has none")
    if how == "fused":
        def fused_loss(output, inputs):
            logits = first_tensor(output)
            flat = logits.reshape(-1, logits.shape[-1])
            return _Fused.apply(flat, _targets(flat.shape[0], flat.shape[-1], flat.device))

        return model, fused_loss

    weight = head.weight
    head.forward = lambda x: x  # the model now returns what its head is given: the hidden states

    def chunked_loss(output, inputs):
        hidden = first_tensor(output)
        dtype = amp_dtype or weight.dtype  # under autocast the head's GEMMs run in the autocast dtype
        flat = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
        w = weight.to(dtype)
        chunk = liger_chunk(flat.shape[0], flat.shape[1], weight.shape[0])
        return _Chunked.apply(flat, w, chunk)

    return model, chunked_loss
