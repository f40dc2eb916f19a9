"""The MLP sample fixture (GPUMemNet's runs, data/measured/gpumemnet-mlp in the repository)."""

from __future__ import annotations

import pytest

from tests.measured_data import MLP_CSV


@pytest.fixture(scope="session")
def mlp_sample():
    """25 runs of each of the MLP set's four architectures, captured once (a Fitter)."""
    from gpucast.learn.fit import Fitter
    from gpucast.learn.shared_sets import mlp_rows

    rows = mlp_rows(MLP_CSV)
    by_group: dict[str, list] = {}
    for r in rows:
        by_group.setdefault(r.group, []).append(r)
    return Fitter([r for g in sorted(by_group) for r in by_group[g][:25]])
