"""LLM inference iterations on the lent GPU: prefill and decode steps with a KV cache, and static-batch generation.

What it measures, for decoder-only models built from their configurations (Llama-3.2-1B-, Llama-3-8B- and
Qwen2-MoE-like shapes with random weights in bf16: timing does not depend on the weights' values, and
no weights can be downloaded there), run through Hugging Face transformers (the ``hf`` engine: eager
PyTorch, ``DynamicCache``, SDPA attention):

* ``prefill``: one forward over B prompts of T tokens with ``use_cache=True`` and only the last token's
  logits (``logits_to_keep=1``, as generation does): wall time between CUDA events.
* ``decode``: one forward of B sequences x 1 token on a cache holding L tokens each; wall time per step
  (median of the steps timed, host included: eager HF decode is often host-bound) and the device's
  busy time per step from ``torch.profiler`` (the sum of the kernels' durations, what a CUDA-graph
  engine such as vLLM would be left with, less its own kernels' differences).
* ``generate``: ``model.generate`` of B prompts x T_in tokens, greedy, exactly T_out new tokens: the
  static batch's wall time.
* ``continuous``: transformers' own continuous-batching engine (``model.generate_batch``: paged KV
  cache, scheduler, its CUDA-graph warm-up excluded) on N prompts of mixed lengths submitted at once,
  T_out new tokens each: the run's wall time in the row, and one row per request (its prompt length,
  time to first token, time per output token after it, end time) in ``--requests``.

Peak memory (``torch.cuda.max_memory_allocated``) is recorded per row. SM clock (NVML) per row. The
card's settings are never changed. Usage there: ``python3 scripts/device/serving.py --out $OUT/serving.csv``;
``--cpu`` runs tiny shapes on the CPU to check the script.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
import traceback

import torch

from gpu_clock import open_nvml  # noqa: E402 - beside this script

FIELDS = ["model", "phase", "batch", "tokens_in", "context", "tokens_out", "median_ms", "p10_ms", "p90_ms",
          "device_busy_ms", "peak_alloc_gib", "params", "sm_clock_mhz", "note"]

MODELS = {
    # Llama-3-8B's shape (hidden 4096, 32 layers, 32 heads, 8 KV heads, FFN 14336, vocab 128256)
    "llama-3-8b": dict(kind="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
    # Llama-3.2-1B's shape (its config.json: hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256)
    "llama-3.2-1b": dict(kind="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    # Qwen1.5-MoE-A2.7B's shape (hidden 2048, 24 layers, 60 experts of FFN 1408, top-4, shared expert 5632)
    "qwen1.5-moe-a2.7b": dict(kind="qwen2_moe", hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                              num_attention_heads=16, num_key_value_heads=16, vocab_size=151936,
                              moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
                              num_experts_per_tok=4),
}
TINY = dict(kind="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512)


class Out:
    def __init__(self, path, cuda):
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=FIELDS)
        self.w.writeheader()
        self.cuda = cuda
        self.nvml = open_nvml() if cuda else None

    def clock(self):
        return None if self.nvml is None else self.nvml.sm_clock_mhz()

    def failed(self, exc: BaseException, **kw):
        """A row for an iteration that raised (one line of the error), its traceback on stderr, and the
        allocator's cache emptied so the next one starts clean."""
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        self.row(**kw, note=f"error: {type(exc).__name__}: {first}")
        traceback.print_exc()
        if self.cuda:
            torch.cuda.empty_cache()

    def row(self, **kw):
        kw.setdefault("sm_clock_mhz", self.clock())
        if self.cuda:
            kw.setdefault("peak_alloc_gib", f"{torch.cuda.max_memory_allocated() / 2**30:.2f}")
        self.w.writerow(kw)
        self.f.flush()


def build(name, spec, device):
    import transformers
    spec = dict(spec)
    kind = spec.pop("kind")
    if kind == "llama":
        cfg = transformers.LlamaConfig(**spec)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.Qwen2MoeConfig(**spec)
        cls = transformers.Qwen2MoeForCausalLM
    cfg._attn_implementation = "sdpa"
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        with device:
            model = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    model.eval()
    return model, cfg


class Timer:
    def __init__(self, cuda):
        self.cuda = cuda

    def __call__(self, fn, reps, warmup=0):
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(reps):
            if self.cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                e0.record()
                fn()
                e1.record()
                torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
            else:
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e3)
        ts.sort()
        return statistics.median(ts), ts[0], ts[-1]


def device_busy_ms(fn, steps, cuda):
    """Sum of the kernels' device time per call of ``fn`` over ``steps`` calls (torch.profiler)."""
    if not cuda:
        return None
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    total_us = 0.0
    for ev in prof.events():  # kernels and copies are events on the device, each with its own time range
        if "CUDA" not in str(getattr(ev, "device_type", "")):
            continue
        tr = getattr(ev, "time_range", None)
        if tr is not None:
            total_us += tr.end - tr.start
    return total_us / 1e3 / steps


