"""FP8 parameters (``parallel.fp8_param``, Megatron-Core's ``--fp8-param-gather``).

Independent reasons: with FP8 parameters the bf16 copy of every FP8 layer's weight is gone, so a
rank's weights shrink by 2 bytes a parameter of its linear layers (the Llama config below has
4 h^2 + 3 h f of them a layer, h = 2048, f = 8192; the embedding and the output layer stay bf16),
split over the tensor ranks; the FP8 copy itself is kept either way. Megatron-Bridge's presets set
``fp8_param_gather`` for delayed/current-scaled FP8 and MXFP8 and not for blockwise FP8 or NVFP4
(``megatron/bridge/training/mixed_precision.py``); a GPU that all-gathers fewer bytes spends less
time in the all-gather.
"""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.job import JobError

H, F, LAYERS = 2048, 8192, 2
CONFIG = dict(model_type="llama", hidden_size=H, intermediate_size=F, num_hidden_layers=LAYERS,
              num_attention_heads=16, num_key_value_heads=16, vocab_size=1000)
LINEAR = LAYERS * (4 * H * H + 3 * H * F)   # the FP8 layers' parameters


def _plan(precision="fp8", gpu="h100", stack=None, **par):
    plan = dict(tensor=2, grad_accum=2, sharding="zero1") | par
    job = Job.from_hf_config(CONFIG, batch_size=2, seq_len=1024, precision=precision, optimizer="adamw", gpus=4,
                             parallel=plan, **({"stack": stack} if stack else {}))
    return gpucast.explain(job, gpu).estimate


def test_fp8_parameters_drop_the_bf16_copy_of_the_fp8_layers_weights():
    on, off = _plan(fp8_param=True), _plan(fp8_param=False)
    saved = off.memory.breakdown["weights"] - on.memory.breakdown["weights"]
    assert saved == pytest.approx(2 * LINEAR / 2, rel=0.02)   # 2 bytes a parameter, over 2 tensor ranks
    assert on.memory.breakdown["fp8_weight_cache"] == off.memory.breakdown["fp8_weight_cache"]
    assert on.memory.total_bytes < off.memory.total_bytes
    assert on.plan["fp8_param"] is True and off.plan["fp8_param"] is False


@pytest.mark.parametrize("precision,gpu,stack,expected", [
    ("fp8", "h100", None, True),                          # delayed scaling
    ("fp8", "h100", {"fp8_recipe": "current"}, True),
    ("fp8", "h100", {"fp8_recipe": "blockwise"}, False),
    ("mxfp8", "b200", None, True),
    ("nvfp4", "b200", None, False),
    ("amp-bf16", "h100", None, False),
])
def test_the_default_follows_megatron_bridge_s_presets(precision, gpu, stack, expected):
    assert _plan(precision, gpu, stack).plan["fp8_param"] is expected


def test_outside_megatron_there_are_no_te_weights_to_keep_in_fp8():
    est = _plan(tensor=1, sharding="fsdp-full", framework="fsdp", fp8_param=True)
    assert est.plan["fp8_param"] is False
    assert any("parallel.fp8_param" in n for n in est.plan["notes"])


def test_the_updated_weights_all_gather_takes_less_time_in_fp8():
    kw = dict(tensor=1, framework="megatron", dp_overlap=False)   # the all-gather exposed
    on, off = _plan(fp8_param=True, **kw), _plan(fp8_param=False, **kw)
    dp_on, dp_off = (e.plan["step_breakdown_s"]["data_parallel_comm_s"] for e in (on, off))
    assert 0 < dp_on < dp_off


@pytest.mark.parametrize("precision,mode", [("amp-bf16", "train"), ("nvfp4", "train"), ("fp8", "infer")])
def test_fp8_parameters_elsewhere_are_one_error_line(precision, mode):
    with pytest.raises(JobError, match="field 'parallel.fp8_param'") as err:
        job = Job.from_hf_config(CONFIG, batch_size=2, seq_len=1024, precision=precision, mode=mode, gpus=2,
                                 parallel=dict(tensor=2, fp8_param=True))
        gpucast.predict(job, "b200")
    assert "\n" not in str(err.value)


def test_te_casts_and_transposes_a_weight_once_a_step_not_once_a_micro_batch():
    # Megatron-Core passes Transformer Engine is_first_microbatch: the FP8 weight cast and transpose of
    # the first micro-batch are reused by the others, so m micro-batches run that work once.
    def plan(m):
        job = Job.from_hf_config(CONFIG, batch_size=2, seq_len=1024, precision="fp8", optimizer="adamw", gpus=1,
                                 parallel=dict(framework="megatron", grad_accum=m, sharding="zero1"))
        return gpucast.explain(job, "h100")

    one, eight = plan(1), plan(8)
    ops, kt = one.trace.ops, one.estimate.kernel_times.time
    work = sum(float(t) for o, t in zip(ops, kt) if "fp8_weight" in o.module.split("|"))
    assert work > 0 and {o.op for o in ops if "fp8_weight" in o.module.split("|")} >= {"_to_copy", "clone"}
    per_micro = [e.estimate.plan["step_breakdown_s"]["compute_s"] / m for e, m in ((one, 1), (eight, 8))]
    assert per_micro[0] - per_micro[1] == pytest.approx(work * 7 / 8, rel=0.05)
