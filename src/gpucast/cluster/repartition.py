"""Re-partitioning MIG nodes while the simulator runs: drain, reconfigure, reopen.

A node the policy may re-partition (``ClusterSpec.partitioned(..., dynamic=True)``) has two
faces in the cluster, its slices and its whole GPUs, one open at a time; it starts carved. When a
scheduling pass places nothing and the policy says its waiting jobs want whole GPUs
(:meth:`gpucast.cluster.policies.base.Policy.wants_whole`), the carved node running the fewest
jobs starts to **drain**: no new job is placed on its slices, the ones running there finish as
they would. Once it is empty it is **reconfigured** for ``mig_reconfig_s`` (our choice, 60 s by
default, a parameter: destroying the GPU instances, the MIG manager's apply and the device
plugin's restart; no published figure used), its GPUs idle all that time, and then its whole
GPUs open. The drain cost is what the cluster loses meanwhile: the slices' capacity while the
node drains and the whole node's while it reconfigures (utilization counts them idle). One node
drains at a time.

Modelled: the drain (no preemption: jobs finish), the reconfiguration time, capacity counted once
per physical GPU (:attr:`ClusterSpec.physical_gpus`). Not modelled: carving a whole node (in the
model a job that fits a slice fits an empty whole GPU first, so no waiting job asks for a slice),
preempting or checkpointing the jobs on a draining node, a reconfiguration that fails.

:class:`Repartition` is mixed into :class:`gpucast.cluster.engine.Simulator` and works on its state
(``on``, ``policy``, the event heap).
"""

from __future__ import annotations

DEFAULT_RECONFIG_S = 60.0   # our choice (see the module docstring)


class Repartition:
    """Draining and reconfiguring MIG nodes (a mixin of the simulator; see above)."""

    def _init_groups(self, spec, n_gpus: int, reconfig_s: float) -> None:
        """The nodes that may be re-partitioned (GPUs ``< n_gpus``, the profiling pool left out),
        their carved faces open, their whole faces closed in the policy."""
        if not reconfig_s >= 0:
            raise ValueError(f"mig_reconfig_s must be >= 0, got {reconfig_s!r}")
        self.reconfig_s = float(reconfig_s)
        self.groups: dict = {}        # group -> {face: [GPU indices]} (face 0 whole, 1 carved)
        for g, f in enumerate(spec.gpu_faces()[:n_gpus]):
            if f is not None:
                self.groups.setdefault(f[0], {0: [], 1: []})[f[1]].append(g)
        self.carved = set(self.groups)
        self.draining = None          # [group, drain start, reconfiguration start (None while jobs remain)]
        self.repartitions: list = []  # (drain start, whole GPUs open at, group)
        for faces in self.groups.values():
            self.policy.switch_off(faces[0], True)

    def _repartition(self, t, window) -> None:
        """A pass that placed nothing: start draining a carved node if the policy wants whole GPUs."""
        if self.draining is not None or not self.carved or not self.policy.wants_whole(window):
            return
        on = self.on
        load = {k: sum(len(on[g]) for g in self.groups[k][1]) for k in self.carved}
        k = min(self.carved, key=lambda k: (load[k], k))
        if load[k] and not self.policy.drain_busy_nodes:
            return                    # only an empty node is re-partitioned
        self.carved.discard(k)
        self.draining = [k, t, None]
        self.policy.switch_off(self.groups[k][1], True)
        self._drained(t)

    def _drained(self, t) -> None:
        """Once the draining node is empty, its reconfiguration starts (the event at its end)."""
        k = self.draining[0]
        if any(self.on[g] for g in self.groups[k][1]):
            return
        self.draining[2] = t
        self._push(t + self.reconfig_s, self.RECONFIG, None, k)

    def _reconfigured(self, k, t) -> None:
        """The node's whole GPUs open."""
        since = self.draining[1]
        self.draining = None
        self.policy.switch_off(self.groups[k][0], False)
        self.repartitions.append((since, t, k))
