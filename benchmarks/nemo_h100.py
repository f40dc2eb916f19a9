"""gpucast against NVIDIA's published Megatron-Core (NeMo 24.07) FP8 training throughput on DGX-H100.

Data: ``data/measured/nemo-24.07-h100`` (its README has the provenance): 12 pre-training rows
(GPT-3 5B-175B, Llama-2 7B-70B, Llama-3 8B/70B, Nemotron 8B-340B on 8-512 H100 SXM, TP/PP/CP/VP as
given) and 6 fine-tuning rows (SFT and LoRA of Llama-2, 4,096-token packed sequences). Every
number here is a prediction unless it says measured.

Each row becomes a gpucast job the way a user would write it today: the model's Hugging Face
config (:data:`MODELS`, each with its source), ``precision: fp8``, micro-batch ``mbs``,
``parallel`` = tensor ``tp``, pipeline ``pp``, the distributed optimizer (``zero1``), no
activation recompute, gradient accumulation ``gbs / (mbs x data parallel)``, 8 GPUs per node on
8 x 400 Gbit/s InfiniBand (``ib-400/gpu``), Megatron's framework; LoRA rows take a rank-32 adapter
on the attention's query/key/value projections (NeMo's default adapter dimension and target,
assumed: the table does not say); SFT and LoRA rows pack SQuAD samples of :data:`SQUAD_SAMPLE_TOKENS`
tokens into each sequence (``data.packed_sample_len``: attention per sample). ``parallel.virtual_pipeline`` = ``vp`` (interleaved 1F1B),
``parallel.context`` = ``cp`` (context parallelism). A row would be **not answered** when gpucast
could not express its recipe (:func:`unanswered`; since context parallelism, none); the table lists
each with its reason. Sequence parallelism is Megatron's default
wherever TP > 1 (``parallel.sequence``), as in NeMo's recipes, and so is Transformer Engine's cuDNN
attention, and so is the tensor-parallel communication overlap of every TP > 1 row
(``parallel.tp_overlap``, on Hopper under Megatron: NeMo's launcher configurations of these models
set ``ub_tp_comm_overlap: true`` and NeMo ships tuned userbuffers configurations for them;
:mod:`gpucast.estimate.parallel.sequence`). Not set in any row (so every row is predicted without
them): the recipes' recompute settings, CUDA graphs.

What it reports: per row the measured and predicted tokens/s per GPU, their ratio, the predicted
peak memory per GPU and whether it fits an 80 GB H100 (every row ran); over the answered rows the
MdAPE and median ratio; the share of rows answered; and the same **held out by model**: each
model's rows predicted with the environment's ``kernel_time_factor`` (what ``gpucast calibrate``
fits for a cluster) fitted on the other models' rows only (squared log error; predictions at
:data:`FACTORS`, interpolated in log space between them). ``--no-held-out`` skips that part. :func:`predict_rows` is what the accuracy gate
calls (set ``nemo-h100``).

    .venv/bin/python benchmarks/nemo_h100.py [--data data/measured/nemo-24.07-h100]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data" / "measured" / "nemo-24.07-h100"
RESULTS = REPO_ROOT / "benchmarks" / "results"
GPU = "h100"
GPUS_PER_NODE = 8                 # DGX-H100: 8 x H100 SXM 80GB per node (the set's README)
NETWORK = "ib-400/gpu"            # 8 x 400 Gbit/s InfiniBand per node (the set's README)
LORA = dict(kind="lora", rank=32, targets=["q_proj", "k_proj", "v_proj"])  # assumed (module docstring)
# SFT/LoRA rows: SQuAD v1.1 samples packed into 4,096-token sequences, attention per sample
# (data.packed_sample_len). A sample is a context, a question and an answer in NeMo's prompt template:
# SQuAD's contexts average 137 tokens, its questions 11 (MRQA 2019 shared task, Fisch et al. 2019, Table 1,
# whitespace tokens), about 200 Llama-2 subword tokens with the template. Assumed, not measured: at 400 the
# rows' predictions move under 2 % (attention is then still 1/10 of an unpacked sequence's).
SQUAD_SAMPLE_TOKENS = 200
# kernel_time_factor values the held-out fit predicts at (module docstring); 1 is the model as published.
FACTORS = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1)


def _gpt3(layers: int, hidden: int, heads: int) -> dict:
    """NeMo's GPT-3 shapes as Hugging Face GPT-2 configs (GELU MLP of 4x, LayerNorm, learned positions)."""
    return dict(model_type="gpt2", n_embd=hidden, n_head=heads, n_layer=layers, n_inner=4 * hidden,
                vocab_size=50257, n_positions=2048, activation_function="gelu",
                attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)


