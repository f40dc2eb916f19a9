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
* ``runner``   one job for real on a device: warm-up, steady window, CUDA-event step times.
* ``worker``   where a run happens: a child process per run (``run_isolated``) or a persistent
               worker (``WorkerPool``) replaced after any failure; an OOM or a crash ends only it.
* ``colocate`` two or three workers on one GPU at once: slowdown against solo.
* ``suite``    the ordered list of configurations and the time-boxed loop that measures them.

Measured numbers come only from real runs; every row carries its provenance.
"""
