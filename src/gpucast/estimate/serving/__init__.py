"""What an LLM deployment serves: time to first token, time per output token, throughput, KV capacity.

For a job with ``mode: serve`` (:class:`gpucast.serving.Serve`): the requests (:mod:`.requests`), the engine
(:mod:`.engines`), what each rank keeps (:mod:`.memory`) and the cost of one iteration from the model's traced
forward (:mod:`.iteration`), resolved per layout (:mod:`.deploy`); the engine's scheduler run over the requests
(:mod:`.run`) on every replica and stream (:mod:`.replicas`); the figures a benchmark client reports
(:mod:`.figures`). :func:`predict_serving` (:mod:`.predict`) returns ``Prediction.serving``, whose keys are listed
in :data:`KEYS`. What they ask of the model's graph goes through one resolved model (:mod:`.served`).

How the deployment spans its GPUs (tensor-parallel ranks, pipeline stages and their streams of batches, replicas
behind a round-robin load balancer, expert parallelism, attention data parallelism) is :mod:`.stages` and
:mod:`.experts`; speculative decoding :mod:`.speculative`; separate prefill and decode instances :mod:`.disagg`.
Not modelled: load balancers that route by load or prefix.
"""

from gpucast.estimate.serving.predict import KEYS, decode_step, predict_serving

__all__ = ["KEYS", "decode_step", "predict_serving"]
