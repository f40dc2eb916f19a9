"""data.dataset / data.collate / data.environment: FILE.py:FUNCTION references, checked for shape
only (gpucast.surroundings imports no torch and runs no code), part of the job key, and what they
imply for the data source."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpucast import Job
from gpucast.job import JobError
from gpucast.surroundings import Data, SpecError, resolve


@pytest.mark.parametrize("fields, words", [
    (dict(dataset="train.py"), "field 'data.dataset' must be FILE.py:FUNCTION"),
    (dict(dataset="train.py:make-data"), "field 'data.dataset' must be FILE.py:FUNCTION"),
    (dict(dataset="train.txt:make"), "field 'data.dataset' must be FILE.py:FUNCTION"),
    (dict(dataset=3), "field 'data.dataset' must be FILE.py:FUNCTION"),
    (dict(dataset="a.py:f", collate="c.py"), "field 'data.collate' must be FILE.py:FUNCTION"),
    (dict(environment="rl.py:"), "field 'data.environment' must be FILE.py:FUNCTION"),
    (dict(dataset="a.py:f", environment="rl.py:make_env"), "give data.dataset or data.environment, not both"),
    (dict(collate="c.py:collate"), "field 'data.collate' applies with data.dataset"),
    (dict(environment="rl.py:make_env", source="images"), "field 'data.source' must be 'environment'"),
])
def test_bad_references_are_one_line_naming_the_field(fields, words):
    with pytest.raises(SpecError) as exc:
        Data(**fields)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(JobError, match="field 'data."):
        Job("mlp-small", data=fields)


def test_references_are_part_of_the_job_key():
    a = Job("mlp-small", data=Data(dataset="train.py:make_dataset"))
    b = Job("mlp-small", data=Data(dataset="train.py:other"))
    c = Job("mlp-small", data=Data(dataset="train.py:make_dataset", collate="train.py:collate"))
    assert len({a.key, b.key, c.key, Job("mlp-small").key}) == 4
    assert Job.from_dict(a.to_dict()) == a and a.to_dict()["data"] == {"dataset": "train.py:make_dataset"}


def test_custom_still_needs_per_sample_s_without_a_dataset():
    with pytest.raises(SpecError, match="data.per_sample_s' is required"):
        Data(source="custom")
    assert Data(source="custom", per_sample_s=0.001).per_sample_s == 0.001
    assert Data(source="custom", dataset="train.py:make").dataset == "train.py:make"


def test_a_named_dataset_replaces_the_workload_loader():
    """resnet50's typical script reads ImageNet JPEGs with 4 workers; a job that names its own
    dataset is fed by it: source custom, DataLoader's defaults unless the job says otherwise."""
    job = Job("resnet50", data=Data(dataset="train.py:make"))
    s = resolve(job, workload_data=Data(source="images", num_workers=4, pin_memory=True, dataset_samples=1_281_167))
    assert s.data.source == "custom" and s.data.num_workers == 0 and s.data.dataset_samples is None
    s = resolve(Job("resnet50", data=Data(dataset="train.py:make", source="images")),
                workload_data=Data(source="images", num_workers=8))
    assert s.data.source == "images" and s.data.num_workers == 4  # the source's defaults, not the workload's
    s = resolve(Job("mlp-small", data=Data(environment="rl.py:make_env")))
    assert s.data.source == "environment"


def test_surroundings_still_imports_no_torch():
    code = "import sys, gpucast.surroundings, gpucast.job; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
