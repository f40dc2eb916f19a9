"""Re-partitioning MIG nodes while the simulator runs: drain, reconfigure, reopen, either way.

A node the policy may re-partition (``ClusterSpec.partitioned(..., dynamic=True)``) has two
faces in the cluster, its slices and its whole GPUs, one open at a time; it starts carved (or
whole: ``ClusterSpec.start_whole``). When a scheduling pass places nothing, the policy is asked
what its waiting jobs want:

- **whole GPUs** (:meth:`gpucast.cluster.policies.base.Policy.wants_whole`: a multi-GPU job, a job
  allowed on no slice): a carved node is re-partitioned whole;
- else **slices** (:meth:`~gpucast.cluster.policies.base.Policy.wants_slices`, asked with the
  whole node that would drain: gpucast's rule is that no waiting job needs several GPUs and
  more one-GPU jobs wait than the node's whole GPUs could hold, each of which would get more
  done on the node's slices than on its whole GPUs): that node is carved. Carving pays where GPUs run one job each (a slice then takes
  a job a whole GPU would otherwise hold alone).

Of the nodes on the face to leave, the one whose jobs are expected to end first drains: each job
by its start and the time limit its user gave (``limit_s``, what a backfilling scheduler reads),
then the one running the fewest jobs.

The chosen node **drains**: no new job is placed on its open face, the ones running there finish
as they would. Once it is empty it is **reconfigured** for ``mig_reconfig_s`` (our choice, 60 s by
default, a parameter: destroying or creating the GPU instances, the MIG manager's apply and the
device plugin's restart; no published figure used), its GPUs idle all that time, and then its
other face opens. The drain cost is what the cluster loses meanwhile: the node's capacity while it
drains and reconfigures (utilization counts it idle). One node drains at a time, and a node
keeps a face it opened at least ``mig_hold_s`` (our choice, an hour by default, a parameter; 0:
none): without it a queue whose head alternates between a multi-GPU job and many small ones
flips nodes back and forth, each flip a drain (thousands of them on pai-mix with one job per GPU).

Modelled: the drain (no preemption: jobs finish), the reconfiguration time, capacity counted once
per physical GPU (:attr:`ClusterSpec.physical_gpus`). Not modelled: preempting or checkpointing the
jobs on a draining node, a reconfiguration that fails, layouts other than the run's one
(``--mig-layout``), switching a node's sharing mode (time-slicing or MPS; see
:mod:`gpucast.cluster.spec`).

:class:`Repartition` is mixed into :class:`gpucast.cluster.engine.Simulator` and works on its state
(``on``, ``policy``, the event heap).
"""

from __future__ import annotations

from itertools import chain

DEFAULT_RECONFIG_S = 60.0   # our choice (see the module docstring)
DEFAULT_HOLD_S = 3600.0     # our choice: a node keeps a face it opened at least this long (see above)
WHOLE, CARVED = 0, 1        # a node's faces (ClusterSpec.faces)
FACE_NAMES = ("whole", "carved")


class Repartition:
    """Draining and reconfiguring MIG nodes (a mixin of the simulator; see above)."""

    def _init_groups(self, spec, n_gpus: int, reconfig_s: float, hold_s: float = DEFAULT_HOLD_S) -> None:
        """The nodes that may be re-partitioned (GPUs ``< n_gpus``, the profiling pool left out),
        each with the face it starts with open, the other closed in the policy."""
        for name, v in (("mig_reconfig_s", reconfig_s), ("mig_hold_s", hold_s)):
            if not v >= 0:
                raise ValueError(f"{name} must be >= 0, got {v!r}")
        self.reconfig_s, self.hold_s = float(reconfig_s), float(hold_s)
        self.groups: dict = {}        # group -> {face: [GPU indices]}
        for g, f in enumerate(spec.gpu_faces()[:n_gpus]):
            if f is not None:
                self.groups.setdefault(f[0], {WHOLE: [], CARVED: []})[f[1]].append(g)
        start = WHOLE if spec.start_whole else CARVED
        self.face = {k: start for k in self.groups}    # each node's open face (None while it drains)
        self.opened = {k: -self.hold_s for k in self.groups}    # when it opened (the start face: free to leave)
        self.draining = None          # [group, drain start, reconfiguration start (None while jobs remain), face to open]
        self.repartitions: list = []  # (drain start, the new face open at, group, its name)
        for faces in self.groups.values():
            self.policy.switch_off(faces[1 - start], True)

    def _repartition(self, t, window) -> None:
        """A pass that placed nothing: start draining a node whose other face the waiting jobs want
        (the first by :meth:`_drain_order`; with ``drain_busy_nodes`` off, only an empty one)."""
        if self.draining is not None or not self.groups:
            return
        pol = self.policy
        for leave in (CARVED, WHOLE):
            nodes = [k for k, f in self.face.items() if f == leave and t - self.opened[k] >= self.hold_s]
            if not nodes or (leave == CARVED and not pol.wants_whole(window)):
                continue
            k = min(nodes, key=lambda k: self._drain_order(k, leave, t))
            if not pol.drain_busy_nodes and any(self.on[g] for g in self.groups[k][leave]):
                continue
            faces = self.groups[k]
            if leave == CARVED or pol.wants_slices(chain(self.requeued.values(), self.queue.values()),
                                                   faces[WHOLE], faces[CARVED]):
                break
        else:
            return
        self.face[k] = None
        self.draining = [k, t, None, 1 - leave]
        pol.switch_off(self.groups[k][leave], True)
        self._drained(t)

    def _drain_order(self, k, face, t) -> tuple:
        """Which node drains first: the one whose jobs on ``face`` are expected to end first, each
        by its start and the time limit its user gave (``limit_s``, as a backfilling scheduler
        reads it; one past its limit: now; none given: never), then the one running the fewest."""
        jobs = {id(j): j for g in self.groups[k][face] for j in self.on[g]}.values()
        ends = [float("inf") if j.limit_s is None else max(t, j.run_start + j.limit_s) for j in jobs]
        return max(ends, default=t), len(ends), k

    def _drained(self, t) -> None:
        """Once the draining node is empty, its reconfiguration starts (the event at its end)."""
        k, _since, _at, to = self.draining
        if any(self.on[g] for g in self.groups[k][1 - to]):
            return
        self.draining[2] = t
        self._push(t + self.reconfig_s, self.RECONFIG, None, k)

    def _reconfigured(self, k, t) -> None:
        """The node's other face opens (or, for ``("hold", k)``, the node's hold ended: the event
        only brings a scheduling pass, which may re-partition it)."""
        if isinstance(k, tuple):
            return
        _k, since, _at, to = self.draining
        self.draining = None
        self.face[k] = to
        self.opened[k] = t
        if self.hold_s > 0:
            self._push(t + self.hold_s, self.RECONFIG, None, ("hold", k))
        self.policy.switch_off(self.groups[k][to], False)
        self.repartitions.append((since, t, k, FACE_NAMES[to]))
