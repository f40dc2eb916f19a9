"""The requests a serving run sees: their prompt and output lengths and when they arrive.

Lengths are fixed or drawn (``lognormal:MEAN,SIGMA``) with a seed from the job's key, so one job always sees the
same requests; arrivals are all at once (a static batch or a closed loop's first sends) or Poisson at
``serve.request_rate``. A prefix-cache hit rate shortens every prompt by its share (the cached tokens are not
prefilled). A drawn length's tail past the context is cut to it, as a client truncates its prompt; a fixed
length past it is an error naming the engine's override.

Not modelled: arrival traces read from a file, prompts that share prefixes unevenly.
"""

from __future__ import annotations

import math

import numpy as np

from gpucast.estimate.serving.run import Requests
from gpucast.job import JobError
from gpucast.serving import Serve, parse_length

DEFAULT_OUTPUT_LEN = 256
DEFAULT_INPUT_LEN = 1024
DEFAULT_STREAM = 1000  # requests of a Poisson run unless num_requests says otherwise
CLOSED_ROUNDS = 10     # requests of a closed loop: 10 per client unless num_requests says otherwise


def _lengths(spec, default: int, n: int, rng) -> np.ndarray:
    kind, mean, sigma = parse_length(spec if spec is not None else default, "length")
    if kind == "fixed" or sigma == 0:
        return np.full(n, int(round(mean)), dtype=np.int64)
    mu = math.log(mean) - sigma * sigma / 2  # a lognormal whose mean is ``mean``
    return np.maximum(1, np.round(rng.lognormal(mu, sigma, n))).astype(np.int64)


# How each engine serves requests longer than the model's configured context (the error names it).
LONGER_CONTEXT = {
    "vllm": "--max-model-len with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    "sglang": "--context-length with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    "trtllm": "max_seq_len",
    "hf": "max_length (transformers generates past max_position_embeddings without a check)",
}


def requests_of(job, serve: Serve, max_context: int) -> Requests:
    """The run's requests: lengths (fixed, or drawn with a seed from the job's key) and arrivals;
    ``max_context`` the longest request the engine takes (``serve.max_model_len``, else the model's)."""
    rng = np.random.default_rng(int(job.key[:8], 16))
    load = serve.load
    if load == "static":
        n = job.batch_size
    elif load == "closed":
        n = serve.num_requests or min(100_000, CLOSED_ROUNDS * serve.concurrency)
    else:
        n = serve.num_requests or DEFAULT_STREAM
    prompt = _lengths(serve.input_len, DEFAULT_INPUT_LEN, n, rng)
    output = _lengths(serve.output_len, DEFAULT_OUTPUT_LEN, n, rng)
    drawn = any(isinstance(v, str) for v in (serve.input_len, serve.output_len))
    clipped = 0
    if drawn:  # a drawn length's tail past the context is cut to it, as a client truncates its prompt
        over = prompt + output > max_context
        clipped = int(over.sum())
        output = np.minimum(output, max(1, max_context // 2))
        prompt = np.maximum(1, np.minimum(prompt, max_context - output))
    longest = int((prompt + output).max())
    if longest > max_context:
        what = (f"serve.max_model_len ({max_context})" if serve.max_model_len else
                f"the model's {max_context} (set serve.max_model_len to serve longer requests, as the engine's "
                f"{LONGER_CONTEXT.get(serve.engine or 'vllm', 'setting')} does)")
        raise JobError(f"a request of {int(prompt.max())} prompt tokens and {int(output.max())} generated ones "
                       f"needs {longest} tokens of context, more than {what}")
    hit = serve.prefix_hit_rate or 0.0
    if hit:
        prompt = np.maximum(1, np.round(prompt * (1 - hit))).astype(np.int64)
    if load == "poisson":
        arrival = np.cumsum(rng.exponential(1.0 / serve.request_rate, n))
        arrival -= arrival[0]
    else:
        arrival = np.zeros(n)
    req = Requests(arrival, prompt, output)
    req.clipped = clipped
    return req