def _llama(layers: int, hidden: int, ffn: int, heads: int, kv: int, vocab: int, positions: int) -> dict:
    return dict(model_type="llama", hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                max_position_embeddings=positions)


def _nemotron(layers: int, hidden: int, ffn: int, heads: int, kv: int) -> dict:
    """transformers' Nemotron (squared-ReLU MLP, LayerNorm1p), vocabulary 256,000."""
    return dict(model_type="nemotron", hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, vocab_size=256000,
                max_position_embeddings=4096)


# The table's models: name -> (Hugging Face config, source of the shape).
MODELS: dict[str, tuple[dict, str]] = {
    "GPT3-5B": (_gpt3(24, 4096, 32), "NeMo-Framework-Launcher conf/training/gpt3/5b.yaml"),
    "GPT3-20B": (_gpt3(44, 6144, 48), "NeMo-Framework-Launcher conf/training/gpt3/20b.yaml"),
    "GPT3-175B": (_gpt3(96, 12288, 96), "Brown et al. 2020, GPT-3, Table 2.1"),
    "LLAMA2-7B": (_llama(32, 4096, 11008, 32, 32, 32000, 4096), "meta-llama/Llama-2-7b-hf config.json"),
    "LLAMA2-13B": (_llama(40, 5120, 13824, 40, 40, 32000, 4096), "meta-llama/Llama-2-13b-hf config.json"),
    "LLAMA2-70B": (_llama(80, 8192, 28672, 64, 8, 32000, 4096), "meta-llama/Llama-2-70b-hf config.json"),
    "LLAMA3-8B": (_llama(32, 4096, 14336, 32, 8, 128256, 8192), "meta-llama/Meta-Llama-3-8B config.json"),
    "LLAMA3-70B": (_llama(80, 8192, 28672, 64, 8, 128256, 8192), "meta-llama/Meta-Llama-3-70B config.json"),
    "Nemotron-8B": (_nemotron(32, 4096, 16384, 32, 32), "nvidia/nemotron-3-8b-base-4k (NeMo config)"),
    "Nemotron-22B": (_nemotron(40, 6144, 24576, 48, 8), "NeMo 2.0 nemotron4_22b recipe (Nemotron4Config22B)"),
    "Nemotron-340B": (_nemotron(96, 18432, 73728, 96, 8), "nvidia/Nemotron-4-340B-Base config"),
}


def read(data: Path = DATA) -> list[dict]:
    """The set's rows in one form: task (pretrain, SFT, LoRA), model, gpus, gbs, mbs, seq_len, tp, pp,
    cp, vp and the measured tokens/s per GPU."""
    rows = []
    for name, task in (("pretrain.csv", None), ("finetune.csv", "task")):
        with open(data / name, newline="") as f:
            for r in csv.DictReader(f):
                rows.append({"task": r[task] if task else "pretrain", "model": r["model"], "gpus": int(r["gpus"]),
                             "gbs": int(r["gbs"]), "mbs": int(r["mbs"]),
                             "seq_len": int(r.get("seq_len") or r["packed_seq_len"]),
                             "tp": int(r["tp"]), "pp": int(r["pp"]), "cp": int(r.get("cp") or 1),
                             "vp": int(r.get("vp") or 1), "tokens_per_s_per_gpu": float(r["tokens_per_s_per_gpu"])})
    return rows


