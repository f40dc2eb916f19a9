"""Request and response bodies of the HTTP service (pydantic), as the OpenAPI schema shows them.

A job spec names its model one way: ``workload`` (a zoo name; ``model`` is accepted as its
alias, the name of the field in :class:`gpucast.job.Job`) or ``hf_config`` (a Hugging Face
config.json's content; ``{"model_type": "bert"}`` is that architecture's defaults). ONNX files
come through the multipart upload ``POST /v1/predict/onnx``. Values are checked by
:class:`gpucast.job.Job` (422 with its message), so bounds are stated once, there.

The job spec's groups (``data`` ... ``serve``) are :mod:`gpucast.service.job_groups`'.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from gpucast.service.job_groups import (AdapterSpec, DataSpec, LoopSpec, Mode, Optimizer, ParallelSpec, Precision,
                                        Recompute, ServeSpec, Sharding, StackSpec)


class JobSpec(BaseModel):
    """One job, as a scheduler receives it (the fields of gpucast's job spec)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"workload": "resnet50", "batch_size": 64, "precision": "amp-bf16"}]})

    workload: Optional[str] = Field(None, description="A zoo name (GET /v1/zoo).")
    model: Optional[str] = Field(None, description="Alias of `workload` (zoo names only: no `module:`, "
                                                   "`onnx:` or `hf:` models).")
    hf_config: Optional[dict[str, Any]] = Field(None, description="A Hugging Face config.json's content "
                                                                  "(needs `model_type`).")
    batch_size: StrictInt = Field(32, description="Batch size per GPU (serve: a static batch's prompts).")
    seq_len: Optional[StrictInt] = Field(None, description="Sequence length (sequence models).")
    input_shape: Optional[list[StrictInt]] = Field(None, description="Per-sample input shape, e.g. [3, 224, 224].")
    precision: Precision = Field("fp32", description="amp-*: autocast; bf16/fp16: pure half-precision weights; "
                                                      "fp8, mxfp8, nvfp4: Transformer Engine's recipes.")
    mode: Mode = Field("train", description="train, infer, or serve (an LLM deployment: the serve group).")
    optimizer: Optimizer = Field("sgd", description="The training step's optimizer (none for inference).")
    input_pipeline_s: Union[StrictFloat, StrictInt] = Field(0.0, description="Host input-pipeline seconds per step.")
    gpus: StrictInt = Field(1, description="Data-parallel GPUs of the job (not GPU types: see `gpu`).")
    data: Optional[DataSpec] = Field(None, description="The data loader (default: the workload's typical script).")
    loop: Optional[LoopSpec] = Field(None, description="The loop's habits (default: the workload's typical script).")
    stack: Optional[StackSpec] = Field(None, description="Software stack and host (default: PyTorch 2.4, CUDA 12.1).")
    parallel: Optional[ParallelSpec] = Field(None, description="Tensor/pipeline degrees, sharding, recomputation, "
                                                               "accumulation, nodes (default: DDP in one node).")
    adapter: Optional[AdapterSpec] = Field(None, description="LoRA/QLoRA adapters (default: every weight trains).")
    serve: Optional[ServeSpec] = Field(None, description="With mode 'serve': an LLM deployment's requests, load and "
                                                         "engine (answer: the prediction's `serving`).")


GpuField = Field("a100-80gb", description="A catalog GPU name (GET /v1/gpus), or a list of them: the answer "
                                          "is then a list of predictions in the same order.")


class PredictRequest(JobSpec):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"workload": "resnet50", "batch_size": 64, "gpu": "a100-80gb"},
                     {"workload": "resnet18-cifar", "batch_size": 128, "gpu": ["t4", "h100"]}]})

    gpu: Union[str, list[str]] = GpuField


