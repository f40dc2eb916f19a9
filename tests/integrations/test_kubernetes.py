"""The HAMi mutating admission webhook, fed real AdmissionReview v1 request bodies.

Pods are built with the kubernetes client's models (``V1Pod``, ``V1Container``,
``V1ResourceRequirements``...) and serialized as the API server sends them
(``ApiClient().sanitize_for_serialization``, then a JSON round trip). The returned JSON patch is
applied with a strict RFC 6902 applier written here (``jsonpatch`` is not installed): a path
that is not escaped per RFC 6901, or that points into an object that does not exist, fails.
Real predictions (``gpucast.api.predict``) size the first tests; the hand-checked arithmetic
ones inject a Prediction with chosen numbers.
"""

from __future__ import annotations

import base64
import copy
import json
import math

import pytest

k8s = pytest.importorskip("kubernetes.client")

from gpucast.api import predict  # noqa: E402
from gpucast.integrations import kubernetes as hook  # noqa: E402
from gpucast.integrations.resources import gpu_share  # noqa: E402
from gpucast.prediction import Prediction  # noqa: E402
from made_predictions import made_prediction

MIB = 2**20
SMALL = {"model": "mlp-small", "batch_size": 32}
LARGE = {"model": "resnet50", "batch_size": 64}


# ------------------------------------------------------------------ a strict RFC 6902 applier
def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc, path):
    *head, last = _tokens(path)
    node = doc
    for t in head:
        node = node[int(t)] if isinstance(node, list) else node[t]   # KeyError: parent missing
    return node, last


def apply_patch(doc, ops):
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, key = _parent(doc, op["path"])
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if key == "-" else int(key), op["value"])
            else:
                assert isinstance(parent, dict), op
                parent[key] = op["value"]
        elif op["op"] == "replace":
            if isinstance(parent, list):
                parent[int(key)] = op["value"]
            else:
                assert key in parent, f"replace of a missing member: {op}"
                parent[key] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(key)]
            else:
                assert key in parent, f"remove of a missing member: {op}"
                del parent[key]
        else:
            raise AssertionError(f"unexpected op {op}")
    return doc


# ------------------------------------------------------------------ building requests
def make_pod(annotations=None, containers=None):
    containers = containers or [k8s.V1Container(name="train", image="pytorch/pytorch:2.4.0",
                                                resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]
    return k8s.V1Pod(api_version="v1", kind="Pod",
                     metadata=k8s.V1ObjectMeta(generate_name="train-", namespace="ml", annotations=annotations),
                     spec=k8s.V1PodSpec(containers=containers, restart_policy="Never"))


def make_review(pod, uid="705ab4f5-6393-11e8-b7cc-42010a800002", kind="Pod", operation="CREATE"):
    obj = k8s.ApiClient().sanitize_for_serialization(pod)
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": kind},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": kind},
                        "namespace": "ml", "operation": operation,
                        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                        "object": obj, "oldObject": None, "dryRun": False,
                        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}
    return json.loads(json.dumps(body))  # as it comes off the wire


def job_annotations(spec, gpu=None, **extra):
    a = {"gpucast.ai/job": json.dumps(spec), **extra}
    if gpu:
        a["gpucast.ai/gpu"] = gpu
    return a


def decoded(out):
    return json.loads(base64.b64decode(out["response"]["patch"]))


def patched(review, out):
    return apply_patch(review["request"]["object"], decoded(out))


def _pred(util=30.0, mem_hi=3 * 2**30, **kw) -> Prediction:
    return made_prediction(util, mem_hi, **kw)


# ------------------------------------------------------------------ pass-through
def test_pod_without_the_annotation_passes_unchanged():
    review = make_review(make_pod(annotations={"team": "vision"}))
    calls = []
    out = hook.mutate(review, lambda spec, gpu: calls.append(spec))
    assert out == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": review["request"]["uid"], "allowed": True}}
    assert calls == []  # nothing predicted


def test_pod_without_any_annotations_and_non_pods_pass():
    out = hook.mutate(make_review(make_pod(annotations=None)))
    assert out["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    annotated = make_pod(annotations=job_annotations(SMALL))
    for review in (make_review(annotated, kind="Deployment"), make_review(annotated, operation="UPDATE")):
        assert hook.mutate(review, lambda *a: pytest.fail("must not predict"))["response"]["allowed"] is True
        assert "patch" not in hook.mutate(review)["response"]


def test_request_without_uid_is_not_an_admission_review():
    with pytest.raises(ValueError, match="uid"):
        hook.mutate({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}})
    with pytest.raises(ValueError):
        hook.mutate({"kind": "AdmissionReview"})


