"""The groups of a job spec in the HTTP service's bodies (pydantic): ``data``, ``loop``, ``stack``, ``parallel``,
``adapter``, ``serve``, and the literals their fields take, as the OpenAPI schema shows them.

:mod:`gpucast.service.schemas` builds the request and response bodies from these. Values are checked by
:class:`gpucast.job.Job` (422 with its message), so bounds are stated once, there.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

Precision = Literal["fp32", "tf32", "amp-fp16", "amp-bf16", "bf16", "fp16", "fp8", "mxfp8", "nvfp4"]
Mode = Literal["train", "infer", "serve"]
Optimizer = Literal["sgd", "adam", "adamw", "none"]


DataSource = Literal["device", "memory", "images", "small-images", "tokens", "environment", "custom"]


class DataSpec(BaseModel):
    """How batches reach the GPU (gpucast.surroundings.Data); unset fields: the workload's typical script."""

    model_config = ConfigDict(extra="forbid")

    source: Optional[DataSource] = Field(None, description="Where batches come from (default: the workload's "
                                                           "typical script).")
    num_workers: Optional[StrictInt] = Field(None, description="DataLoader worker processes.")
    pin_memory: Optional[bool] = Field(None, description="DataLoader pin_memory.")
    non_blocking: Optional[bool] = Field(None, description="batch.to('cuda', non_blocking=...).")
    image_size: Optional[list[StrictInt]] = Field(None, description="Stored [width, height] of 'images' files.")
    per_sample_s: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="Measured host seconds per sample.")
    dataset_samples: Optional[StrictInt] = Field(None, description="Samples per epoch (epoch-boundary costs).")
    packed_sample_len: Optional[StrictInt] = Field(None, description="Sequence packing: mean tokens of the samples "
                                                                     "packed into each seq_len-token sequence "
                                                                     "(attention per sample).")
    sample_bytes: Optional[StrictInt] = Field(None, description="Host bytes per sample collated and copied.")
    dataset: Optional[str] = Field(None, description="Refused (422): a FILE.py:FUNCTION dataset factory is code; "
                                                     "measure it with the CLI and send per_sample_s.")
    collate: Optional[str] = Field(None, description="Refused (422): a collate function is code.")
    environment: Optional[str] = Field(None, description="Refused (422): an RL environment factory is code; "
                                                         "measure it with the CLI and send per_sample_s.")


class LoopSpec(BaseModel):
    """The training loop's habits (gpucast.surroundings.Loop)."""

    model_config = ConfigDict(extra="forbid")

    item_calls: Optional[StrictInt] = Field(None, description=".item() (or .cpu()) calls on GPU values per step: "
                                                               "each synchronises.")
    progress_bar: Optional[bool] = Field(None, description="A tqdm bar updated every step.")
    log_every: Optional[StrictInt] = Field(None, description="A log line every N steps (0: never).")
    cudnn_benchmark: Optional[bool] = Field(None, description="torch.backends.cudnn.benchmark.")


