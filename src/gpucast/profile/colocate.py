"""Two or three jobs on one GPU at once: each one's step time against its solo step time.

``run_group(specs, solo_step_times, timeout_s)`` starts one worker process per spec
(:class:`gpucast.profile.isolated.Child`) on the same device, and returns one ``colocated`` row
per spec: the worker's own measurement plus ``group_id``, ``slot``, ``partners`` (JSON list
of the other members' job keys), ``solo_step_time_s`` (from ``solo_step_times`` by job key,
``None`` if unknown), ``slowdown = step_time_mean_s / solo_step_time_s``, and the shared GPU's
``combined_util_mean_pct`` (NVML, sampled by this parent process over the common window) and
``combined_mem_max_bytes`` (NVML device memory, maximum over the whole group run).

The windows coincide. The group meets in a rendezvous directory (``RunSpec.sync_dir``) of
marker files, wall clock (``time.time``) throughout:

1. each worker builds its job, touches ``ready.<slot>`` and waits for ``go`` (the start
   barrier: set-up time, which differs between jobs, does not de-synchronise them);
2. the parent touches ``go`` when every live worker is ready; each worker runs the same number
   of warm-up steps (the group's largest ``warmup_steps``), touches ``warm.<slot>`` and *keeps
   stepping* (its GPU load must not stop while partners warm up);
3. when every live worker is warm the parent writes ``window.json``: ``[t0, t1]``, starting
   ``settle_s`` later and lasting the group's largest ``window_s``; each worker times the steps
   that start inside it (at least ``min_window_steps``, at most ``max_window_steps``) and writes
   its actual window to ``done.<slot>``;
4. a worker that is done keeps stepping, unmeasured, until the parent touches ``release``
   (every live worker done), so that every measured step ran against all its partners.

A member that fails (OOM at set-up, crash, timeout) stops counting for the barriers: the others
go on and return rows; its row carries its status. Partners sharing a GPU compete for its
memory: the group as a whole can OOM where each job alone fits; that is a measurement, too.

Not modelled: MPS or MIG partitioning (members time-slice the GPU as separate CUDA contexts).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from gpucast.profile.faults import failure_row
from gpucast.profile.isolated import Child
from gpucast.profile.sampler import Sampler, summarize
from gpucast.profile.spec import RunSpec
from gpucast.profile.sync import WorkerSync, touch, write_json  # noqa: F401  (WorkerSync: re-exported)

__all__ = ["run_group", "WorkerSync", "MIN_GROUP", "MAX_GROUP"]

MIN_GROUP, MAX_GROUP = 2, 3


def _row_update(row: dict, **values) -> dict:
    row.update(values)
    return row


def run_group(specs: list, solo_step_times: dict[str, float] | None = None, timeout_s: float = 300,
              backend=None, *, workdir: str | os.PathLike | None = None, python: str = sys.executable,
              env: dict | None = None, settle_s: float = 0.25) -> list[dict]:
    """Run 2 or 3 ``RunSpec`` s at once on one device and return one row per spec, in order.

    ``timeout_s`` bounds the whole group (workers still running then are killed: ``timeout``).
    ``backend``: NVML for the parent's combined sampling; ``None`` opens the real one for a CUDA
    device and samples nothing on the CPU. ``workdir``: where specs, results, stderr and the
    rendezvous files go (kept; default a temporary directory, removed). ``env``: extra variables
    for the workers. Never raises for a member's failure.
    """
    specs = list(specs)
    if not MIN_GROUP <= len(specs) <= MAX_GROUP:
        raise ValueError(f"a co-located group has {MIN_GROUP} or {MAX_GROUP} jobs, got {len(specs)}")
    if not all(isinstance(s, RunSpec) for s in specs):
        raise TypeError("run_group takes RunSpec objects")
    devices = {s.device for s in specs}
    if len(devices) != 1:
        raise ValueError(f"a co-located group shares one device, got {sorted(devices)}")
    for s in specs:
        s.to_dict()  # module jobs are refused before anything starts
    solo_step_times = solo_step_times or {}
    group_id = uuid.uuid4().hex
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpucast-group-")
        workdir = tmp.name
    root = Path(workdir)
    sync = root / "sync"
    sync.mkdir(parents=True, exist_ok=True)
    warmup = max(s.warmup_steps for s in specs)
    window_s = max(s.window_s for s in specs)
    members = [replace(s, sync_dir=str(sync), slot=i, start_file=str(sync / "go"), start_at=None,
                       warmup_steps=warmup, window_s=window_s, hold_s=float(timeout_s))
               for i, s in enumerate(specs)]

    own_backend = False
    device = specs[0].device
    if backend is None and device.startswith("cuda"):
        from gpucast.profile.nvml import nvml_index, open_backend

        index = int(device.split(":")[1]) if ":" in device else 0
        backend = open_backend(nvml_index(index))
        own_backend = True
    sampler = Sampler(backend, rate_hz=max(s.sampler_hz for s in specs), clock=time.time) if backend else None
    children: list = []
    window = None
    rows: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        if sampler is not None:
            sampler.start()
        for i, spec in enumerate(members):
            try:
                children.append(Child(spec, root / f"slot{i}", python=python, env=env))
            except OSError as exc:  # could not even start (bad interpreter)
                children.append(exc)

        def live():
            return [c for c in children if not isinstance(c, BaseException) and not c.exited()]

        def wait_for(marker: str) -> bool:
            while True:
                pending = [c for c in live() if not (sync / f"{marker}.{c.spec.slot}").exists()]
                if not pending:
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)

        if wait_for("ready"):
            touch(sync / "go")
            if wait_for("warm"):
                t0 = time.time() + settle_s
                window = (t0, t0 + window_s)
                write_json(sync / "window.json", list(window))
                wait_for("done")
        touch(sync / "release")  # also frees workers still holding when the parent gives up
        for c in children:
            if isinstance(c, BaseException):
                continue
            done = c.wait(max(0.0, deadline - time.monotonic()))
            rows.append(c.finish(timed_out=not done))
            if rows[-1]["status"] == "timeout":
                rows[-1]["error"] = f"no result within the group's {timeout_s:g} s; worker killed"
    finally:
        for c in children:  # only after an exception: kill and reap whatever still runs
            if not isinstance(c, BaseException) and not c.reaped:
                c.finish(timed_out=True)
        if sampler is not None:
            sampler.stop()
        if own_backend:
            backend.close()
        if tmp is not None:
            tmp.cleanup()

    # rows of children that could not start
    it = iter(rows)
    full = []
    for spec, c in zip(members, children):
        if isinstance(c, BaseException):
            full.append(failure_row(spec, "crash", f"worker could not start: {type(c).__name__}: {c}"[:500]))
        else:
            full.append(next(it))

    combined_util = combined_mem = None
    if sampler is not None:
        if window is not None:
            combined_util = summarize(sampler.window(*window))["util_mean_pct"]
        combined_mem = summarize(sampler.samples)["mem_used_max_bytes"]
    keys = [s.job.key for s in specs]
    out = []
    for i, (spec, row) in enumerate(zip(specs, full)):
        solo = solo_step_times.get(spec.job.key)
        mean = row.get("step_time_mean_s")
        out.append(_row_update(
            row, kind="colocated", group_id=group_id, slot=i,
            partners=json.dumps([k for j, k in enumerate(keys) if j != i]),
            solo_step_time_s=float(solo) if solo is not None else None,
            slowdown=(mean / solo) if row.get("status") == "ok" and mean is not None and solo else None,
            combined_util_mean_pct=combined_util, combined_mem_max_bytes=combined_mem,
        ))
    return out