# ------------------------------------------------------------------ real predictions
def test_small_job_gets_hami_limits_from_its_share():
    gpu_container = k8s.V1Container(name="train", image="pytorch/pytorch:2.4.0",
                                    resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1", "cpu": "4"},
                                                                         requests={"cpu": "2"}))
    sidecar = k8s.V1Container(name="logs", image="busybox", resources=k8s.V1ResourceRequirements(limits={"cpu": "1"}))
    review = make_review(make_pod(job_annotations(SMALL), [sidecar, gpu_container]))
    out = hook.mutate(review)
    r = out["response"]
    assert r["allowed"] is True and r["patchType"] == "JSONPatch" and r["uid"] == review["request"]["uid"]
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    pod = patched(review, out)

    p = predict(SMALL, "a100-80gb")
    mem = math.ceil(p.memory_interval[1] * 1.1)                       # upper end + 10 % headroom, bytes
    # the held share (not NVML's reading) + 10 points, in steps of 5 %
    share = max(math.ceil((p.gpu_held_pct + 10) / 5 - 1e-9) * 5, math.ceil(mem / (80 * 2**30) * 20 - 1e-9) * 5)
    assert share < 100                                                # a shared job (about 35 %)
    limits = pod["spec"]["containers"][1]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "cpu": "4", "nvidia.com/gpumem": str(math.ceil(mem / MIB)),
                      "nvidia.com/gpucores": str(share)}
    assert pod["spec"]["containers"][1]["resources"]["requests"] == {"cpu": "2"}
    assert pod["spec"]["containers"][0] == review["request"]["object"]["spec"]["containers"][0]  # sidecar untouched
    ann = pod["metadata"]["annotations"]
    assert ann["gpucast.ai/model-version"] == p.model_version
    pred = json.loads(ann["gpucast.ai/prediction"])
    assert pred["gpu_util_pct"] == p.gpu_util_pct and pred["gpu_util_interval"] == list(p.gpu_util_interval)
    assert pred["memory_peak_bytes"] == p.memory_peak_bytes and pred["memory_interval"] == list(p.memory_interval)
    assert pred["step_time_s"] == p.step_time_s and pred["gpu"] == "a100-80gb"
    assert pred["share"] * 100 == pytest.approx(share) and pred["exclusive"] is False
    assert ann["gpucast.ai/job"] == json.dumps(SMALL)                  # the user's annotation is kept
    # RFC 6901 escapes in the raw patch
    paths = [op["path"] for op in decoded(out)]
    assert "/spec/containers/1/resources/limits/nvidia.com~1gpumem" in paths
    assert "/metadata/annotations/gpucast.ai~1prediction" in paths
    assert not any(path.startswith("/spec/containers/0") for path in paths)


def test_large_job_gets_a_whole_gpu_and_missing_objects_are_created():
    # No container asks for a GPU and none has resources: the first container is sized.
    containers = [k8s.V1Container(name="train", image="pytorch/pytorch:2.4.0"),
                  k8s.V1Container(name="other", image="busybox")]
    review = make_review(make_pod(job_annotations(LARGE, gpu="A100-80GB"), containers))
    assert "resources" not in review["request"]["object"]["spec"]["containers"][0]
    out = hook.mutate(review)
    pod = patched(review, out)
    assert gpu_share(predict(LARGE, "a100-80gb")).exclusive
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}}
    assert "resources" not in pod["spec"]["containers"][1]
    assert decoded(out)[0] == {"op": "add", "path": "/spec/containers/0/resources",
                               "value": pod["spec"]["containers"][0]["resources"]}
    assert json.loads(pod["metadata"]["annotations"]["gpucast.ai/prediction"])["exclusive"] is True


# ------------------------------------------------------------------ hand-checked arithmetic
def test_arithmetic_requests_and_conflicting_memory_key():
    # util 30 % -> 40 % cores; memory 3 GiB x 1.1 = 3379.2 MiB -> 3380 MiB.
    c = k8s.V1Container(name="train", image="x", resources=k8s.V1ResourceRequirements(
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "90"},
        requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "90"}))
    seen = []
    review = make_review(make_pod(job_annotations({"model": "whatever", "batch_size": 8}), [c]))
    out = hook.mutate(review, lambda spec, gpu: seen.append((spec, gpu)) or _pred(util=30.0, mem_hi=3 * 2**30))
    assert seen == [({"model": "whatever", "batch_size": 8}, "a100-80gb")]     # the default GPU
    res = patched(review, out)["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3380", "nvidia.com/gpucores": "40"}
    assert res["requests"] == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "40"}   # equal to limits; gpumem defaults
    assert "warnings" not in out["response"]