def unanswered(row: dict) -> str | None:
    """Why gpucast cannot express the row's recipe today, or None."""
    why: list[str] = []   # every recipe of the table is expressible (context parallelism: parallel.context)
    return ", ".join(why) or None


def job_of(row: dict):
    """The row as a gpucast job (module docstring)."""
    from gpucast.job import Job

    config, _source = MODELS[row["model"]]
    dp = row["gpus"] // (row["tp"] * row["pp"] * row["cp"])
    extra = {"adapter": dict(LORA)} if row["task"] == "LoRA" else {}
    if row["task"] != "pretrain":   # packed SQuAD samples, attention per sample (SQUAD_SAMPLE_TOKENS)
        extra["data"] = {"packed_sample_len": SQUAD_SAMPLE_TOKENS}
    return Job.from_hf_config(
        config, batch_size=row["mbs"], seq_len=row["seq_len"], precision="fp8", optimizer="adamw",
        gpus=row["gpus"], parallel=dict(tensor=row["tp"], pipeline=row["pp"], sharding="zero1", recompute="none",
                                        grad_accum=row["gbs"] // (row["mbs"] * dp), framework="megatron",
                                        virtual_pipeline=row["vp"], context=row["cp"],
                                        gpus_per_node=GPUS_PER_NODE, network=NETWORK), **extra)


def predict_rows(rows: list[dict], progress=None) -> list[dict]:
    """Each row with ``predicted`` tokens/s per GPU, ``memory_gib``, ``fits`` (None where the row is not
    answered, with ``why``)."""
    import gpucast

    out = []
    for r in rows:
        why = unanswered(r)
        rec = dict(r, why=why, predicted=None, memory_gib=None, fits=None)
        if why is None:
            p = gpucast.predict(job_of(r), GPU)
            rec.update(predicted=float(p.plan["tokens_per_s_per_gpu"]), memory_gib=p.memory_peak_bytes / 2**30,
                       fits=bool(p.fits_in_memory))
        out.append(rec)
        if progress:
            progress()
    return out


def factor_grid(recs: list[dict], progress=None) -> list[list[float] | None]:
    """Each answered row's predicted tokens/s per GPU at every factor of :data:`FACTORS`."""
    import gpucast
    from gpucast.estimate.environment import Environment

    envs = [Environment.default().with_params({"kernel_time_factor": k}) for k in FACTORS]
    out = []
    for r in recs:
        out.append(None if r["predicted"] is None else
                   [float(gpucast.predict(job_of(r), GPU, env=e).plan["tokens_per_s_per_gpu"]) for e in envs])
        if progress:
            progress()
    return out


def _at(grid_row: list[float], k: float) -> float:
    """A row's prediction at factor ``k``: log-linear between the grid's factors."""
    import numpy as np

    return float(np.exp(np.interp(np.log(k), np.log(FACTORS), np.log(grid_row))))


def held_out(recs: list[dict], grid: list) -> list[dict]:
    """Each answered row predicted with the factor fitted on the other models' rows (module docstring)."""
    import numpy as np

    ks = np.linspace(FACTORS[0], FACTORS[-1], 201)
    out = []
    for r, g in zip(recs, grid):
        if g is None:
            out.append(dict(r, held_out=None, factor=None))
            continue
        others = [(o, og) for o, og in zip(recs, grid) if og is not None and o["model"] != r["model"]]
        loss = [sum(np.log(_at(og, k) / o["tokens_per_s_per_gpu"]) ** 2 for o, og in others) for k in ks]
        k = float(ks[int(np.argmin(loss))])
        out.append(dict(r, held_out=_at(g, k), factor=k))
    return out