class PriceEntry(BaseModel):
    """One price (gpucast.advisor.prices): a catalog GPU's USD per GPU-hour and where it comes from."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    usd_per_gpu_hour: Union[StrictFloat, StrictInt]
    provider: Optional[str] = None
    offer: Optional[str] = None
    as_of: Optional[str] = None
    source: Optional[str] = None


class AdviseRequest(JobSpec):
    """A job and what to search: GPU types, counts, batches, precisions, shares; prices; constraints."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"workload": "resnet50", "batch_size": 64, "epochs": 90, "deadline_s": 86400},
                     {"workload": "bert-base", "batch_size": 32, "gpu": ["t4", "a100-80gb"], "samples_per_epoch": 100000,
                      "prices": [{"gpu": "t4", "usd_per_gpu_hour": 0.11, "provider": "gcp", "offer": "spot"},
                                 {"gpu": "a100-80gb", "usd_per_gpu_hour": 1.2, "provider": "on-prem"}]}]})

    gpu: Optional[Union[str, list[str]]] = Field(None, description="GPU types to consider (catalog names); default: "
                                                                   "every catalog GPU the prices price.")
    counts: Optional[list[StrictInt]] = Field(None, description="Data-parallel GPU counts (default 1, 2, 4, 8).")
    max_gpus: Optional[StrictInt] = Field(None, description="Most GPUs of an option (default 8; 512 for plans).")
    batches: Optional[list[StrictInt]] = Field(None, description="Per-GPU batch sizes (default: the job's, 2x, 4x, 8x).")
    keep_global_batch: Optional[bool] = Field(None, description="Micro-batches with accumulation keep the job's "
                                                                "global batch (default: off; on for plans).")
    plans: Optional[bool] = Field(None, description="Search parallel plans (default: when the job has `parallel`).")
    shardings: Optional[list[Sharding]] = Field(None, description="Plans: sharding strategies to try.")
    tensors: Optional[list[StrictInt]] = Field(None, description="Plans: tensor-parallel degrees to try.")
    pipelines: Optional[list[StrictInt]] = Field(None, description="Plans: pipeline degrees to try.")
    recomputes: Optional[list[Recompute]] = Field(None, description="Plans: recomputation modes to try.")
    max_plans: Optional[StrictInt] = Field(None, description="Plans: most plans predicted (<= 400).")
    contexts: Optional[list[StrictInt]] = Field(None, description="Plans: context-parallel degrees (default: the "
                                                                  "job's).")
    experts: Optional[list[StrictInt]] = Field(None, description="Plans: expert-parallel degrees of a mixture-of-"
                                                                 "experts model (default: the job's; unset there: "
                                                                 "1 and 8-64 dividing its experts).")
    virtual_pipelines: Optional[list[StrictInt]] = Field(None, description="Plans: interleaved chunks per pipeline "
                                                                           "rank (default: the job's).")
    sequence_parallel: Optional[list[StrictBool]] = Field(None, description="Plans: sequence parallelism to try "
                                                                            "([true, false]: both; default: the "
                                                                            "job's).")
    global_batch: Optional[StrictInt] = Field(None, description="Plans: the global batch every plan keeps, in "
                                                                "sequences.")
    precisions: Optional[list[Precision]] = None
    share: bool = Field(True, description="Also offer a share of one GPU to small jobs.")
    prices: Optional[Union[str, list[PriceEntry]]] = Field(
        None, description="A packaged price table's name (cloud-2024, cloud-2026, gavel-2020) or the prices themselves.")
    provider: Optional[str] = None
    samples_per_epoch: Optional[StrictInt] = None
    epochs: Union[StrictFloat, StrictInt] = 1.0
    deadline_s: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="Seconds for the whole run.")
    budget_usd: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="USD for the whole run.")
    # a mode 'serve' job's search (gpucast.advisor.serving): tensors above are its tensor degrees
    engines: Optional[list[Literal["vllm", "sglang", "trtllm", "hf"]]] = Field(
        None, description="Serving: engines to try (default: the job's, else vllm).")
    ttft_s: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="Serving: p90 time-to-first-token "
                                                                              "target, seconds.")
    tpot_s: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="Serving: p90 time-per-output-token "
                                                                              "target, seconds.")
    replicas: Optional[StrictInt] = Field(None, description="Serving: most copies of a deployment to try "
                                                            "(default 1).")
    layouts: Optional[list[Literal["tp", "dep", "pd"]]] = Field(
        None, description="Serving: tp (tensor parallel) and/or dep (attention DP + expert parallel) and/or pd "
                          "(disaggregated prefill and decode over the replicas).")
    spec_tokens: Optional[list[StrictInt]] = Field(None, description="Serving: draft counts to try for a job that "
                                                                     "drafts (serve.spec_method), its acceptance "
                                                                     "carried to each.")
    prefill_tensors: Optional[list[StrictInt]] = Field(None, description="Serving, pd layouts: prefill instances' "
                                                                         "tensor degrees to try besides the decode "
                                                                         "side's.")


