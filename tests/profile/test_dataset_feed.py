"""The runner fed by a job's own dataset through a real DataLoader (gpucast.profile.dataset_feed),
on the CPU. Step times are compared with each other or bounded below by the dataset's own sleep."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpucast import Job
from gpucast.profile.dataset_feed import DatasetFeed
from gpucast.profile.runner import RunSpec, run_job
from gpucast.surroundings import Data

USER = Path(__file__).resolve().parents[1] / "probe" / "user_data.py"
FAST = dict(device="cpu", warmup_steps=1, window_s=0.3, min_window_steps=4, max_window_steps=40)


def _job(name: str, workers: int = 0, **data) -> Job:
    return Job("mlp-small", batch_size=16, data=Data(dataset=f"{USER}:{name}", num_workers=workers, **data))


def test_batches_come_from_the_dataset_through_a_dataloader():
    feed = DatasetFeed(_job("fast"), torch.device("cpu"), n_inputs=1)
    (x,) = feed.next()
    assert x.shape == (16, 1, 28, 28)
    # the dataset's sample i is filled with i: a shuffled batch of distinct samples
    assert len({float(v) for v in x[:, 0, 0, 0]}) == 16
    for _ in range(len(feed.loader)):  # past the end of the epoch: the next one starts
        feed.next()
    assert feed.epochs == 2 and feed.settle_steps == 0
    feed.close()


def test_a_collate_function_of_its_own_feeds_a_tensor_batch():
    feed = DatasetFeed(_job("fast", collate=f"{USER}:tuple_collate"), torch.device("cpu"), n_inputs=1)
    (x,) = feed.next()
    assert x.shape == (16, 1, 28, 28)


def test_an_iterable_dataset_is_refused():
    with pytest.raises(ValueError, match="IterableDataset"):
        DatasetFeed(_job("iterable"), torch.device("cpu"), n_inputs=1)


def test_a_slow_dataset_sets_the_step_and_workers_run():
    """2 ms of sleep per sample, 16 per batch: in the loop the step is at least 32 ms (a floor the
    sleep sets, whatever the load). With two worker processes the job runs too; that they shorten
    the step is a speed, measured by ``benchmarks/harness_timing.py workers``, not asserted here."""
    rows = {w: run_job(RunSpec(_job("slow", w), **FAST)) for w in (0, 2)}
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows[0]["step_time_mean_s"] >= 16 * 0.002
    assert rows[2]["window_steps"] >= FAST["min_window_steps"]