def test_requests_only_gpu_limits_created_and_count_mismatch_warns():
    c = k8s.V1Container(name="train", image="x", resources=k8s.V1ResourceRequirements(requests={"nvidia.com/gpu": "2"}))
    review = make_review(make_pod(job_annotations({"model": "m"}), [c]))
    out = hook.mutate(review, lambda spec, gpu: _pred(util=62.0, mem_hi=2**30))
    res = patched(review, out)["spec"]["containers"][0]["resources"]
    # 62 + 10 = 72 % -> 75 % on the 0.05 grid; 1 GiB x 1.1 = 1126.4 MiB -> 1127
    assert res["limits"] == {"nvidia.com/gpucores": "75", "nvidia.com/gpumem": "1127", "nvidia.com/gpu": "2"}
    assert res["requests"] == {"nvidia.com/gpu": "2"}
    assert len(out["response"]["warnings"]) == 1 and "gpus=1" in out["response"]["warnings"][0]


def test_data_parallel_job_sets_gpu_count_and_gpu_annotation_is_used():
    c = k8s.V1Container(name="train", image="x", resources=k8s.V1ResourceRequirements(limits={"memory": "8Gi"}))
    seen = []
    review = make_review(make_pod(job_annotations({"model": "m", "gpus": 4}, gpu="h100"), [c]))
    out = hook.mutate(review, lambda spec, gpu: seen.append(gpu) or _pred(util=20.0, mem_hi=2**30, gpus=4, gpu=gpu))
    assert seen == ["h100"]
    limits = patched(review, out)["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "4" and limits["nvidia.com/gpucores"] == "30" and limits["memory"] == "8Gi"


def test_stale_prediction_annotation_is_replaced():
    review = make_review(make_pod(job_annotations({"model": "m"}, **{"gpucast.ai/prediction": "old",
                                                                     "gpucast.ai/model-version": "old"})))
    out = hook.mutate(review, lambda spec, gpu: _pred())
    ann = patched(review, out)["metadata"]["annotations"]
    assert ann["gpucast.ai/model-version"] == "analytic-test" and json.loads(ann["gpucast.ai/prediction"])["share"] == 0.4


def test_job_that_does_not_fit_is_admitted_whole_with_a_warning():
    review = make_review(make_pod(job_annotations({"model": "m"})))
    out = hook.mutate(review, lambda spec, gpu: _pred(util=40.0, mem_hi=120 * 2**30, fits=False))
    assert out["response"]["allowed"] is True
    limits = patched(review, out)["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpucores"] == "100" and limits["nvidia.com/gpumem-percentage"] == "100"
    assert "does not fit" in out["response"]["warnings"][0]


# ------------------------------------------------------------------ plans across nodes
LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 256}
FSDP16 = {"model": "hf:llama", "hf_config": LLAMA, "batch_size": 4, "seq_len": 256, "precision": "bf16",
          "optimizer": "adamw", "gpus": 16, "parallel": {"sharding": "fsdp-full"}}


def test_a_16_gpu_fsdp_plan_is_one_whole_gpu_pod_per_node_end_to_end():
    # the real prediction of a small Llama with FSDP over 16 GPUs: its plan spans two 8-GPU nodes,
    # so each worker pod (one per node, the same annotation on each) gets 8 whole GPUs
    assert predict(FSDP16, "a100-80gb").plan["nodes"] == 2
    worker = k8s.V1Container(name="worker", image="pytorch/pytorch:2.4.0",
                             resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "8", "cpu": "32"}))
    review = make_review(make_pod(job_annotations(FSDP16), [worker]))
    out = hook.mutate(review)
    assert out["response"]["allowed"] is True and "warnings" not in out["response"]
    pod = patched(review, out)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "8", "cpu": "32", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}
    ann = pod["metadata"]["annotations"]
    assert ann["gpucast.ai/nodes"] == "2" and ann["gpucast.ai/gpus-per-node"] == "8"
    pred = json.loads(ann["gpucast.ai/prediction"])
    assert pred["exclusive"] is True and pred["whole_nodes"] is True and pred["nodes"] == 2


