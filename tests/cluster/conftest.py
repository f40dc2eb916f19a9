import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # simhelpers.py (rootdir-relative test layout)


@pytest.fixture(autouse=True, scope="session")
def _prediction_cache_in_a_tmp_dir(tmp_path_factory):
    """The simulator's disk cache of predictions (``truth``) starts empty in a temporary
    directory: no test reads a warm cache from the user's home or writes to it."""
    old = os.environ.get("GPUCAST_CACHE_DIR")
    os.environ["GPUCAST_CACHE_DIR"] = str(tmp_path_factory.mktemp("gpucast-cache"))
    yield
    if old is None:
        os.environ.pop("GPUCAST_CACHE_DIR", None)
    else:
        os.environ["GPUCAST_CACHE_DIR"] = old
