"""CUDA graphs for the training step's layers (``parallel.cuda_graphs``, gpucast.estimate.parallel.graphs).

Independent reasons: a graph replays its kernels without the host issuing them, so a graphed layer
costs the host one launch a direction and its ops nothing; the GPU runs the same kernels, so the
kernels' time is unchanged and only a step the host paces gets faster; Megatron-Core does not graph
a step whose sharding gathers weights each micro-batch, and graphs are a training feature.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpucast
from gpucast import Job
from gpucast.estimate.parallel.graphs import host_s
from gpucast.job import JobError


def test_a_graphed_layer_costs_one_launch_a_direction():
    host = np.full(10, 1.0)
    blocks = np.array([-1, 0, 0, 1, 1, -2, 1, 1, 0, 0])   # PRE, layers 0 and 1 forward, POST; backward 1, 0
    out = host_s(host, blocks, n_fwd=6, n_re=0, launch_s=0.1)
    assert out.tolist() == [1.0, 0.1, 0.0, 0.1, 0.0, 1.0, 0.1, 0.0, 0.1, 0.0]


CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=4, vocab_size=1000)


def _plan(config=CONFIG, seq_len=128, **par):
    job = Job.from_hf_config(config, batch_size=1, seq_len=seq_len, precision="bf16", optimizer="adamw", gpus=2,
                             parallel=dict(tensor=2, grad_accum=4, sharding="zero1") | par)
    return gpucast.predict(job, "h100")


def test_a_host_bound_step_gets_faster():
    on, off = _plan(cuda_graphs=True), _plan(cuda_graphs=False)
    assert on.plan["cuda_graphs"] is True and off.plan["cuda_graphs"] is False
    assert on.host_time_s < 0.5 * off.host_time_s
    assert on.step_time_s < off.step_time_s
    assert on.plan["framework_host_s"] < off.plan["framework_host_s"]


def test_a_step_the_kernels_pace_barely_moves():
    big = dict(CONFIG, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8)
    on, off = _plan(big, 4096, cuda_graphs=True), _plan(big, 4096, cuda_graphs=False)
    assert on.step_time_s == pytest.approx(off.step_time_s, rel=0.01)


@pytest.mark.parametrize("change", [dict(mode="infer", parallel=dict(tensor=2, cuda_graphs=True)),
                                    dict(parallel=dict(tensor=2, sharding="fsdp-full", cuda_graphs=True))])
def test_graphs_where_megatron_has_none_are_one_error_line(change):
    with pytest.raises(JobError, match="field 'parallel.cuda_graphs'") as err:
        kw = dict(batch_size=1, seq_len=128, precision="bf16", optimizer="adamw", gpus=4) | change
        gpucast.predict(Job.from_hf_config(CONFIG, **kw), "h100")
    assert "\n" not in str(err.value)