def test_a_pod_of_a_plan_across_nodes_gets_its_nodes_gpus_whatever_it_asked():
    c = k8s.V1Container(name="train", image="x", resources=k8s.V1ResourceRequirements(
        limits={"nvidia.com/gpu": "16", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"},
        requests={"nvidia.com/gpu": "16"}))
    review = make_review(make_pod(job_annotations({"model": "m", "gpus": 16}), [c]))
    out = hook.mutate(review, lambda spec, gpu: _pred(util=20.0, gpus=16, nodes=2))
    res = patched(review, out)["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "8", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}
    assert res["requests"] == {"nvidia.com/gpu": "8"}              # equal to limits
    (warning,) = out["response"]["warnings"]
    assert "asks for 16" in warning and "8 GPUs on each of 2 nodes" in warning
    # a plan inside one node: one exclusive pod of its GPUs, no node annotations
    review = make_review(make_pod(job_annotations({"model": "m", "gpus": 8})))
    out = hook.mutate(review, lambda spec, gpu: _pred(util=20.0, gpus=8, nodes=1))
    pod = patched(review, out)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "8", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}
    assert "gpucast.ai/nodes" not in pod["metadata"]["annotations"]
    assert "8 GPUs on one node" in out["response"]["warnings"][0]        # the template asked for 1


def test_node_pods_spell_one_pod_per_node():
    assert hook.node_pods(_pred(gpus=12, nodes=2)) == [
        {"limits": {"nvidia.com/gpu": "8", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}},
        {"limits": {"nvidia.com/gpu": "4", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}}]
    assert hook.node_pods(_pred(util=30.0, mem_hi=3 * 2**30)) == [
        {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "40", "nvidia.com/gpumem": "3380"}}]


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("annotations, needle", [
    ({"gpucast.ai/job": "{model: resnet50"}, "not valid JSON"),
    ({"gpucast.ai/job": "[1, 2]"}, "must be a JSON object"),
    ({"gpucast.ai/job": json.dumps({"model": "resnet-9000"})}, "unknown zoo workload 'resnet-9000'"),
    ({"gpucast.ai/job": json.dumps({"model": "resnet50", "batch": 3})}, "unknown field 'batch'"),
    ({"gpucast.ai/job": json.dumps({"model": "onnx:/etc/passwd"})}, "names a file"),
    ({"gpucast.ai/job": json.dumps(SMALL), "gpucast.ai/gpu": "tpu-v5"}, "unknown GPU 'tpu-v5'"),
    ({"gpucast.ai/job": json.dumps(SMALL), "gpucast.ai/gpu": "/etc/gpu.yaml"}, "must be a GPU name"),
])
def test_bad_annotation_is_denied_with_400(annotations, needle):
    review = make_review(make_pod(annotations))
    out = hook.mutate(review)
    r = out["response"]
    assert r["allowed"] is False and "patch" not in r and r["uid"] == review["request"]["uid"]
    assert r["status"]["code"] == 400 and needle in r["status"]["message"], r["status"]
    assert r["status"]["message"].startswith("gpucast: ") and "\n" not in r["status"]["message"]


def test_predictor_failure_is_denied_with_500():
    def broken(spec, gpu):
        raise RuntimeError("cache backend down")

    r = hook.mutate(make_review(make_pod(job_annotations(SMALL))), broken)["response"]
    assert r["allowed"] is False and r["status"]["code"] == 500
    assert r["status"]["message"] == "gpucast: prediction failed: cache backend down"


def test_a_capture_failure_is_the_pods_400_unless_gpucast_broke():
    from gpucast.graph.tracer import CaptureError

    def failing(cause):
        def predict(spec, gpu):
            try:
                raise cause
            except Exception as exc:
                raise CaptureError(f"building the model failed: {type(exc).__name__}: {exc}") from exc
        return predict

    review = make_review(make_pod(job_annotations(SMALL)))
    shapes = hook.mutate(review, failing(RuntimeError("mat1 and mat2 shapes cannot be multiplied")))["response"]
    assert shapes["status"]["code"] == 400, shapes["status"]
    broke = hook.mutate(review, failing(AttributeError("module 'transformers' has no attribute 'AutoConfig'")))
    assert broke["response"]["status"]["code"] == 500, broke["response"]["status"]
    assert broke["response"]["status"]["message"].startswith("gpucast: prediction failed: building the model failed")


def test_escape_is_rfc6901():
    assert hook.escape("nvidia.com/gpumem") == "nvidia.com~1gpumem"
    assert hook.escape("a~/b") == "a~0~1b"          # ~ first, then /
    assert _tokens("/x/a~0~1b") == ["x", "a~/b"]


# ------------------------------------------------------------------ MIG slices


