"""The MLP sample fixture (tests that read ../shared/data skip without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
MLP_CSV = SHARED / "gpumemnet-mlp" / "runs.csv"
GAVEL_JSON = SHARED / "gavel" / "simulation_throughputs.json"
needs_shared = pytest.mark.skipif(not MLP_CSV.is_file() or not GAVEL_JSON.is_file(),
                                  reason="../shared/data is not beside the checkout")


@pytest.fixture(scope="session")
def mlp_sample():
    """25 runs of each of the MLP set's four architectures, captured once (a Fitter)."""
    from gpucast.learn.fit import Fitter
    from gpucast.learn.shared_sets import mlp_rows

    if not MLP_CSV.is_file():
        pytest.skip("../shared/data is not beside the checkout")
    rows = mlp_rows(MLP_CSV)
    by_group: dict[str, list] = {}
    for r in rows:
        by_group.setdefault(r.group, []).append(r)
    return Fitter([r for g in sorted(by_group) for r in by_group[g][:25]])