class PackRequest(BaseModel):
    """Several one-GPU jobs and the whole GPU they would share (gpucast.advisor.pack)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"jobs": [{"workload": "mlp-small"}, {"workload": "resnet50", "batch_size": 64},
                               {"workload": "bert-base", "batch_size": 16, "precision": "amp-bf16"}],
                      "gpu": "a100-80gb"}]})

    jobs: list[JobSpec] = Field(..., description="2 to 7 one-GPU jobs, each as /v1/predict takes one.")
    gpu: str = Field("a100-80gb", description="The whole GPU (a catalog name) they share.")


class Prediction(BaseModel):
    """The fields of :class:`gpucast.prediction.Prediction`."""

    job: dict[str, Any]
    job_key: str
    gpu: str
    gpu_util_pct: float
    gpu_util_interval: list[float]
    memory_peak_bytes: int
    memory_interval: list[int]
    step_time_s: float
    step_time_interval: list[float]
    gpu_busy_s: float
    host_time_s: float
    flops: int
    bytes: int
    kernels: int
    ops: int
    parameters: int
    memory_allocated_peak_bytes: int
    fits_in_memory: bool
    bottleneck: str
    bottleneck_reason: str
    op_coverage: float
    time_coverage: float
    uncosted_ops: dict[str, int]
    model_version: str
    samples_per_s: float
    notes: list[str]
    surroundings: dict[str, Any]
    loader_time_s: float
    util_basis: str
    interval_basis: str
    gpu_idle_gaps: int = Field(0, description="Idle periods of the GPU per step (the timeline the co-location "
                                              "model interleaves).")
    gpu_held_pct: float = Field(0.0, description="Share of the step (percent) the job's kernels hold the GPU: what "
                                                 "a co-located job competes for (gpu_util_pct is what NVML reports, "
                                                 "which reads short idle gaps as busy).")
    gpu_held_interval: list[float] = Field(default_factory=lambda: [0.0, 0.0],
                                           description="Range of gpu_held_pct over the constants' corners.")
    gpu_syncs: int = Field(0, description="Points per step where the host waits for the GPU: where a co-located "
                                          "job's time slice can hold this one up.")
    plan: dict[str, Any] = Field(default_factory=dict, description="A parallel plan's breakdown (empty for one "
                                                                   "replica): step parts, memory and utilization per "
                                                                   "stage, MFU, tokens/s per GPU.")
    serving: dict[str, Any] = Field(default_factory=dict, description="Mode 'serve': the deployment's run (TTFT, "
                                                                      "TPOT, throughput, KV capacity; empty "
                                                                      "otherwise).")


class GpuState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_type: str = Field(description="Catalog name of this GPU.")
    node: StrictInt = Field(0, description="Node of the GPU (the policies' gang rule reads it).")
    jobs: list[JobSpec] = Field(default_factory=list, description="Jobs running on it now.")
    sharing: Optional[str] = Field(None, description="How its jobs share it: 'timeslice' (the default), 'mps' "
                                                     "(MPS, no limits) or 'mps:N' (the device plugin's N MPS "
                                                     "replicas: at most N one-GPU jobs, each limited to 1/N of "
                                                     "the SMs, alone too).")


class PlaceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "gpus": [{"gpu_type": "t4", "jobs": [{"workload": "resnet18-cifar", "batch_size": 32}]},
                 {"gpu_type": "a100-80gb", "jobs": []}],
        "job": {"workload": "mlp-small", "batch_size": 64}, "policy": "gpucast"}]})

    gpus: list[GpuState] = Field(description="The GPUs to choose from, index = position in this list.")
    job: JobSpec
    policy: str = Field("gpucast", description="A policy of the cluster simulator (slot, slot-fifo, profiling, "
                                                "horus, packing, gpucast, oracle).")


class Occupant(BaseModel):
    workload: str
    job_key: str
    util_pct: Optional[float]
    memory_upper_bytes: Optional[float]
    step_time_s: Optional[float]


class PlaceResponse(BaseModel):
    gpu: Optional[int] = Field(description="Index of the chosen GPU, null when none fits.")
    gpu_type: Optional[str]
    policy: str
    predicted_slowdowns: list[float] = Field(description="The chosen GPU's current jobs in order, then the new job.")
    occupants: list[Occupant] = Field(description="What the policy was told of the chosen GPU's jobs, then the new one.")
    reason: Optional[str] = Field(description="Why no GPU was chosen (null when one was).")


class GpuInfo(BaseModel):
    name: str
    display_name: str
    architecture: str
    memory_bytes: int
    memory_bandwidth_gbs: float
    fp32_tflops: float
    fp16_tflops: float
    bf16_tflops: Optional[float]
    tf32_tflops: Optional[float]
    fp8_tflops: Optional[float] = Field(None, description="Dense FP8 tensor-core TFLOPS; null before Ada/Hopper.")
    fp4_tflops: Optional[float] = Field(None, description="Dense FP4 tensor-core TFLOPS; null before Blackwell.")
    nvlink_generation: Optional[int] = None
    nvlink_domain: Optional[int] = None
    sm_count: int


class ZooEntry(BaseModel):
    name: str
    family: str
    source: str
    description: str
    default_batch_size: int
    default_input: str
    data: dict[str, Any] = Field(description="The typical script's data loader (a job's default `data`).")
    loop: dict[str, Any] = Field(description="The typical script's loop habits (a job's default `loop`).")
    script: str = Field(description="The script whose habits these are.")


class Health(BaseModel):
    status: str
    version: str
    model_version: str
    cache_entries: int
    predictions_in_flight: int
    limits: dict[str, Union[int, float]]
