"""The checks ``gpucast simulate`` runs before any work, one run or a sweep alike (each a ValueError of
one line): the policy list, the options both share, the re-partitioning options, the planned gangs the
cluster's nodes could never hold; and the re-partitioning options as the engine's parameters. Used by
:mod:`gpucast.cli.sim` and :mod:`gpucast.cli.sim_sweep`.
"""

from __future__ import annotations

from collections import Counter


def parse_policies(text: str, known) -> list[str]:
    """``"slot, gpucast,slot"`` -> ``["slot", "gpucast"]``; an unknown name raises ValueError."""
    names: list[str] = []
    for name in (p.strip().lower() for p in text.split(",")):
        if not name:
            continue
        if name not in known:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(known)}")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"--policies is empty; choose from {', '.join(known)}")
    return names


def check_gangs(cl, trace, spec, names) -> None:
    """Raise ValueError (one line, naming the job) when a planned gang of ``trace`` could never
    start on ``spec``'s nodes under one of the policies (a profiling pool takes GPUs of the last
    node), before any run starts."""
    from gpucast.cluster import gangs
    from gpucast.cluster.engine import pool_size

    nodes = [nd for _g, nd, _t in spec.gpus()]
    for name in names:
        npool = pool_size(cl.make_policy(name), len(nodes))
        sizes = Counter(nodes[:len(nodes) - npool]).values()
        try:
            gangs.check(trace.jobs, sizes)
        except ValueError as exc:
            raise ValueError(f"{exc} (policy {name})" if npool else str(exc)) from None


def check_base(*, gpus, gpus_per_node, limit, load, error_sigma, colocation, sharing="timeslice") -> None:
    """The options one run and a sweep share, checked before any work (ValueError: one line)."""
    for v, flag in ((gpus, "--gpus"), (gpus_per_node, "--gpus-per-node"), (limit, "--limit")):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be at least 1, got {v}")
    if load is not None and not load > 0:
        raise ValueError(f"--load must be > 0, got {load}")
    from gpucast.cluster import errors
    from gpucast.cluster.timeshare import WORLDS

    errors.parse(error_sigma)
    if colocation not in WORLDS:
        raise ValueError(f"unknown --colocation {colocation!r}; choose from {', '.join(WORLDS)}")
    from gpucast.cluster.timeshare import MODES

    if sharing not in MODES:
        hint = (" (MIG slices are GPUs: --gpu-type a100-80gb --mig-layout 3g.40gb,2g.20gb,2g.20gb carves the "
                "nodes; jobs inside a slice share it by time-slicing or MPS)" if sharing == "mig" else "")
        raise ValueError(f"unknown --colocation-mode {sharing!r}; choose from {', '.join(MODES)}{hint}")


def check_dynamic(mig_dynamic, mig_reconfig_s, mig_hold_s) -> None:
    """The re-partitioning options go with --mig-dynamic."""
    for name, v in (("--mig-reconfig-s", mig_reconfig_s), ("--mig-hold-s", mig_hold_s)):
        if v is not None and not mig_dynamic:
            raise ValueError(f"{name} goes with --mig-dynamic")


def engine_params(mig_reconfig_s, mig_hold_s) -> dict:
    """The re-partitioning options given, as the engine's parameters."""
    return {k: v for k, v in (("mig_reconfig_s", mig_reconfig_s), ("mig_hold_s", mig_hold_s)) if v is not None}
