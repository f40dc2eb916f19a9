"""gpucast.cluster.gavel's mapping: every Gavel job type runs on Gavel's stack (PyTorch 1.4, CUDA
10.1, eager module loading) and the A3C, LM and Recommendation jobs follow their scripts."""

from __future__ import annotations

import pytest

from gpucast import zoo
from gpucast.cluster import gavel
from gpucast.estimate.environment import Environment
from gpucast.job import Job
from gpucast.surroundings import Stack

TYPES = ["ResNet-18 (batch size 16)", "ResNet-50 (batch size 64)", "Transformer (batch size 32)",
         "LM (batch size 20)", "Recommendation (batch size 2048)", "A3C", "CycleGAN"]


@pytest.mark.parametrize("job_type", TYPES)
def test_every_type_gets_gavels_stack(job_type):
    f = gavel.job_fields(job_type)
    assert f["stack"] == Stack(torch="1.4", cuda="10.1", lazy_loading=False)
    job = Job(**f)
    assert job.stack.torch == "1.4" and not job.stack.merged(Stack()).foreach_optimizers
    assert f["model"] == gavel.MAPPING[gavel.split_job_type(job_type)[0]].model
    zoo.get(f["model"])


def test_every_mapped_type_is_listed():
    assert {gavel.split_job_type(t)[0] for t in TYPES} == set(gavel.MAPPING)


def test_lm_is_the_script_with_its_own_update():
    f = gavel.job_fields("LM (batch size 40)")
    assert (f["model"], f["batch_size"], f["seq_len"], f["optimizer"]) == ("lstm-lm-wikitext2-clipped", 40, 35, "none")
    d = f["data"]
    assert d.source == "custom" and d.sample_bytes == 0 and d.num_workers == 0
    assert d.dataset_samples == 2_088_628 // 35
    assert f["loop"].item_calls == 1 and f["loop"].log_every == 200


def test_a3c_is_one_rollout_of_worker_0():
    f = gavel.job_fields("A3C")
    assert (f["model"], f["batch_size"], f["input_shape"], f["optimizer"]) == ("a3c-atari-80", 20, (1, 80, 80), "none")
    assert f["loop"].item_calls == 20 + 16          # action reads + gradient copies to the CPU model
    # the environment step restated for the custom per-frame cost is the Environment's prior
    assert gavel.A3C_ENV_STEP_S == Environment.priors().env_step_s
    assert f["data"].per_sample_s == pytest.approx(gavel.A3C_ENV_STEP_S + gavel.A3C_CPU_ADAM_S / 20)


def test_recommendation_collates_sparse_batches_in_the_loop():
    f = gavel.job_fields("Recommendation (batch size 512)")
    assert (f["model"], f["optimizer"], f["input_shape"]) == ("recoder-ml20m", "adam", (73,))
    d = f["data"]
    assert d.num_workers == 0 and d.per_sample_s == pytest.approx(gavel.REC_COLLATE_SAMPLE_S)
    assert d.sample_bytes == 73 * (2 * 8 + 4) + 8    # indices (2 x int64) + value per rating, user id
    assert f["loop"].progress_bar and f["loop"].item_calls == 1
    assert not any(m.nearest for k, m in gavel.MAPPING.items() if k in ("LM", "A3C", "Recommendation"))
