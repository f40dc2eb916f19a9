"""Shared set-up for the ``gpucast.profile`` tests.

Puts this directory on ``sys.path`` so every test module here can ``from fakes import FakeNvml``
(the one fake: it stands in for the GPU behind NVML on machines with no GPU), and offers it as the
``fake_nvml`` fixture factory as well.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from fakes import FakeNvml  # noqa: E402


@pytest.fixture
def fake_nvml():
    """``fake_nvml(**script)`` -> a ``FakeNvml`` (synthetic readings; see ``fakes.py``)."""
    return FakeNvml
