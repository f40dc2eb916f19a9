"""The zoo's contract: what a named workload is and how gpucast builds it.

A :class:`Workload` is a recipe, not a model: ``model_fn(spec)`` builds the
``nn.Module`` and ``input_fn(spec, batch_size)`` builds the tuple of input tensors
the module's ``forward`` takes. gpucast calls both under the meta device, so a
builder must only *construct* (no weight downloads, no data, no ``.item()``).
``loss_fn(output, inputs)`` turns the forward's output into the scalar that
training back-propagates; ``None`` means the default loss of
:func:`default_loss`.

What is modelled: the architecture, its input shapes and dtypes, the loss a
trainer of that family uses. What is not: pretrained weights, real data. How the typical
script feeds the model and runs its loop is the workload's ``data``/``loop``
(:mod:`gpucast.zoo.recipes`), costed by ``gpucast.estimate.loader``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

FAMILIES = ("cnn", "rnn", "transformer", "gan", "recsys", "pointnet", "rl", "mlp")
SOURCES = ("torchvision", "transformers", "gpucast")


@dataclass(frozen=True)
class WorkloadSpec:
    """The shape knobs a job may override for a workload.

    ``input_shape`` is the per-sample shape (without the batch dimension), e.g.
    ``(3, 224, 224)`` for an image model or ``(1024, 3)`` for a point cloud.
    ``seq_len`` is the token/time-step count for sequence models.
    """

    input_shape: tuple[int, ...] | None = None
    seq_len: int | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    family: str
    source: str
    description: str
    model_fn: Callable[[WorkloadSpec], Any]
    input_fn: Callable[[WorkloadSpec, int], tuple]
    loss_fn: Callable[[Any, tuple], Any] | None = None
    default_batch_size: int = 32
    default_input_shape: tuple[int, ...] | None = None
    default_seq_len: int | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    # The typical script's data source and loop (gpucast.surroundings.Data / Loop); filled from
    # gpucast.zoo.recipes at registration when a workload does not declare its own.
    data: Any = None
    loop: Any = None
    script: str = ""

    def resolve(self, input_shape=None, seq_len=None) -> WorkloadSpec:
        """The spec with the job's overrides applied over this workload's defaults."""
        return WorkloadSpec(
            input_shape=tuple(input_shape) if input_shape is not None else self.default_input_shape,
            seq_len=seq_len if seq_len is not None else self.default_seq_len,
        )

    @property
    def default_input(self) -> str:
        """Human-readable default input, for `gpucast zoo`."""
        parts = []
        if self.default_input_shape is not None:
            parts.append("x".join(str(d) for d in self.default_input_shape))
        if self.default_seq_len is not None:
            parts.append(f"seq {self.default_seq_len}")
        return ", ".join(parts) or "-"


def first_tensor(output):
    """The first floating tensor in a model output (tensor, tuple, dict or HF ModelOutput)."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict):
        output = tuple(output.values())
    if isinstance(output, (tuple, list)):
        for item in output:
            found = first_tensor(item) if not isinstance(item, torch.Tensor) else item
            if isinstance(found, torch.Tensor) and found.is_floating_point():
                return found
    raise TypeError(f"model output of type {type(output).__name__} holds no floating tensor")


def default_loss(output, inputs):
    """The documented default loss for a module with no loss of its own.

    Mean of the squares of the first floating output tensor (an MSE against
    zeros): one element-wise kernel and one reduction, the cost of most real
    regression or classification losses, and a gradient that reaches every
    output element. It is computed in fp32, as autocast does for losses.
    """
    out = first_tensor(output)
    return out.float().pow(2).mean()


def classification_loss(output, inputs):
    """Cross-entropy of the first floating output ``(N, C)`` against random class targets.

    The loss of every classifier in the zoo (image, point-cloud, MLP); computed in fp32.
    """
    import torch
    import torch.nn.functional as F

    logits = first_tensor(output).float()
    target = torch.randint(0, logits.shape[-1], logits.shape[:-1], device=logits.device)
    return F.cross_entropy(logits, target)


def next_token_loss(output, inputs, stream: int = 0):
    """Language-model cross-entropy: logits ``(N, T, V)`` at position t predict token t+1 of
    ``inputs[stream]`` (the token ids; a seq2seq model's target stream), as LM trainers shift
    labels; computed in fp32. Use ``functools.partial(next_token_loss, stream=i)`` for i > 0."""
    import torch.nn.functional as F

    logits = first_tensor(output)[:, :-1].float()
    labels = inputs[stream][:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def token_input(vocab: int, streams: int = 1):
    """An ``input_fn`` giving ``streams`` tensors of random token ids ``(batch, seq_len)``
    (one for an LM; source and target for a translation model)."""

    def input_fn(spec: WorkloadSpec, batch_size: int):
        import torch

        return tuple(torch.randint(0, vocab, (batch_size, spec.seq_len), dtype=torch.long)
                     for _ in range(streams))

    return input_fn


def host_read(t) -> float:
    """The host reads a value of a device tensor (a script's ``.item()`` or ``.cpu().numpy()`` of
    a GPU result): on CUDA a sync; while gpucast captures a step, the recorded sync op
    (``_local_scalar_dense``, which the capture answers with 0). On the meta device outside a
    capture there is no value to read: 0."""
    try:
        return t.item()
    except RuntimeError:
        if t.device.type == "meta":
            return 0
        raise


def after_backward(model, step):
    """Attach a script's per-step work between ``loss.backward()`` and the next step that is not
    a ``Job.optimizer`` (gradient clipping, a plain SGD update): ``step(params)`` runs, without
    autograd, once per backward when every trainable parameter's gradient has been accumulated
    (post-accumulate-grad hooks). Returns ``model``.

    gpucast's capture records these ops in the backward phase, where it prices them as issued by
    the autograd engine (a few us each); a script issues them from Python, which costs a little
    more per op. For fp32 jobs with ``optimizer="none"`` (the step is the script's whole update):
    under amp-fp16 they would run on the scaled gradients, before GradScaler's unscale."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    seen = {"n": 0}

    def hook(_param) -> None:
        seen["n"] += 1
        if seen["n"] == len(params):
            seen["n"] = 0
            with torch.no_grad():
                step(params)

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    return model