class StackSpec(BaseModel):
    """The software stack and host (gpucast.surroundings.Stack)."""

    model_config = ConfigDict(extra="forbid")

    torch: Optional[str] = Field(None, description="PyTorch version, e.g. '2.4'.")
    cuda: Optional[str] = Field(None, description="CUDA version, e.g. '12.1'.")
    lazy_loading: Optional[bool] = Field(None, description="CUDA_MODULE_LOADING=LAZY (default: on with PyTorch "
                                                                ">= 2.0 on CUDA >= 11.7).")
    cpu_speed: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="Host single-thread speed, 1.0 = reference.")
    cpu_cores: Optional[StrictInt] = Field(None, description="Cores the job's loader workers may use.")
    loss: Optional[Literal["upcast", "fused", "chunked"]] = Field(
        None, description="A language model's loss: 'upcast' (fp32 logits, transformers' own), 'fused' (one kernel "
                          "on logits in the compute dtype, llm-foundry's default), 'chunked' (head and loss fused "
                          "in chunks, Liger-Kernel).")
    attention: Optional[Literal["flash2", "flash3", "cudnn", "triton"]] = Field(
        None, description="The fused attention kernel: 'flash2' (PyTorch's SDPA flash kernel), 'flash3' (the "
                          "flash-attn 3 package's Hopper kernels), 'cudnn' (cuDNN's fused attention) or 'triton' "
                          "(flash-attn's 2022 Triton kernel, llm-foundry's attn_impl: triton); unset: "
                          "PyTorch's default for stack.torch on the GPU (cuDNN on Hopper from 2.11, else flash2).")
    fp8_recipe: Optional[Literal["delayed", "current", "blockwise"]] = Field(
        None, description="Precision fp8's scaling recipe (Transformer Engine): delayed (default), current (an amax "
                          "pass before each cast) or blockwise (DeepSeek-style 1x128/128x128 scales).")
    bf16_layers: Optional[Union[str, list[StrictInt]]] = Field(
        None, description="The first and last transformer layers an FP8/FP4 recipe keeps in bf16, '1,1' or [1, 1] "
                          "(Megatron-Core's --first-last-layers-bf16); unset: none.")
    kernels: Optional[Literal["eager", "transformer-engine"]] = Field(
        None, description="The layers' kernels: 'eager' (the model source's modules) or 'transformer-engine' "
                          "(Transformer Engine's fused norms, SwiGLU and RoPE, as Megatron-Core builds them); unset: "
                          "transformer-engine for a plan under megatron, else eager.")
    expandable_segments: Optional[bool] = Field(
        None, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator grows one "
                          "segment per pool (unset: off, PyTorch's default).")


Sharding = Literal["ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"]
Recompute = Literal["none", "selective", "full"]


