"""Choosing a multi-GPU job's GPUs from per-GPU scores (used by :class:`gpucast.cluster.policies.base.Policy`):
one node when some node has enough feasible GPUs (the lowest summed score, then the lowest node),
else the best GPUs anywhere. :func:`gang` over a list of candidates, :func:`_gang_np` the same choice
over numpy arrays (the same indices in the same order and the same float sums).
"""

from __future__ import annotations

import numpy as np

_INF = float("inf")
_ZERO = np.zeros(1, dtype=np.int64)
_TRUE = np.ones(1, dtype=bool)


def _gang_np(scores, feasible, gidx, gnode, k: int, per: int = 0) -> list[int] | None:
    """:func:`gang` over numpy arrays (one entry per GPU, in GPU-index order): the same choice,
    the same order of the returned indices, the same float sums. ``per``: the GPUs of every node
    where all nodes have that many, consecutive, numbered in GPU-index order (0: not so), which
    lets the one-node rule work on a node-by-GPU table instead of sorting the cluster."""
    f = feasible.nonzero()[0]
    if len(f) < k:
        return None
    if k == 1:
        return [int(gidx[f[int(scores.take(f).argmin())]])]
    if k <= per:
        fe = feasible.reshape(-1, per)
        ok = (np.count_nonzero(fe, axis=1) >= k).nonzero()[0]        # nodes with k feasible GPUs
        if len(ok):
            tab = np.where(fe[ok], scores.reshape(-1, per)[ok], _INF)
            best = np.argsort(tab, axis=1, kind="stable")[:, :k]     # by score, then GPU index
            costs = np.cumsum(np.take_along_axis(tab, best, axis=1), axis=1)[:, -1]   # as sum() adds
            i = int(costs.argmin())                                  # then the lowest node
            return gidx[ok[i] * per + best[i]].tolist()
        s, ix = scores.take(f), gidx.take(f)
        return ix[np.lexsort((ix, s))[:k]].tolist()          # no node has k: the k best anywhere
    s = scores.take(f)
    ix, nd = gidx.take(f), gnode.take(f)
    order = np.lexsort((ix, s, nd))
    nds = nd.take(order)
    starts = np.concatenate((_ZERO, (nds[1:] != nds[:-1]).nonzero()[0] + 1))
    counts = np.diff(np.concatenate((starts, (len(nds),))))
    ok = starts[counts >= k]
    if len(ok):
        sel = order[ok[:, None] + np.arange(k)]
        costs = np.cumsum(s[sel], axis=1)[:, -1]     # sequential sums, as sum() adds
        return ix[sel[int(costs.argmin())]].tolist()
    return ix[np.lexsort((ix, s))[:k]].tolist()


def gang(cands: list[tuple[float, int, int]], k: int) -> list[int] | None:
    """Pick ``k`` of ``(score, gpu index, node)``: one node if any node has ``k`` (lowest summed
    score, then lowest node), else the ``k`` best across nodes; ``None`` if fewer than ``k``."""
    if len(cands) < k:
        return None
    if k == 1:
        return [min(cands)[1]]
    by_node: dict[int, list] = {}
    for c in cands:
        by_node.setdefault(c[2], []).append(c)
    best = None
    for node, cs in by_node.items():
        if len(cs) >= k:
            cs.sort()
            cost = sum(c[0] for c in cs[:k])
            if best is None or (cost, node) < best[0]:
                best = ((cost, node), [c[1] for c in cs[:k]])
    if best is not None:
        return best[1]
    return [c[1] for c in sorted(cands)[:k]]
