"""What a serving benchmark reports (gpucast.estimate.serving.figures): TTFT/TPOT/ITL means and
percentiles, throughput per GPU and per user. Expected values from hand-worked runs and from an identity
of continuous batching (a request's token gaps sum to its decode time), not from the code's output."""

from __future__ import annotations

import numpy as np
import pytest

from gpucast.estimate.serving.figures import figures, weighted_quantile
from gpucast.estimate.serving.run import Requests, simulate


def test_two_requests_worked_by_hand():
    arrival, first, finish = np.array([0.0, 1.0]), np.array([1.0, 3.0]), np.array([3.0, 7.0])
    output = np.array([3, 5])
    f = figures(arrival, first, finish, output, np.array([1.0, 1.0]), np.array([2.0, 4.0]), gpus=2)
    assert f["ttft_mean_s"] == pytest.approx(1.5) and f["ttft_s"] == pytest.approx(1.5)   # 1 and 2
    assert f["tpot_mean_s"] == pytest.approx(1.0)            # (3-1)/2 and (7-3)/4
    assert f["latency_s"] == pytest.approx(7.0)              # first arrival to last finish
    assert f["output_tokens_per_s"] == pytest.approx(8 / 7)
    assert f["output_tokens_per_s_per_gpu"] == pytest.approx(4 / 7)
    assert f["output_tokens_per_s_per_user"] == pytest.approx(1.0)   # 1 / TPOT, averaged
    assert f["requests_per_s"] == pytest.approx(2 / 7) and f["finished"] == 2


def test_unfinished_and_single_token_requests_are_left_out_where_they_mean_nothing():
    arrival = np.zeros(3)
    first, finish = np.array([1.0, 1.0, np.nan]), np.array([1.0, 5.0, np.nan])
    f = figures(arrival, first, finish, np.array([1, 5, 9]), None, None, gpus=1)
    assert f["finished"] == 2 and f["ttft_mean_s"] == pytest.approx(1.0)
    assert f["tpot_mean_s"] == pytest.approx(1.0)            # only the 5-token request has gaps


def test_weighted_quantile_counts_each_value_its_weight():
    v = np.array([3.0, 1.0, 2.0])
    assert weighted_quantile(v, np.array([98.0, 1.0, 1.0]), 50) == 3.0
    assert weighted_quantile(v, np.array([1.0, 98.0, 1.0]), 50) == 1.0
    assert weighted_quantile(v, np.array([1.0, 98.0, 1.0]), 99) == 2.0   # 99 % of the weight is reached at 2


def test_itl_mean_is_the_decode_time_over_the_gaps_of_a_continuous_run():
    # a toy iteration cost (10 ms + 20 us a token): each request's gaps sum to finish - first token, so
    # the gap-weighted mean is sum(finish - first) / sum(output - 1) when nothing is preempted
    rng = np.random.default_rng(0)
    n = 200
    req = Requests(np.cumsum(rng.exponential(0.02, n)), rng.integers(50, 800, n), rng.integers(2, 120, n))

    def cost(ntok, ndec, dctx, ptok, pctx, npre=1):
        d = 0.01 + 2e-5 * ntok
        return d, d
    res = simulate(req, cost, 64, 2048, 10**7, 16, True, "poisson")
    assert res.preemptions == 0
    f = figures(req.arrival_s, res.first_token_s, res.finish_s, req.output, res.gap_s, res.gap_weight, gpus=1)
    expected = np.sum(res.finish_s - res.first_token_s) / np.sum(req.output - 1)
    assert f["itl_mean_s"] == pytest.approx(expected, rel=1e-9)
    assert f["itl_p50_s"] <= f["itl_p99_s"]
    assert f["itl_p99_s"] >= 0.01 + 2e-5 * 64   # an iteration with a prefill chunk in it is in the tail