class ParallelSpec(BaseModel):
    """How the job spans its GPUs (gpucast.plan.Parallel): tensor and pipeline degrees, sharding,
    recomputation, accumulation, nodes and their network; unset fields: one replica per GPU, DDP."""

    model_config = ConfigDict(extra="forbid")

    tensor: Optional[StrictInt] = Field(None, description="Tensor-parallel degree (Megatron-style).")
    pipeline: Optional[StrictInt] = Field(None, description="Pipeline-parallel degree (1F1B).")
    sharding: Optional[Sharding] = Field(None, description="How data-parallel replicas keep parameters, gradients "
                                                           "and optimizer state (default: ddp).")
    recompute: Optional[Recompute] = Field(None, description="Activation checkpointing.")
    grad_accum: Optional[StrictInt] = Field(None, description="Micro-batches per optimizer step.")
    gpus_per_node: Optional[StrictInt] = Field(None, description="GPUs a node (default: the GPU's NVLink domain: "
                                                                 "72 on an NVL72 rack, else 8).")
    network: Optional[str] = Field(None, description="Between nodes: KIND-GBIT per node or KIND-GBIT/gpu, "
                                                     "e.g. roce-1600, ib-400/gpu.")
    framework: Optional[Literal["megatron", "deepspeed", "fsdp", "torch"]] = Field(
        None, description="The trainer whose Python runs around the model (its host work per layer, micro-batch "
                          "and step); unset: megatron with tensor/pipeline parallelism, deepspeed for ZeRO, "
                          "fsdp for FSDP, torch for DDP.")
    expert: Optional[StrictInt] = Field(None, description="Expert-parallel degree of a mixture-of-experts model "
                                                          "(serving: divides tensor; training: with expert_tensor "
                                                          "divides gpus / pipeline, divides the experts).")
    expert_tensor: Optional[StrictInt] = Field(None, description="Expert-tensor-parallel degree in training (unset: "
                                                                 "tensor, Megatron-LM's default).")
    recompute_modules: Optional[list[Literal["core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj",
                                             "shared_experts"]]] = Field(
        None, description="What selective recompute recomputes (Megatron-Core's --recompute-modules; default "
                          "core_attn).")
    first_stage_layers: Optional[StrictInt] = Field(None, description="Layers of the first pipeline stage (the rest "
                                                                      "evenly over the others).")
    last_stage_layers: Optional[StrictInt] = Field(None, description="Layers of the last pipeline stage.")
    mtp_layers: Optional[StrictInt] = Field(None, description="Multi-token-prediction depths on the last stage (unset: "
                                                              "the config's num_nextn_predict_layers under megatron).")
    pipeline_layout: Optional[str] = Field(None, description="Megatron-Core's pipeline layout: each virtual stage's "
                                                             "embedding (E), layers (t), MTP depths (m) and loss (L), "
                                                             "stages split by '|', e.g. 'Et*3|(tt|)*29,m|L'.")
    embedding_in_split: Optional[StrictBool] = Field(None, description="Count the embedding as a layer in the even "
                                                                       "pipeline split (training).")
    loss_in_split: Optional[StrictBool] = Field(None, description="Count the loss as a layer in the even pipeline "
                                                                  "split (training).")
    attention_dp: Optional[StrictBool] = Field(None, description="Serving: attention data-parallel over the tensor "
                                                                 "ranks, each its own requests and KV cache, the MoE "
                                                                 "layers expert-parallel over them (TensorRT-LLM's "
                                                                 "enable_attention_dp).")
    offload: Optional[StrictInt] = Field(None, description="Layers of each pipeline stage whose saved activations "
                                                           "go to host memory (training; Megatron-Core's "
                                                           "--cpu-offloading-num-layers).")
    pp_overlap: Optional[StrictBool] = Field(None, description="Overlap the pipeline's sends with compute (unset: on "
                                                               "under megatron with a virtual pipeline).")
    dp_overlap: Optional[StrictBool] = Field(None, description="Overlap the distributed optimizer's reduce-scatter and "
                                                               "all-gather with compute, a layer at a time (unset: on "
                                                               "for zero1 under megatron).")
    ep_overlap: Optional[StrictBool] = Field(None, description="Overlap the expert-parallel all-to-alls with another "
                                                               "micro-batch's compute (Megatron-Core).")
    cuda_graphs: Optional[StrictBool] = Field(None, description="Replay the transformer layers as CUDA graphs "
                                                                "(training; not with zero3/fsdp; unset: off).")
    fp8_param: Optional[StrictBool] = Field(None, description="Keep the FP8 layers' weights in FP8, no bf16 copy "
                                                              "(training at fp8 or mxfp8; unset: on under megatron "
                                                              "but for blockwise scaling).")
    optimizer_moments: Optional[Literal["fp32", "bf16", "fp16", "fp8"]] = Field(
        None, description="The dtype the optimizer keeps its moments in (training; Megatron-Core's precision-aware "
                          "optimizer; unset: fp32).")
    master_weights: Optional[Literal["fp32", "fp16", "remainders"]] = Field(
        None, description="The optimizer's master weights: fp32, fp16, or the 16-bit remainders that complete bf16 "
                          "weights to fp32 (training under zero1/zero2/zero3 at a half precision; unset: fp32).")
    grad_dtype: Optional[Literal["fp32", "half"]] = Field(
        None, description="The gradients kept and reduced in fp32 beside half-precision weights (training under "
                          "zero1/zero2/zero3; Megatron-Core's grad_reduce_in_fp32; unset: half).")
    expert_dispatcher: Optional[Literal["alltoall", "deepep"]] = Field(
        None, description="How a trained MoE layer's tokens reach their experts: alltoall (Megatron-Core's default) "
                          "or deepep (one copy per token and node across nodes).")
    virtual_pipeline: Optional[StrictInt] = Field(None, description="Interleaved 1F1B: model chunks per pipeline "
                                                                    "rank (training, pipeline > 1).")
    context: Optional[StrictInt] = Field(None, description="Context-parallel degree: each sequence split over this "
                                                           "many ranks (training; 2 x context divides seq_len).")
    tp_overlap: Optional[StrictBool] = Field(None, description="Overlap the tensor-parallel collectives with the "
                                                               "GEMMs (Transformer Engine; needs sequence parallelism).")
    sequence: Optional[StrictBool] = Field(None, description="Sequence parallelism under tensor parallelism (unset: on "
                                                             "with tensor > 1 under megatron).")