def summary(recs: list[dict]) -> dict:
    got = [r for r in recs if r["predicted"] is not None]
    ratios = [r["predicted"] / r["tokens_per_s_per_gpu"] for r in got]
    out = {"rows": len(recs), "answered": len(got),
           "mdape": 100 * statistics.median(abs(q - 1) for q in ratios) if ratios else None,
           "median_ratio": statistics.median(ratios) if ratios else None,
           "fit": sum(bool(r["fits"]) for r in got)}
    held = [r["held_out"] / r["tokens_per_s_per_gpu"] for r in got if r.get("held_out") is not None]
    if held:
        out.update(held_out_mdape=100 * statistics.median(abs(q - 1) for q in held),
                   held_out_median_ratio=statistics.median(held),
                   held_out_factors=sorted({round(r["factor"], 3) for r in got if r.get("factor") is not None}))
    return out


def render(recs: list[dict]) -> str:
    s = summary(recs)
    lines = ["# Megatron-Core (NeMo 24.07) FP8 training on DGX-H100: predicted vs measured", "",
             "`.venv/bin/python benchmarks/nemo_h100.py` over `data/measured/nemo-24.07-h100` (measured: NVIDIA's "
             "published tokens/s per GPU; predicted: gpucast as a user would describe each recipe today, "
             "`benchmarks/nemo_h100.py`'s docstring says how).", "",
             f"Answered **{s['answered']} of {s['rows']}** rows; over those, tokens/s per GPU MdAPE "
             + (f"**{s['mdape']:.0f} %**, median predicted / measured **{s['median_ratio']:.2f}**; "
                if s["mdape"] is not None else "- ; ")
             + f"predicted to fit in 80 GB: {s['fit']} of {s['answered']} (every row ran).", "",
             *([f"Held out by model (each model's rows with `kernel_time_factor` fitted on the other models' rows, "
                f"as `gpucast calibrate` would fit it; factors {min(s['held_out_factors']):.3f}-"
                f"{max(s['held_out_factors']):.3f}): MdAPE **{s['held_out_mdape']:.0f} %**, median predicted / "
                f"measured **{s['held_out_median_ratio']:.2f}**.", ""] if "held_out_mdape" in s else []),
             "| task | model | GPUs | GBS | MBS | seq | TP | PP | CP | VP | measured tok/s/GPU | predicted | "
             "pred / meas | held out / meas | memory GiB/GPU | fits |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in recs:
        head = (f"| {r['task']} | {r['model']} | {r['gpus']} | {r['gbs']} | {r['mbs']} | {r['seq_len']} | {r['tp']} | "
                f"{r['pp']} | {r['cp']} | {r['vp']} | {r['tokens_per_s_per_gpu']:,.0f} | ")
        if r["predicted"] is None:
            lines.append(head + f"not answered: {r['why']} | | | | |")
        else:
            held = (f"{r['held_out'] / r['tokens_per_s_per_gpu']:.2f}" if r.get("held_out") is not None else "-")
            lines.append(head + f"{r['predicted']:,.0f} | {r['predicted'] / r['tokens_per_s_per_gpu']:.2f} | {held} | "
                         f"{r['memory_gib']:.0f} | {'yes' if r['fits'] else 'no'} |")
    lines += ["", "Model shapes: " + "; ".join(f"{k}: {v[1]}" for k, v in MODELS.items()) + ".", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-held-out", action="store_true", help="skip the held-out-by-model fit")
    a = ap.parse_args(argv)
    if not (a.data / "pretrain.csv").exists():
        print(f"error: {a.data / 'pretrain.csv'} not found (pass --data)", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from rich.progress import Progress

    rows = read(a.data)
    with Progress() as bar:
        task = bar.add_task("predicting", total=len(rows))
        recs = predict_rows(rows, lambda: bar.advance(task))
        if not a.no_held_out:
            task = bar.add_task("held out by model", total=len(recs))
            recs = held_out(recs, factor_grid(recs, lambda: bar.advance(task)))
    text = render(recs)
    (a.out / "nemo_h100.md").write_text(text, encoding="utf-8")
    (a.out / "nemo_h100.json").write_text(json.dumps({"summary": summary(recs), "rows": recs}, indent=1) + "\n",
                                          encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
