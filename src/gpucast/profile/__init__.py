"""Real-GPU measurement: run a gpucast Job for real, sample NVML, store one Parquet row per run.

This package is the only place gpucast touches a GPU. The predictor path never imports it.
It must run with the device image's own Python and packages (torch, torchvision,
transformers, numpy, pyarrow, nvidia-ml-py, pyyaml, rich; the project on PYTHONPATH, not
installed), so it imports nothing else.

Modules, one job each:

* ``nvml``     the hardware boundary: a small ``NvmlBackend`` protocol over nvidia-ml-py
               (``PynvmlBackend``); tests substitute a fake here and only here.
* ``sampler``  a background thread reading the backend at >= 20 Hz; windows and aggregates.
* ``schema``   the row: every column, its type and meaning (one row per run).
* ``dataset``  the append-only Parquet store: atomic part files, resume, compaction.
* ``spec``     what to measure (``RunSpec``), the one thing that crosses into a worker.
* ``provenance`` the row's provenance columns (job, software, host CPU, GPU).
* ``faults``   failure rows, OOM classification, and the no-GPU test faults.
* ``step``     one step of a job on a device (model, optimizer, emulated loader, timer).
* ``runner``   one job for real on a device: warm-up, steady window, CUDA-event step times.
* ``worker``   where a run happens (the entry point ``python -m gpucast.profile.worker``): a child
               process per run (``isolated``) or a persistent worker (``pool``) replaced after any
               failure; an OOM or a crash ends only it. ``child`` is the worker process's side,
               ``procs`` the process-group helpers.
* ``sync``     the rendezvous files of a co-located group.
* ``colocate`` two or three workers on one GPU at once: slowdown against solo.
* ``suite``    the time-boxed loop that measures the suite; ``suite_plan`` the ordered list of
               configurations, ``suite_store`` the rows read and the compacted copy written.

Measured numbers come only from real runs; every row carries its provenance.
"""
