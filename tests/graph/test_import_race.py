"""Model building from several threads: two first builds forced to interleave at an import.

Each case runs ``import_race.py`` (beside this file) in a fresh interpreter, where nothing is
imported yet: a meta-path hook pauses the first thread inside the import until the second thread
is blocked at an import lock or has finished (see that script's docstring), so the interleaving
that broke concurrent first requests is forced, not left to timing. Both threads must get
their answer. On the code before :mod:`gpucast.imports` the second thread's Hugging Face build
failed with ``module 'transformers' has no attribute 'AutoConfig'`` and its zoo lookup with
``unknown zoo workload 'gpt2'``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("import_race.py")


def race(mode: str, cache_dir: Path) -> dict:
    """Run ``import_race.py MODE`` with a disk cache of its own; its JSON line."""
    env = {**os.environ, "GPUCAST_CACHE_DIR": str(cache_dir), "TRANSFORMERS_VERBOSITY": "error"}
    for step in (["prefill"] if mode != "zoo" else []) + [mode]:
        r = subprocess.run([sys.executable, str(SCRIPT), step], capture_output=True, text=True, env=env,
                           timeout=600, cwd=SCRIPT.parent)
        assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_two_first_hugging_face_builds_interleaved_at_the_import(tmp_path):
    out = race("predict", tmp_path)
    assert out["paused"] == "A", out  # thread A was held inside transformers' own __init__
    assert out["other_blocked"], out  # ... until thread B was seen waiting at an import lock
    # Both answered: the two jobs differ only in batch size, so the larger one's step is not shorter.
    assert isinstance(out["job0"], float) and isinstance(out["job1"], float), out
    assert 0 < out["job0"] <= out["job1"], out


def test_a_zoo_lookup_while_another_thread_fills_the_zoo(tmp_path):
    out = race("zoo", tmp_path)
    assert out["paused"] == "A" and out["other_blocked"], out
    assert out == {"job0": "mlp", "job1": "transformer", "paused": "A", "other_blocked": True}


@pytest.mark.parametrize("name", ["transformers", "transformers.models.auto.modeling_auto", "json"])
def test_load_returns_what_sys_modules_holds(name):
    from gpucast import imports

    module = imports.load(name)
    assert module is sys.modules[name] and imports.imported(name)
    if name == "transformers":  # the lazy module, whose names resolve on first use
        assert module.AutoConfig.__name__ == "AutoConfig"
