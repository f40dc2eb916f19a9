"""``packing``: utilization-blind packing by memory fit, first-fit over GPU indices.

Told gpucast's predictions but reads only the point memory prediction: a job goes on the
lowest-numbered GPU whose predicted free memory holds the job's predicted peak and that holds
fewer than ``max_jobs_per_gpu`` jobs. ``max_jobs_per_gpu`` = 4 stands for a time-slicing
replica count (Kubernetes GPU sharing is configured as N replicas per GPU; 4 is our choice, a
parameter). Utilization and interference are ignored, which is the point of this baseline.

The placement uses a max segment tree of "free memory where one more job is allowed" so that a
placement costs O(log n) on large clusters; :meth:`score` states the same rule for
:func:`~gpucast.cluster.policies.base.choose_gpu`.
"""

from __future__ import annotations

from gpucast.cluster.policies._index import NEG, MaxTree
from gpucast.cluster.policies.base import Policy, obs_for


class PackingPolicy(Policy):
    name = "packing"
    told = "prediction"
    max_jobs_per_gpu = 4

    def _need(self, obs) -> float:
        return obs.memory_bytes or 0.0

    def score(self, gpu, job):
        used = sum(self._need(o) for o in gpu.jobs)
        return float(gpu.index) if used + self._need(job) <= gpu.memory_bytes else None

    # ---- fast path over the simulator's view

    def attach(self, gpus):
        super().attach(gpus)
        n = len(self.view)
        self._used = [0.0] * n
        self._count = [0] * n
        self._tree = MaxTree([g.memory_bytes for g in self.view])
        self._empty = MaxTree([1.0] * n)
        # nodes: positions of each node's GPUs, and a tree of each node's best GPU value
        self._nodes: list[list[int]] = []
        self._node_of = []
        last = None
        for i, g in enumerate(self.view):
            if g.node != last:
                self._nodes.append([])
                last = g.node
            self._nodes[-1].append(i)
            self._node_of.append(len(self._nodes) - 1)
        sz = self._tree.size
        self._span = [(sz + nd[0], sz + nd[-1] + 1) for nd in self._nodes]   # leaf slices per node
        self._ntree = MaxTree([max(self.view[i].memory_bytes for i in nd) for nd in self._nodes])
        self._nempty = MaxTree([1.0] * len(self._nodes))

    def _refresh(self, i):
        g = self.view[i]
        c = self._count[i]
        self._tree.set(i, g.memory_bytes - self._used[i] if c < self.max_jobs_per_gpu else NEG)
        self._empty.set(i, 1.0 if c == 0 else NEG)
        nd = self._node_of[i]
        lo, hi = self._span[nd]
        self._ntree.set(nd, max(self._tree.t[lo:hi]))
        self._nempty.set(nd, max(self._empty.t[lo:hi]))

    # The view of GPU occupancies is not kept here (the segment trees hold what the rule needs);
    # choose_gpu works on any view it is given.
    def on_start(self, job, gpu_indices):
        for gi in gpu_indices:
            i = self._pos[gi]
            self._used[i] += self._need(obs_for(job.obs, self.view[i].gpu_type))
            self._count[i] += 1
            self._refresh(i)

    def on_stop(self, job, gpu_indices):
        self._stops += 1
        for gi in gpu_indices:
            i = self._pos[gi]
            self._used[i] -= self._need(obs_for(job.obs, self.view[i].gpu_type))
            self._count[i] -= 1
            if self._count[i] == 0:
                self._used[i] = 0.0  # no float drift on empty GPUs
            self._refresh(i)

    def _place(self, job, exclusive):
        if exclusive:
            tree, ntree, need = self._empty, self._nempty, 1.0
        else:
            tree, ntree = self._tree, self._ntree
            obs = job.obs.values() if isinstance(job.obs, dict) else [job.obs]
            need = max(self._need(o) for o in obs)
        k = job.gpus
        view = self.view
        if k == 1:
            i = tree.first_at_least(need, 0)
            return None if i == -1 else [view[i].index]
        # first node (in index order) with k GPUs that fit, else the first k that fit anywhere
        found = []
        nd = ntree.first_at_least(need, 0)
        while nd != -1:
            lo = self._nodes[nd][0]
            here = [lo + x for x, v in enumerate(tree.t[self._span[nd][0]:self._span[nd][1]]) if v >= need]
            if len(here) >= k:
                return [view[i].index for i in here[:k]]
            found += here
            nd = ntree.first_at_least(need, nd + 1)
        return [view[i].index for i in found[:k]] if len(found) >= k else None