class AdapterSpec(BaseModel):
    """Parameter-efficient fine-tuning (gpucast.plan.Adapter)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["lora", "qlora"] = Field(description="LoRA adapters, or QLoRA's over 4-bit NF4 base weights.")
    rank: Optional[StrictInt] = Field(None, description="The adapters' rank.")
    targets: Optional[list[str]] = Field(None, description="Module-name patterns of the Linear layers adapted.")


class ServeSpec(BaseModel):
    """An LLM deployment (gpucast.serving.Serve; ``mode`` 'serve'): its requests, load and engine. Values are
    checked by gpucast's own validation (one-line 422s)."""

    model_config = ConfigDict(extra="forbid")

    input_len: Optional[Union[StrictInt, str]] = Field(None, description="Prompt tokens: an integer or "
                                                                         "'lognormal:MEAN,SIGMA' (default 1024).")
    output_len: Optional[Union[StrictInt, str]] = Field(None, description="Generated tokens (default 256).")
    engine: Optional[str] = Field(None, description="vllm | sglang | trtllm | hf (default vllm).")
    engine_version: Optional[str] = Field(None, description="The engine's release, e.g. '0.19.1': it runs with the "
                                                            "defaults of the modelled release of its line (vllm 0.6 before "
                                                            "0.8, 0.11 from 0.8, 0.14 from 0.14; trtllm 0.11 before 1.0, 1.0 from 1.0; "
                                                            "sglang 0.4 before 0.5, 0.5 from 0.5); default the newest "
                                                            "modelled.")
    entry: Optional[Literal["offline", "server"]] = Field(None, description="vLLM's entry point: the offline LLM "
                                                                            "class or the OpenAI server (default: "
                                                                            "offline for an all-at-once load).")
    concurrency: Optional[StrictInt] = Field(None, description="Closed loop: requests kept in flight.")
    request_rate: Optional[Union[StrictFloat, StrictInt]] = Field(None, description="Poisson arrivals per second.")
    num_requests: Optional[StrictInt] = Field(None, description="Requests in the run (default: 10 per client of a "
                                                                "closed loop, 1,000 for a Poisson stream).")
    max_num_seqs: Optional[StrictInt] = Field(None, description="The engine's most running sequences (default: "
                                                                "the release's, by GPU and entry point).")
    max_num_batched_tokens: Optional[StrictInt] = Field(None, description="The engine's token budget an "
                                                                          "iteration (chunked prefill).")
    gpu_memory_utilization: Optional[Union[StrictFloat, StrictInt]] = Field(
        None, description="The share of GPU memory the engine may take (weights, activations, KV cache).")
    block_size: Optional[StrictInt] = Field(None, description="Tokens a KV-cache block (paged engines).")
    cuda_graphs: Optional[bool] = Field(None, description="Decode steps replayed as CUDA graphs (default: the "
                                                          "engine's).")
    chunked_prefill: Optional[StrictBool] = Field(None, description="Prompts cut into chunks of the token budget "
                                                  "beside the running decodes (default: the engine's; TensorRT-LLM "
                                                  "1.x chunks under a closed loop or a request rate).")
    kv_cache_dtype: Optional[str] = Field(None, description="auto | fp8 | nvfp4 (Blackwell; trtllm, sglang).")
    spec_method: Optional[Literal["eagle3", "mtp", "ngram", "draft"]] = Field(
        None, description="Speculative decoding's drafter (draft: a separate draft model, draft_model).")
    draft_model: Optional[dict[str, Any]] = Field(
        None, description="spec_method draft: the draft model's Hugging Face config.json content (the target's "
                          "vocabulary).")
    spec_tokens: Optional[StrictInt] = Field(None, description="Draft tokens a step (default 1).")
    spec_acceptance: Optional[Union[StrictFloat, StrictInt]] = Field(
        None, description="Mean tokens a speculative step emits (accepted drafts + 1): an input.")
    max_model_len: Optional[StrictInt] = Field(None, description="The longest request the engine takes (default: "
                                                                 "the model's max_position_embeddings).")
    weights: Optional[str] = Field(None, description="auto | int8 | int4 (weight-only, AWQ/GPTQ) | mxfp4 (the "
                                                     "routed experts in MXFP4, as GPT-OSS ships).")
    prefix_hit_rate: Optional[Union[StrictFloat, StrictInt]] = Field(
        None, description="The share of each prompt found in the prefix cache (not prefilled); not applied "
                          "under vLLM 0.11 to a model with linear-attention or Mamba layers (it turns prefix "
                          "caching off for them).")
    prefill_replicas: Optional[StrictInt] = Field(None, description="Disaggregated prefill and decode: this many "
                                                                    "replicas prefill, the others decode.")
    prefill_tensor: Optional[StrictInt] = Field(None, description="Disaggregated prefill and decode: the prefill "
                                                                  "instances' tensor degree (the plan's unless set).")
