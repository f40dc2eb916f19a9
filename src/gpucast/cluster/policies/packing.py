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

    def _refresh(self, i):
        g = self.view[i]
        c = self._count[i]
        self._tree.set(i, g.memory_bytes - self._used[i] if c < self.max_jobs_per_gpu else NEG)
        self._empty.set(i, 1.0 if c == 0 else NEG)

    def on_start(self, job, gpu_indices):
        super().on_start(job, gpu_indices)
        for gi in gpu_indices:
            i = self._pos[gi]
            self._used[i] += self._need(obs_for(job.obs, self.view[i].gpu_type))
            self._count[i] += 1
            self._refresh(i)

    def on_stop(self, job, gpu_indices):
        super().on_stop(job, gpu_indices)
        for gi in gpu_indices:
            i = self._pos[gi]
            self._used[i] -= self._need(obs_for(job.obs, self.view[i].gpu_type))
            self._count[i] -= 1
            if self._count[i] == 0:
                self._used[i] = 0.0  # no float drift on empty GPUs
            self._refresh(i)

    def place(self, job):
        if job.ooms:
            tree, need = self._empty, 1.0
        else:
            tree = self._tree
            obs = job.obs.values() if isinstance(job.obs, dict) else [job.obs]
            need = max(self._need(o) for o in obs)
        k = job.gpus
        view = self.view
        by_node: dict[int, list[int]] = {}
        found = []
        i = tree.first_at_least(need, 0)
        while i != -1:
            g = view[i]
            lst = by_node.setdefault(g.node, [])
            lst.append(g.index)
            if len(lst) == k:
                return lst
            found.append(g.index)
            i = tree.first_at_least(need, i + 1)
        return found[:k] if len(found) >= k else None
