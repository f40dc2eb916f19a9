"""The job's surroundings as data: validation, defaults and their precedence, keys (no torch)."""

from __future__ import annotations

import pytest

from gpucast import zoo
from gpucast.job import Job, JobError
from gpucast.surroundings import (DEFAULT_LOOP, DEFAULT_STACK, SOURCE_DEFAULTS, SOURCES, Data, Loop, Stack,
                                  infer_source, resolve)


def test_unset_surroundings_keep_the_jobs_key():
    """Jobs written before these fields existed keep their keys (caches, datasets, services)."""
    assert Job("resnet50").key == Job("resnet50", data={}, loop=Loop(), stack=None).key
    assert "data" not in Job("resnet50").to_dict()
    assert Job("resnet50", data={"num_workers": 2}).key != Job("resnet50").key


def test_round_trip_through_dicts_json_and_yaml(tmp_path):
    job = Job("resnet50", data={"source": "images", "num_workers": 8, "image_size": [500, 375]},
              loop={"item_calls": 2, "cudnn_benchmark": True}, stack={"torch": "1.13", "cpu_speed": 0.7})
    assert job.data == Data(source="images", num_workers=8, image_size=(500, 375))
    assert Job.from_dict(job.to_dict()) == job
    for name in ("job.json", "job.yaml"):
        job.save(tmp_path / name)
        assert Job.load(tmp_path / name) == job
    assert hash(job) == hash(Job.from_dict(job.to_dict()))


@pytest.mark.parametrize("fields,needles", [
    (dict(data={"source": "floppy"}), ("'data.source'", "floppy", "small-images")),
    (dict(data={"num_workers": 1.5}), ("'data.num_workers'",)),
    (dict(data={"pin_memory": "yes"}), ("'data.pin_memory'", "true or false")),
    (dict(data={"image_size": [224]}), ("'data.image_size'",)),
    (dict(data={"source": "custom"}), ("'data.per_sample_s'",)),
    (dict(data={"per_sample_s": -1}), ("'data.per_sample_s'",)),
    (dict(data={"workers": 2}), ("'data.workers'", "num_workers")),
    (dict(data=[1, 2]), ("'data'", "mapping")),
    (dict(loop={"item_calls": -1}), ("'loop.item_calls'",)),
    (dict(loop={"log_every": True}), ("'loop.log_every'",)),
    (dict(stack={"torch": "latest"}), ("'stack.torch'", "latest")),
    (dict(stack={"cpu_speed": 0}), ("'stack.cpu_speed'",)),
    (dict(stack={"cpu_cores": 0}), ("'stack.cpu_cores'",)),
])
def test_bad_fields_are_one_line_naming_the_field(fields, needles):
    with pytest.raises(JobError) as info:
        Job("resnet50", **fields)
    msg = str(info.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_precedence_job_over_workload_over_source_over_global():
    w = zoo.get("resnet50")
    sur = resolve(Job("resnet50"), w.data, w.loop)
    assert sur.data.source == "images" and sur.data.num_workers == 4 and sur.data.pin_memory is True
    assert sur.data.image_size == SOURCE_DEFAULTS["images"].image_size  # from the source's defaults
    assert sur.loop.cudnn_benchmark is True  # the recipe's, over the global default (False)
    assert sur.stack == DEFAULT_STACK
    mine = resolve(Job("resnet50", data={"num_workers": 12}, loop={"item_calls": 0}), w.data, w.loop)
    assert mine.data.num_workers == 12 and mine.data.source == "images" and mine.loop.item_calls == 0
    other = resolve(Job("resnet50", data={"source": "memory"}), w.data, w.loop)
    assert other.data.source == "memory" and other.data.num_workers == 4  # the recipe's workers stay
    assert all(v is not None for v in (*vars(sur.loop).values(), sur.stack.torch, sur.stack.cuda))
    assert resolve(Job("resnet50"), None, None, "tokens").loop == DEFAULT_LOOP


def test_every_zoo_workload_declares_its_scripts_loader_and_loop():
    for w in zoo.workloads():
        assert isinstance(w.data, Data) and w.data.source in SOURCES, w.name
        assert isinstance(w.loop, Loop) and w.script, w.name
    assert zoo.get("resnet18-cifar").data.source == "small-images"
    assert zoo.get("lstm-lm-small").data.source == "device"  # word_language_model batchifies onto the GPU
    assert zoo.get("gpt2").data.source == "tokens"
    assert zoo.get("ppo-mlp").data.source == "environment"


def test_inputs_suggest_a_source_for_jobs_no_workload_describes():
    assert infer_source([("int64", (128,))]) == "tokens"
    assert infer_source([("float32", (3, 224, 224))]) == "images"
    assert infer_source([("float32", (3, 32, 32))]) == "small-images"
    assert infer_source([("float32", (784,))]) == "memory"


def test_stack_versions_decide_foreach_and_lazy_loading():
    assert Stack(torch="2.0").merged(DEFAULT_STACK).foreach_optimizers
    assert not Stack(torch="1.13").merged(DEFAULT_STACK).foreach_optimizers
    assert Stack(torch="2.1", cuda="12.1").lazy and not Stack(torch="2.1", cuda="11.6").lazy
    assert not Stack(torch="1.13", cuda="11.7").lazy
    assert Stack(torch="1.13", cuda="11.7", lazy_loading=True).lazy
    assert Stack(torch=2.1).torch == "2.1"  # YAML reads 2.1 as a number
