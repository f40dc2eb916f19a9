"""The isolated child process a run happens in: an OOM, a hang or a crash ends only the child.

Two ways to run a :class:`~gpucast.profile.runner.RunSpec` out of process, with the same row
semantics (status ``ok``/``oom``/``timeout``/``crash``/``error``; never raising for a job's
failure; the worker's whole process group killed on timeout and before it is reaped):

* :func:`run_isolated`: one fresh process per run (``python -m gpucast.profile.worker SPEC.json
  RESULT.json``). Every run pays the interpreter, ``import torch`` / torchvision / transformers
  and a CUDA context (3-5 s on the device machine, more than a run's GPU work).
* :class:`WorkerPool`: one persistent worker (``python -m gpucast.profile.worker --serve``) that
  pays that once and then runs spec after spec; a fresh process replaces it after any run that
  is not ``ok`` and every ``max_runs`` runs (see "Persistent worker" below).

One-shot child: reads a :class:`~gpucast.profile.runner.RunSpec` (``RunSpec.to_dict`` as JSON),
runs it with :func:`~gpucast.profile.runner.run_job` and always writes one schema row to
``RESULT.json``, atomically (a temporary file, then ``os.replace``): status ``ok``; ``oom`` for
``torch.cuda.OutOfMemoryError`` or a ``RuntimeError`` / allocator failure whose message says
the device ran out of memory; ``error`` with one line (``Type: first line of the message``) for
anything else. The start barrier of the spec (``start_file`` / ``start_at``, wall clock) is
waited for after set-up, inside ``run_job``.

Parent: :func:`run_isolated` starts the child in a session of its own (its process group), with
``PYTHONPATH`` led by the ``src`` directory of *this* gpucast so that the child runs the same
code, and waits. At ``timeout_s`` it kills the whole process group (status ``timeout``); a
child that exits without a result (a segfault, the OOM killer, SIGKILL) gives status ``crash``
with the last line of its stderr. It never raises for a job's failure; it raises ``JobError``
for a module job (factories are code: they cannot cross a process boundary). Whatever the
outcome, the child's process group is killed before the child is reaped, so nothing the job
started survives it. :class:`Child` is the same machinery without the waiting, for
:mod:`gpucast.profile.colocate`.

Persistent worker (``--serve``). At start, before reading anything, the worker imports
``PRELOAD`` (torch and ``torch._dynamo``, which the first optimizer of a process imports;
torchvision's models; transformers and the four Hugging Face model modules the zoo uses; the
zoo itself), creates the CUDA context of ``--device`` if one is given,
freezes the objects that exist by then out of the garbage collector (``gc.freeze``: they are
modules, and the collections between runs then take microseconds), and sends ``hello``. Then,
for each line on stdin (a ``RunSpec.to_dict`` JSON object), it runs the spec exactly as the
one-shot child does (:func:`execute`) and sends exactly one ``result`` message holding the row;
then it cleans up and sends ``idle``; then it reads the next line. End of stdin ends it.

Its result channel is a file descriptor of its own (``--result-fd N``, a pipe from the
parent), one JSON object per line: ``{"event": "hello", "pid", "preload_s", "init_s", ...}``,
``{"event": "result", "seq": N, "row": {...}}`` (``seq`` counts the spec lines this worker
read, from 1), ``{"event": "idle", "seq": N, "clean": bool, "leaked": {device: bytes}, ...}``.
Its stdout is not used for anything (the parent sends it to ``/dev/null``: torch and
transformers print warnings there); its stderr goes to a log file. Without ``--result-fd`` it
writes the messages to its original stdout and points file descriptor 1 at stderr first, so
that ``python -m gpucast.profile.worker --serve < specs.jsonl > results.jsonl`` works by hand.

Between runs. The job's model, optimizer, inputs and step live only in ``run_job``'s frame,
which is gone when the row is returned; the worker then runs ``gc.collect()`` (reference cycles
of models and tracebacks), frees cuBLAS's workspaces (torch allocates them through its caching
allocator and keeps them per handle, so they would otherwise stay allocated), calls
``torch.cuda.empty_cache()`` and ``torch.cuda.reset_peak_memory_stats()`` on every device, and
checks that ``torch.cuda.memory_allocated()`` is back to its value before the worker's first
run (its baseline, 0 in practice). If not, ``idle`` says ``clean: false`` and the parent ends
the worker before the next run (noted in :attr:`WorkerPool.notes`). So a run starts with no
tensor and no cached block left by an earlier one and with zeroed peak statistics: its
``torch_max_allocated_bytes`` / ``torch_max_reserved_bytes`` are its own, as in a fresh
process. NVML's process memory (``proc_mem_max_bytes``) still includes the CUDA context, as it
does in a fresh process; unlike a fresh process, that context also holds the kernel images
loaded (lazily, ``CUDA_MODULE_LOADING=LAZY``) by the earlier runs of the same worker, a few
tens to a few hundred MiB that grow with the variety of jobs; the restart every ``max_runs``
runs bounds that drift. cuDNN and cuBLAS heuristics caches also persist, which shortens the
warm-up of a later run with the same shapes but not its steady window. Restart policy (parent
side): a fresh process after any run whose status is not ``ok`` (an OOM or an error can leave
the CUDA context or the allocator in a bad state; it is rare, so the restart is cheap), after a
dirty ``idle``, when the worker died between runs, and every ``max_runs`` runs (default
``MAX_RUNS_PER_WORKER`` = 40) to bound drift.

Where the code is: the child's side in :mod:`gpucast.profile.child` (``execute``, ``serve``,
``main``), the one-shot parent in :mod:`gpucast.profile.isolated` (``run_isolated``, ``Child``),
the persistent parent in :mod:`gpucast.profile.pool` (``WorkerPool``), the process-group helpers
in :mod:`gpucast.profile.procs`, the failure rows and test faults in :mod:`gpucast.profile.faults`;
every name in ``__all__`` is importable from here, and ``python -m gpucast.profile.worker`` is
the entry point of both kinds of worker.

Test hooks (the no-GPU test boundary; unset in production):

* ``GPUCAST_PROFILE_FAKE_NVML=1``: the child samples a deterministic fake NVML
  (:class:`~gpucast.profile.nvml.ScriptedNvml`, a device named "gpucast fake GPU", which maps to no catalog GPU) in
  place of the real one, so that a CPU run (``RunSpec.device="cpu"``) exercises the sampler.
* ``GPUCAST_PROFILE_TEST_FAULT``: ``sigkill`` (the child prints a line to stderr and kills
  itself with SIGKILL as soon as it has read its spec), ``hang`` (the child starts a grandchild
  process and both sleep for an hour), ``leak`` (persistent worker only: after that run the
  worker reports memory above its baseline, as if the run had left a tensor behind), and the
  first-step faults of :mod:`gpucast.profile.step` (``oom``, ``oom-message``, ``error``);
  ``KIND@N`` targets only specs whose ``slot`` is ``N`` (the worker in co-location slot ``N``;
  in a persistent worker, any spec given that slot).
"""

from __future__ import annotations

import sys

from gpucast.profile.child import PRELOAD, execute, main, serve, write_row
from gpucast.profile.faults import failure_row, one_line  # noqa: F401
from gpucast.profile.isolated import Child, run_isolated
from gpucast.profile.nvml import FAKE_NVML_ENV, ScriptedNvml
from gpucast.profile.pool import MAX_RUNS_PER_WORKER, WorkerPool
from gpucast.profile.procs import child_env as _child_env  # noqa: F401  (the old private name)

__all__ = ["run_isolated", "Child", "WorkerPool", "serve", "execute", "failure_row", "write_row", "ScriptedNvml",
           "FAKE_NVML_ENV", "PRELOAD", "MAX_RUNS_PER_WORKER", "main"]


if __name__ == "__main__":
    sys.exit(main())