def filled_cache(cfg, batch, ctx, device):
    """A ``DynamicCache`` holding ``ctx`` tokens of random keys and values per sequence in every layer,
    as a prefill would leave it (the values do not change a step's time), without the prefill's cost."""
    from transformers import DynamicCache
    cache = DynamicCache(config=cfg) if "config" in DynamicCache.__init__.__code__.co_varnames else DynamicCache()
    heads = cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    for layer in range(cfg.num_hidden_layers):
        k = torch.randn(batch, heads, ctx, d, dtype=dt, device=device)
        cache.update(k, torch.randn_like(k), layer)
    return cache


def prompt_lengths(n, quick):
    """N prompt lengths spread log-uniformly over 64..2048 tokens (8..32 for --cpu), in a fixed shuffled order."""
    lo, hi = (8, 32) if quick else (64, 2048)
    lens = [round(lo * (hi / lo) ** (i / max(n - 1, 1))) for i in range(n)]
    order = sorted(range(n), key=lambda i: (i * 37) % n)
    return [lens[i] for i in order]


def continuous(out, requests_w, name, model, cfg, device, quick, params):
    """One run of transformers' continuous-batching engine over mixed prompts submitted together."""
    from transformers import GenerationConfig
    n, tout = (4, 4) if quick else (64, 128)
    lens = prompt_lengths(n, quick)
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randint(0, cfg.vocab_size, (t,), generator=gen).tolist() for t in lens]
    gc = GenerationConfig(max_new_tokens=tout, min_new_tokens=tout, do_sample=False, eos_token_id=-1, pad_token_id=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t = time.perf_counter()
    res = model.generate_batch(inputs=inputs, generation_config=gc, record_timestamps=True, max_new_tokens=tout)
    call_s = time.perf_counter() - t
    produced = 0
    first = min((r.created_time for r in res.values() if getattr(r, "created_time", None) is not None), default=None)
    last = max((r.timestamps[-1] for r in res.values() if getattr(r, "timestamps", None)), default=None)
    wall_ms = (last - first) * 1e3 if first is not None and last is not None else None
    for rid, r in res.items():
        toks = len(getattr(r, "generated_tokens", []) or [])
        produced += toks
        ts = getattr(r, "timestamps", None) or []
        created = getattr(r, "created_time", None)
        ttft = (ts[0] - created) * 1e3 if ts and created is not None else None
        tpot = (ts[-1] - ts[0]) * 1e3 / (len(ts) - 1) if len(ts) > 1 else None
        end = (ts[-1] - created) * 1e3 if ts and created is not None else None
        requests_w.writerow({"model": name, "request": rid, "prompt_len": len(getattr(r, "prompt_ids", []) or []),
                             "generated": toks, "ttft_ms": f"{ttft:.3f}" if ttft is not None else "",
                             "tpot_ms": f"{tpot:.3f}" if tpot is not None else "",
                             "end_ms": f"{end:.3f}" if end is not None else "",
                             "error": getattr(r, "error", None) or ""})
    errors = [str(r.error).splitlines()[0][:120] for r in res.values() if getattr(r, "error", None)]
    if errors or not res:
        raise RuntimeError(f"{len(errors)} of {n} requests failed: {errors[0] if errors else 'no results'}")
    out.row(model=name, phase="continuous", batch=n, tokens_in=sum(lens), context=0, tokens_out=produced,
            median_ms=f"{wall_ms:.3f}" if wall_ms is not None else "", params=params,
            note=f"generate_batch: {n} prompts {min(lens)}-{max(lens)} tokens (sum in tokens_in) x {tout} new, "
                 f"greedy; tokens_out = all generated; time from the first request's submission to the last "
                 f"token (the whole call with the engine's warm-up: {call_s:.1f} s)")


def run_model(out, name, spec, device, quick, t_start, budget_s, phases=("prefill", "decode", "generate"),
              decode_shapes=None, requests_w=None):
    cuda = device.type == "cuda"
    timer = Timer(cuda)
    t0 = time.monotonic()
    model, cfg = build(name, spec, device)
    params = sum(p.numel() for p in model.parameters())
    print(f"  {name}: {params / 1e9:.2f} B parameters, built in {time.monotonic() - t0:.1f} s", flush=True)
    V = cfg.vocab_size
    if quick:
        prefill = [(1, 16), (2, 32)]
        decode = [(1, 16), (2, 32)]
        gens = [(2, 8, 4)]
    else:
        prefill = [(1, 128), (1, 512), (1, 2048), (1, 8192), (8, 512), (8, 2048), (32, 512), (64, 1024)]
        decode = [(1, 512), (1, 4096), (8, 512), (8, 2048), (32, 512), (32, 2048), (64, 1024), (128, 1024),
                  (256, 512)]
        gens = [(1, 512, 128), (16, 512, 128), (64, 256, 64)]
        if name.startswith("qwen"):
            prefill, decode, gens = prefill[:6], decode[:6], [(1, 512, 32)]
    if decode_shapes:
        decode = decode_shapes
    prefill = prefill if "prefill" in phases else []
    decode = decode if "decode" in phases else []
    gens = gens if "generate" in phases else []

    def over():
        return time.monotonic() - t_start > budget_s

    with torch.inference_mode():
        for b, t in prefill:
            if over():
                return
            ids = torch.randint(0, V, (b, t), device=device)
            try:
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                med, lo, hi = timer(lambda: model(ids, use_cache=True, logits_to_keep=1), 3 if quick else 4, warmup=1)
                out.row(model=name, phase="prefill", batch=b, tokens_in=t, context=0, tokens_out=0,
                        median_ms=f"{med:.3f}", p10_ms=f"{lo:.3f}", p90_ms=f"{hi:.3f}", params=params)
            except Exception as e:
                out.failed(e, model=name, phase="prefill", batch=b, tokens_in=t)
        for b, ctx in decode:
            if over():
                return
            try:
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                cache = filled_cache(cfg, b, ctx, device)
                step_ids = torch.randint(0, V, (b, 1), device=device)

                def step():
                    model(step_ids, past_key_values=cache, use_cache=True)
                med, lo, hi = timer(step, 4 if quick else 12)
                busy = device_busy_ms(step, 4, cuda)
                out.row(model=name, phase="decode", batch=b, tokens_in=0, context=ctx, tokens_out=1,
                        median_ms=f"{med:.3f}", p10_ms=f"{lo:.3f}", p90_ms=f"{hi:.3f}",
                        device_busy_ms=f"{busy:.3f}" if busy is not None else "", params=params,
                        note="cache filled with random K/V (no prefill); context grows by one per step "
                             "(12 timed + 4 profiled)")
                del cache
            except Exception as e:
                out.failed(e, model=name, phase="decode", batch=b, context=ctx)
        for b, tin, tout in gens:
            if over():
                return
            try:
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                ids = torch.randint(0, V, (b, tin), device=device)
                mask = torch.ones_like(ids)
                med, lo, hi = timer(lambda: model.generate(ids, attention_mask=mask, do_sample=False,
                                                           max_new_tokens=tout, min_new_tokens=tout,
                                                           pad_token_id=0), 2)
                out.row(model=name, phase="generate", batch=b, tokens_in=tin, context=0, tokens_out=tout,
                        median_ms=f"{med:.3f}", p10_ms=f"{lo:.3f}", p90_ms=f"{hi:.3f}", params=params,
                        note="model.generate, greedy, min_new_tokens = max_new_tokens")
            except Exception as e:
                out.failed(e, model=name, phase="generate", batch=b, tokens_in=tin, tokens_out=tout)
    # outside inference mode: the engine's thread updates its static tensors in place
    if "continuous" in phases and requests_w is not None and not over():
        try:
            continuous(out, requests_w, name, model, cfg, device, quick, params)
        except Exception as e:
            out.failed(e, model=name, phase="continuous")
    del model
    if cuda:
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="a tiny model on the CPU: a check of this script only")
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--models", default=None, help="comma-separated names of MODELS, in order (default: all)")
    ap.add_argument("--phases", default="prefill,decode,generate",
                    help="any of prefill,decode,generate,continuous")
    ap.add_argument("--requests", default=None, help="CSV of the continuous phase's requests (one row each)")
    ap.add_argument("--decode", default=None, help="decode shapes BATCH:CONTEXT,... (replace each model's list)")
    args = ap.parse_args(argv)
    try:
        decode_shapes = [tuple(int(v) for v in bc.split(":")) for bc in args.decode.split(",")] if args.decode else None
        if decode_shapes and any(len(t) != 2 for t in decode_shapes):
            raise ValueError(args.decode)
    except ValueError:
        print(f"error: --decode takes BATCH:CONTEXT pairs, got {args.decode!r}", file=sys.stderr)
        return 2
    if not args.cpu and not torch.cuda.is_available():
        print("error: no CUDA GPU (use --cpu to check the script)", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.cpu else "cuda")
    torch.manual_seed(0)
    out = Out(args.out, device.type == "cuda")
    t_start = time.monotonic()
    models = {"tiny": TINY, "tiny-moe": dict(TINY, kind="qwen2_moe", moe_intermediate_size=32,
                                             shared_expert_intermediate_size=64, num_experts=4,
                                             num_experts_per_tok=2)} if args.cpu else MODELS
    if args.models and not args.cpu:
        unknown = [m for m in args.models.split(",") if m not in MODELS]
        if unknown:
            print(f"error: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        models = {m: MODELS[m] for m in args.models.split(",")}
    requests_w = None
    if args.requests:
        rf = open(args.requests, "w", newline="")
        requests_w = csv.DictWriter(rf, fieldnames=["model", "request", "prompt_len", "generated", "ttft_ms",
                                                    "tpot_ms", "end_ms", "error"])
        requests_w.writeheader()
    for name, spec in models.items():
        if time.monotonic() - t_start > args.budget:
            break
        print(f"[{time.monotonic() - t_start:6.1f} s] {name}", flush=True)
        try:
            run_model(out, name, spec, device, args.cpu, t_start, args.budget, tuple(args.phases.split(",")),
                      decode_shapes, requests_w)
        except Exception:
            traceback.print_exc()
    print(f"serving: done in {time.monotonic() - t_start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