def test_a_pod_on_a_mig_slice_asks_for_that_slice_and_no_whole_gpu():
    c = k8s.V1Container(name="train", image="pytorch/pytorch:2.4.0",
                        resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000",
                                                                     "cpu": "4"},
                                                             requests={"nvidia.com/gpu": "1", "cpu": "2"}))
    review = make_review(make_pod(job_annotations(SMALL, gpu="A100-80GB:1g.10gb"), [c]))
    out = hook.mutate(review)
    assert out["response"]["allowed"] is True, out
    pod = patched(review, out)
    # the NVIDIA device plugin's "mixed" strategy names a slice nvidia.com/mig-<profile>
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": "1", "cpu": "4"},
                                                          "requests": {"cpu": "2"}}
    pred = json.loads(pod["metadata"]["annotations"]["gpucast.ai/prediction"])
    assert pred["gpu"] == "a100-80gb:1g.10gb"
    assert pred["step_time_s"] == predict(SMALL, "a100-80gb:1g.10gb").step_time_s


def test_a_data_parallel_job_on_a_mig_slice_is_denied_in_one_line():
    review = make_review(make_pod(job_annotations({**SMALL, "gpus": 2}, gpu="h100:3g.40gb")))
    r = hook.mutate(review)["response"]
    assert r["allowed"] is False and r["status"]["code"] == 400
    assert "h100:3g.40gb is a MIG slice, one device per pod, but the job runs on 2 GPUs" in r["status"]["message"]


def test_a_bad_mig_profile_annotation_is_denied_naming_the_closest():
    r = hook.mutate(make_review(make_pod(job_annotations(SMALL, gpu="a100-80gb:1g.5gb"))))["response"]
    assert r["allowed"] is False and r["status"]["code"] == 400
    assert "did you mean a100-80gb:1g.10gb?" in r["status"]["message"]


# ------------------------------------------------------------------ sharing modes (gpucast.ai/sharing)
def _sized(sharing, containers=None, gpu=None, spec=None, **pod_spec):
    review = make_review(make_pod(job_annotations(spec or SMALL, gpu=gpu, **{"gpucast.ai/sharing": sharing}),
                                  containers))
    for k, v in pod_spec.items():
        review["request"]["object"]["spec"][k] = v
    out = hook.mutate(review)
    assert out["response"]["allowed"] is True, out
    return patched(review, out), out["response"].get("warnings", [])


def _share_pct():
    return round(hook.gpu_share(predict(SMALL, "a100-80gb")).share * 100)


def test_mps_sharing_asks_for_a_replica_and_sets_the_clients_limits():
    c = k8s.V1Container(name="train", image="pytorch/pytorch:2.4.0", env=[k8s.V1EnvVar(name="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value="100"),
                                                                       k8s.V1EnvVar(name="A", value="b")],
                        resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}))
    pod, warnings = _sized("mps", [c])
    ctr = pod["spec"]["containers"][0]
    assert ctr["resources"]["limits"] == {"nvidia.com/gpu": "1"}          # HAMi's keys gone
    env = {e["name"]: e["value"] for e in ctr["env"]}
    mib = math.ceil(hook.gpu_share(predict(SMALL, "a100-80gb")).memory_bytes / MIB)
    assert env == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(_share_pct()), "A": "b",
                   "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={mib}M"}
    assert 0 < _share_pct() < 100 and not warnings


def test_time_slicing_asks_for_a_replica_and_runai_for_a_fraction():
    pod, _ = _sized("timeslice")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "env" not in pod["spec"]["containers"][0]
    pod, warnings = _sized("runai")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {}
    assert pod["metadata"]["annotations"]["gpu-fraction"] == f"{_share_pct() / 100:g}"
    assert any("runai-scheduler" in w for w in warnings)
    _pod, warnings = _sized("RunAI", schedulerName="runai-scheduler")
    assert not warnings


def test_a_job_that_needs_whole_gpus_gets_them_in_every_mode_with_a_warning_on_replicas():
    big = {"model": "resnet50", "batch_size": 256}
    for mode in ("mps", "timeslice"):
        pod, warnings = _sized(mode, spec=big)
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert any("unshared pool" in w for w in warnings), warnings
    pod, _ = _sized("runai", spec=big)
    assert "gpu-fraction" not in pod["metadata"]["annotations"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_an_unknown_sharing_mode_is_denied_in_one_line():
    r = hook.mutate(make_review(make_pod(job_annotations(SMALL, **{"gpucast.ai/sharing": "vgpu"}))))["response"]
    assert r["allowed"] is False and r["status"]["code"] == 400
    assert r["status"]["message"] == ("gpucast: annotation gpucast.ai/sharing must be one of hami, mps, timeslice, "
                                      "runai, got 'vgpu'")
