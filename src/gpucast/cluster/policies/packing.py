"""``packing``: utilization-blind packing by memory fit, first-fit over GPU indices.

Told gpucast's predictions but reads only the point memory prediction: a job goes on the
lowest-numbered GPU whose predicted free memory holds the job's predicted peak and that holds
fewer than ``max_jobs_per_gpu`` jobs. ``max_jobs_per_gpu`` = 4 stands for a time-slicing
replica count (Kubernetes GPU sharing is configured as N replicas per GPU; 4 is our choice, a
parameter). Utilization and interference are ignored, which is the point of this baseline.

The placement keeps "free memory where one more job is allowed" per GPU in a numpy array, so a
placement on 2,048 GPUs is one vectorised comparison and an argmax, and an update is one store;
:meth:`score` states the same rule for :func:`~gpucast.cluster.policies.base.choose_gpu`.
"""

from __future__ import annotations

import numpy as np

from gpucast.cluster.policies.base import Policy, obs_for

NEG = float("-inf")


class PackingPolicy(Policy):
    name = "packing"
    told = "prediction"
    max_jobs_per_gpu = 4

    def _need(self, obs) -> float:
        return obs.memory_bytes or 0.0

    def score(self, gpu, job):
        used = sum(self._need(o) for o in gpu.jobs)
        return float(gpu.index) if used + self._need(job) <= gpu.memory_bytes else None

    # ---- fast path: an array of "free memory where one more job is allowed" per GPU

    def attach(self, gpus):
        super().attach(gpus)
        n = len(self._static)
        self._mem = [m for _i, _t, m, _nd in self._static]
        self._used = [0.0] * n
        self._n = [len(j) for j in self._jobs]       # jobs per GPU (a list: cheaper to read than numpy)
        self._caps = [self.cap(g) for g in self.view]  # the most jobs each GPU takes (MPS replicas: fewer)
        self._free = np.array(self._mem, dtype=float)
        self._needs: dict = {}     # id(job observation) -> (memory it needs on every GPU, the observation)
        for i in range(n):
            if self._jobs[i]:
                self._used[i] = sum(self._need(o) for o in self._jobs[i])
                self._refresh(i)
        # nodes: runs of consecutive GPUs with the same node, in index order
        starts = [i for i in range(n) if i == 0 or self._static[i][3] != self._static[i - 1][3]]
        self._run_lo = np.array(starts, dtype=np.int64)
        self._run_hi = np.array(starts[1:] + [n], dtype=np.int64)

    def _refresh(self, i):
        self._free[i] = self._mem[i] - self._used[i] if self._n[i] < self._caps[i] else NEG

    # The base hooks' bookkeeping (observations per GPU, counts) and this policy's, in one pass.
    def on_start(self, job, gpu_indices):
        if not self.score_uses_index:
            super().on_start(job, gpu_indices)
        else:
            self._hold(job, gpu_indices)
        pos, static, jobs, count, n, used = self._pos, self._static, self._jobs, self._count, self._n, self._used
        for gi in gpu_indices:
            i = pos[gi]
            o = obs_for(job.obs, static[i][1])
            if self.score_uses_index:
                jobs[i].append(o)
                count[i] += 1
            n[i] += 1
            used[i] += self._need(o)
            self._refresh(i)

    def on_stop(self, job, gpu_indices):
        if not self.score_uses_index:
            super().on_stop(job, gpu_indices)
        else:
            self._stops += 1
            self._unhold(job)
        pos, static, jobs, count, n, used = self._pos, self._static, self._jobs, self._count, self._n, self._used
        for gi in gpu_indices:
            i = pos[gi]
            o = obs_for(job.obs, static[i][1])
            if self.score_uses_index:
                jobs[i].remove(o)
                count[i] -= 1
            n[i] -= 1
            used[i] -= self._need(o)
            if n[i] == 0:
                used[i] = 0.0  # no float drift on empty GPUs
            self._refresh(i)

    def _place(self, job, exclusive):
        if exclusive:
            fits = self._count == 0
        else:
            need = self._needs.get(id(job.obs))
            if need is None:
                obs = job.obs.values() if isinstance(job.obs, dict) else [job.obs]
                need = max(self._need(o) for o in obs)
                self._needs[id(job.obs)] = (need, job.obs)    # the observation kept: its id stays its own
            else:
                need = need[0]
            fits = self._free >= need
        if self._nlocked:                  # GPUs a planned gang holds (gpucast.cluster.gangs)
            fits = fits & ~self._locked
        k = job.gpus
        gidx = self._gidx
        if k > 1 and self._whole is not None:   # MIG slices take one-GPU jobs only
            fits = fits & self._whole
        if k == 1:
            i = int(fits.argmax())
            return [int(gidx[i])] if fits[i] else None
        # first node (in index order) with k GPUs that fit, else the first k that fit anywhere
        per_node = np.add.reduceat(fits, self._run_lo, dtype=np.int64)
        nodes = np.flatnonzero(per_node >= k)
        if len(nodes):
            lo, hi = int(self._run_lo[nodes[0]]), int(self._run_hi[nodes[0]])
            return gidx[lo + np.flatnonzero(fits[lo:hi])[:k]].tolist()
        found = np.flatnonzero(fits)
        return gidx[found[:k]].tolist() if len(found) >= k else None
