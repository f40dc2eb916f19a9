"""The packaged fit's procedure over the shared sets (gpucast.learn.set_fit): leaving a set out
leaves its rows out of every stage, the 1.x factors move only with rows measured on 1.x stacks,
and the base that never saw a set (learn.evaluate.base_without) drops every stage that did."""

from __future__ import annotations

import numpy as np
import pytest

from gpucast.estimate.environment import Environment
from gpucast.learn import set_fit
from gpucast.learn.fit import Fitter

from tests.measured_data import MEASURED


@pytest.fixture(scope="module")
def small_sets(mlp_sample):
    lucid_rows = set_fit.rows_of("lucid", MEASURED)
    gavel_rows = set_fit.rows_of("gavel", MEASURED)
    # A few rows of each: host-bound CIFAR runs (they say the most about the 1.x host factor).
    lucid = Fitter([r for r in lucid_rows if r.group in ("ResNet18", "EfficientNet")][:6])
    gavel = Fitter([r for r in gavel_rows if r.group == "ResNet-18"][:4])
    return {"mlp": mlp_sample, "gavel": gavel, "lucid": lucid}


def test_leaving_a_set_out_leaves_its_rows_out(small_sets):
    env, info = set_fit.fit_sets(small_sets, without="lucid")
    used = [d for s in info["stages"] for d in s["data"]]
    assert "lucid-rtx3090" not in used and "gavel" in used and "gpumemnet-mlp" in used
    assert sum(s["rows"] for s in info["stages"]) == len(small_sets["mlp"].rows) + len(small_sets["gavel"].rows)
    _, info2 = set_fit.fit_sets(small_sets, without="mlp")
    assert [s["data"] for s in info2["stages"]] == [["gavel", "lucid-rtx3090"]]
    # With the MLP set left out, its stage's constants keep their priors.
    env2, _ = set_fit.fit_sets(small_sets, without="mlp")
    assert env2.memory_sample_s == Environment.priors().memory_sample_s


def test_the_1x_factors_move_only_with_1x_rows(small_sets):
    only_mlp = {"mlp": small_sets["mlp"]}
    env, _ = set_fit.fit_sets(only_mlp)
    assert env.torch1_host_factor == Environment.priors().torch1_host_factor
    env_old, _ = set_fit.fit_sets(small_sets)
    # Host-bound 1.x runs measured slower than the priors predict: the fitted factor rises.
    assert env_old.torch1_host_factor > Environment.priors().torch1_host_factor


def test_an_unknown_set_is_refused():
    with pytest.raises(ValueError, match="unknown shared set"):
        set_fit.fit_sets({}, without="imagenet")
    with pytest.raises(ValueError, match="unknown shared set"):
        set_fit.rows_of("imagenet", MEASURED)


def test_base_without_drops_every_stage_that_saw_the_set(monkeypatch):
    from gpucast.learn import evaluate

    record = {"stages": [{"data": ["gpumemnet-mlp"], "values": {"item_s": 3e-5}},
                         {"data": ["gavel", "lucid-rtx3090"], "values": {"torch1_host_factor": 3.0}}]}
    monkeypatch.setattr(evaluate, "fit_record", lambda: record)
    assert evaluate.base_without("lucid-rtx3090").torch1_host_factor == Environment.priors().torch1_host_factor
    assert evaluate.base_without("lucid-rtx3090").item_s == pytest.approx(3e-5)
    assert evaluate.base_without("gpumemnet-mlp").torch1_host_factor == pytest.approx(3.0)
    assert np.isclose(evaluate.base_without("gpumemnet-mlp").item_s, Environment.priors().item_s)


def test_each_1x_set_gets_its_own_host_and_a_group_can_be_held_out(small_sets):
    env, info = set_fit.fit_sets(small_sets)
    second = info["stages"][-1]
    assert set(second["per_set"]) == {"gavel", "lucid"}
    # The packaged environment is for a host never measured: the hosts stay at their prior.
    assert env.host_time_factor == Environment.priors().host_time_factor
    # Holding a Lucid family out leaves its rows out of the second stage only.
    _, held = set_fit.fit_sets(small_sets, without_group=("lucid", "EfficientNet"),
                               first_stage=(env, info["stages"][0]))
    n_eff = int(np.sum(small_sets["lucid"].groups == "EfficientNet"))
    assert n_eff > 0
    assert held["stages"][-1]["rows"] == second["rows"] - n_eff
    assert held["stages"][0] is info["stages"][0]
