"""The served model, resolved once: what a serving prediction asks of the model's graph, memoised per model.

A prediction of a served model asks the same things of it many times: its shape (layers, heads, experts, the
cache's dimensions), the K/V bytes a token takes at a cache dtype, the state a sequence holds, and the ops of
an engine iteration of a given shape (batch, new tokens, context, cache), for the deployment's memory, for the
iteration model's grids and for the training-style figures beside the serving table. :func:`served` resolves a
job's model once into a :class:`ServedModel` (keyed by the model as traced: its config and precision, not its
load or deployment) whose methods enter :mod:`gpucast.graph.serving` once per question and traced shape; every
module of :mod:`gpucast.estimate.serving` and :mod:`gpucast.api_serving` asks through it.

Not modelled here: anything; this is the one door to the graph.
"""

from __future__ import annotations

from collections import OrderedDict

SERVED_MAX = 8   # models kept (a deployment search asks of one model; its layer samples are models of their own)
_SERVED: OrderedDict = OrderedDict()


def model_job(job):
    """The job as far as its traces depend on it (the model and its precision): one memoised trace
    serves every deployment of the model, whatever its batch, load or engine settings."""
    return job.with_(batch_size=1, mode="infer", serve=None, parallel=None, gpus=1, optimizer="none")


class ServedModel:
    """One model's answers (module docstring); ``job`` is its :func:`model_job`."""

    def __init__(self, job):
        self.job = job
        self._shape: dict | None = None
        self._state: int | None = None
        self._kv: dict = {}
        self._traces: dict = {}

    @property
    def shape(self) -> dict:
        """:func:`gpucast.graph.serving.model_shape` of the model (shared: read it, do not change it)."""
        if self._shape is None:
            from gpucast.graph.serving import model_shape

            self._shape = model_shape(self.job)
        return self._shape

    def kv_bytes_per_token(self, dtype_bytes: float | None = None) -> int:
        """The whole model's K/V bytes a token at a cache element of ``dtype_bytes`` (None: the model's)."""
        got = self._kv.get(dtype_bytes)
        if got is None:
            from gpucast.graph.serving import kv_bytes_per_token

            got = self._kv[dtype_bytes] = kv_bytes_per_token(self.job, dtype_bytes)
        return got

    def state_bytes_per_sequence(self) -> int:
        """The bytes a running sequence's linear-attention layers hold, whatever its length."""
        if self._state is None:
            from gpucast.graph.serving import state_bytes_per_sequence

            self._state = state_bytes_per_sequence(self.job)
        return self._state

    def trace(self, batch: int, new_tokens: int, context: int, cache: str = "paged"):
        """:func:`gpucast.graph.serving.trace_iteration` of this shape (shared: read it, do not change it)."""
        key = (batch, new_tokens, context, cache)
        got = self._traces.get(key)
        if got is None:
            from gpucast.graph.serving import trace_iteration

            got = self._traces[key] = trace_iteration(self.job, batch, new_tokens, context, cache)
        return got


def served(job) -> ServedModel:
    """The :class:`ServedModel` of ``job``'s model (made on the first question, then shared)."""
    mj = model_job(job)
    key = mj.key
    got = _SERVED.get(key)
    if got is None:
        if len(_SERVED) >= SERVED_MAX:
            _SERVED.popitem(last=False)
        got = _SERVED[key] = ServedModel(mj)
    else:
        _SERVED.move_to_end(key)
    return got
