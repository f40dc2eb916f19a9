"""``POST /v1/pack``: several one-GPU jobs on one GPU in every sharing mode
(:func:`gpucast.advisor.pack.pack`) behind the service's limits.

Each job is read as ``/v1/predict`` reads it (:func:`gpucast.service.jobs.job_from_spec`: code,
server files and spec files refused with 422); the GPU is a catalog name (a MIG slice, or more than
:data:`gpucast.advisor.pack.MAX_JOBS` jobs, is a 422 with the one line ``gpucast pack`` prints).
Answers go through ``/v1/advise``'s keyed cache (:class:`gpucast.service.advise.Advisor`): cached by
the jobs' keys and the GPU, one computation for identical requests at once, waiting bounded by
``prediction_timeout_s`` (408).
"""

from __future__ import annotations

import hashlib
import json

from gpucast.service.advise import Advisor
from gpucast.service.cache import ServiceError
from gpucast.service.jobs import gpu_names, job_from_spec


class Packer(Advisor):
    NAME, WHAT = "gpucast-pack", "pack"

    def _request(self, body: dict):
        """(cache key, jobs, the GPU) of a validated request body; ServiceError(422)."""
        from gpucast.advisor.pack import MAX_JOBS

        if not 2 <= len(body["jobs"]) <= MAX_JOBS:     # before reading any (the answer pack gives)
            raise ServiceError(422, f"pack takes 2 to {MAX_JOBS} jobs, got {len(body['jobs'])}")
        jobs = [job_from_spec(spec, self.settings) for spec in body["jobs"]]
        gpu = gpu_names(body["gpu"], self.settings)[0]
        key = hashlib.sha256(json.dumps(["pack", [j.key for j in jobs], gpu]).encode()).hexdigest()
        return key, jobs, gpu

    def _answer(self, jobs, gpu) -> dict:
        from gpucast.advisor.pack import pack

        return pack(jobs, gpu, env=self.settings.environment).to_dict()

    def _subject(self, jobs) -> str:
        return f"packing {', '.join(j.model for j in jobs)}"
