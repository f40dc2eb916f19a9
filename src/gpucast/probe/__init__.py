"""CPU-side measurements on this machine: no GPU is needed or touched.

* ``host``     PyTorch's dispatcher and loader primitives on this CPU: its single-thread speed
               relative to the reference core (:func:`gpucast.probe.host.cpu_speed_here`) and an
               environment file of host constants.
* ``dataset``  a job's own data: times a user's ``Dataset.__getitem__`` and collation, or an RL
               environment's ``step``, and turns them into the job's ``data.per_sample_s`` and
               ``sample_bytes`` in reference-core seconds (:func:`gpucast.probe.dataset.resolve_job`).

These run a user's code and read this host, so only the CLI and the Python API call them; the
HTTP service never imports this package and refuses jobs that name code (``data.dataset``,
``data.collate``, ``data.environment``). Nothing here is imported at ``import gpucast``.
"""
