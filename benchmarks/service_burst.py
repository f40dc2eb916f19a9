"""A burst of first requests to a cold service, as a scheduler's admission webhook or a Ray driver sends it.

Each round starts the installed ``gpucast serve`` in a **subprocess** with an empty disk cache (so
nothing is imported or remembered yet), waits for ``/healthz``, then sends every body of
:data:`VALID` and :data:`BAD` to ``POST /v1/predict`` from ``--threads`` threads at once (one
barrier, so they arrive together), and stops the server. A round passes when every valid body is
answered 200, every bad body 422, and no answer carries a traceback. Nothing is asserted
(benchmarks are not tests); the table says how many rounds passed and what failed.

The bodies: ResNet-50, GPT-2 small, BERT-base and MobileNetV2-CIFAR from the zoo at batch 8, 16
and 32 on an A100-80GB and an H100 (24), GPT-2 under FSDP on 8 and ZeRO-1 on 4 H100s (2), and two
Hugging Face configs sent as JSON (a small GPT-2 and a small BERT); bad ones: an unknown workload,
batch 0, an unknown GPU, and a GPT-2 config whose width does not split into its heads.

    .venv/bin/python benchmarks/service_burst.py [--rounds 20] [--threads 8] \\
        [--markdown benchmarks/results/service_burst.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MD = REPO_ROOT / "benchmarks" / "results" / "service_burst.md"
GPT2_CFG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 5000, "n_positions": 256,
            "bos_token_id": 0, "eos_token_id": 0}
BERT_CFG = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
            "intermediate_size": 256, "vocab_size": 5000}
VALID = ([{"workload": w, "batch_size": b, "gpu": g} for w in ("resnet50", "gpt2", "bert-base", "mobilenet-v2-cifar")
          for b in (8, 16, 32) for g in ("a100-80gb", "h100")]
         + [{"workload": "gpt2", "batch_size": 8, "gpus": 8, "gpu": "h100", "optimizer": "adamw",
             "parallel": {"sharding": "fsdp-full"}},
            {"workload": "gpt2", "batch_size": 8, "gpus": 4, "gpu": "h100", "optimizer": "adamw",
             "parallel": {"sharding": "zero1"}},
            {"hf_config": GPT2_CFG, "batch_size": 8, "seq_len": 128, "gpu": "a100-80gb"},
            {"hf_config": BERT_CFG, "batch_size": 8, "seq_len": 128, "gpu": "h100"}])
BAD = [{"workload": "resnet5O", "batch_size": 8, "gpu": "h100"},
       {"workload": "resnet50", "batch_size": 0, "gpu": "h100"},
       {"workload": "resnet50", "batch_size": 8, "gpu": "a100-90gb"},
       {"hf_config": dict(GPT2_CFG, n_embd=130, n_head=4), "batch_size": 8, "seq_len": 128, "gpu": "h100"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(port: int, cache: str) -> subprocess.Popen:
    env = {**os.environ, "GPUCAST_CACHE_DIR": cache, "TRANSFORMERS_VERBOSITY": "error"}
    exe = Path(sys.executable).with_name("gpucast")
    proc = subprocess.Popen([str(exe), "serve", "--port", str(port), "--log-level", "warning",
                             "--data-dir", str(Path(cache) / "data")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gpucast serve did not start")


def one_round(threads: int) -> dict:
    """One cold service and one burst; what came back."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="gpucast-burst-") as cache:
        proc = _start(port, cache)
        bodies = [(True, b) for b in VALID] + [(False, b) for b in BAD]
        answers: list = [None] * len(bodies)
        barrier = threading.Barrier(threads)
        t0 = time.perf_counter()

        def worker(k: int) -> None:
            barrier.wait()
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as c:
                for i in range(k, len(bodies), threads):
                    r = c.post("/v1/predict", json=bodies[i][1])
                    answers[i] = (r.status_code, r.text)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    wrong = [f"{'valid' if ok else 'bad'} {_name(b)}: {code} {text[:160]}"
             for (ok, b), (code, text) in zip(bodies, answers) if code != (200 if ok else 422)]
    tracebacks = sum("Traceback" in text for _, text in answers)
    return {"wall_s": wall, "wrong": wrong, "tracebacks": tracebacks, "server_log_errors": err.count("Traceback"),
            "ok_valid": sum(a[0] == 200 for (ok, _), a in zip(bodies, answers) if ok),
            "ok_bad": sum(a[0] == 422 for (ok, _), a in zip(bodies, answers) if not ok)}


def _name(body: dict) -> str:
    what = body.get("workload") or f"hf:{body['hf_config']['model_type']}"
    return f"{what} b{body.get('batch_size')} {body.get('gpu')}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--markdown", type=Path, default=DEFAULT_MD)
    args = ap.parse_args()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the dev extra
        def tqdm(x, **_):
            return x
    rows = [one_round(args.threads) for _ in tqdm(range(args.rounds), desc="rounds", unit="round")]
    passed = sum(not r["wrong"] and not r["tracebacks"] for r in rows)
    load = os.getloadavg()
    lines = [
        "# A burst of first requests to a cold service",
        "",
        f"`.venv/bin/python benchmarks/service_burst.py --rounds {args.rounds} --threads {args.threads}` "
        f"on {platform.node()} ({os.cpu_count()} CPUs, load average {load[0]:.2f} at the end).",
        "",
        f"Each round: a fresh `gpucast serve` with an empty disk cache, {len(VALID)} valid and {len(BAD)} bad "
        f"`POST /v1/predict` bodies sent by {args.threads} threads at once.",
        "",
        "| rounds | rounds all right | valid bodies answered 200 | bad bodies answered 422 | answers with a traceback "
        "| burst wall time (median) |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {len(rows)} | {passed} | {sum(r['ok_valid'] for r in rows)} / {len(rows) * len(VALID)} "
        f"| {sum(r['ok_bad'] for r in rows)} / {len(rows) * len(BAD)} | {sum(r['tracebacks'] for r in rows)} "
        f"| {sorted(r['wall_s'] for r in rows)[len(rows) // 2]:.1f} s |",
    ]
    wrong = [w for r in rows for w in r["wrong"]]
    if wrong:
        lines += ["", "Wrong answers:", ""] + [f"- {w}" for w in wrong[:40]]
    text = "\n".join(lines) + "\n"
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
