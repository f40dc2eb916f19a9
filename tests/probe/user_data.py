"""A user's data code, as a job names it (``user_data.py:FUNCTION``): real torch Datasets and
small RL environments for the probe tests. Not a test module (pytest collects ``test_*.py``)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset, IterableDataset


# How long the hanging factories and samples sleep: far past any limit the tests set.
HANG_S = 30.0


class Samples(Dataset):
    """``n`` samples of an image (1, 28, 28) float32 and an int label; ``sleep_s`` per sample."""

    def __init__(self, n: int = 400, sleep_s: float = 0.0, fail_at: int | None = None, hang_at: int | None = None):
        self.n, self.sleep_s, self.fail_at, self.hang_at = n, sleep_s, fail_at, hang_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.hang_at is not None:
            time.sleep(HANG_S)
        if self.fail_at is not None:
            raise KeyError("x")
        return torch.full((1, 28, 28), float(i)), i % 10


def fast():
    return Samples()


def slow():
    return Samples(sleep_s=0.002)


def raises():
    raise RuntimeError("no data here")


def not_a_dataset():
    return 42


def empty():
    return Samples(n=0)


def slow_to_build():
    time.sleep(HANG_S)
    return Samples()


def getitem_raises():
    return Samples(fail_at=0)


def getitem_hangs():
    return Samples(hang_at=0)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def iterable():
    return Stream()


def tuple_collate(batch):
    """A collate function of its own: stacks the images, drops the labels."""
    return torch.stack([x for x, _ in batch])


def bad_collate(batch):
    raise TypeError("cannot collate")


# ------------------------------------------------------------------------------ environments
class Space:
    def __init__(self, n):
        self.n = n
        self.calls = 0

    def sample(self):
        self.calls += 1
        return self.calls % self.n


class Corridor:
    """An episode of 20 steps of ``sleep_s`` each; a gymnasium-style 5-tuple step."""

    def __init__(self, sleep_s=0.0005, with_space=True):
        self.sleep_s = sleep_s
        self.t = 0
        self.resets = 0
        self.actions = []
        if with_space:
            self.action_space = Space(4)

    def reset(self):
        self.t = 0
        self.resets += 1
        return torch.zeros(8), {}

    def step(self, action):
        self.actions.append(action)
        self.t += 1
        time.sleep(self.sleep_s)
        return torch.zeros(8), 0.0, self.t >= 20, False, {}


LAST: list = []  # the environments made, for the tests to look at (the file's own module)


def corridor():
    LAST.append(Corridor())
    return LAST[-1]


def corridor_no_space():
    LAST.append(Corridor(with_space=False))
    return LAST[-1]


def not_an_env():
    return Samples()
