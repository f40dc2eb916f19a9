"""How much a training framework's host work moves a plan's predicted step: GPT-2-shaped models
(hidden 1,024 and 2,048, 24 layers) in fp16 with full recompute on one 8 x A100-80GB node, tensor
parallelism 1, 2, 4 at micro-batch 1 and 8, predicted under Megatron-LM's Python and with none
(``parallel.framework=torch``). All predictions, nothing measured.

Run: ``.venv/bin/python benchmarks/framework_host.py``; writes ``benchmarks/results/framework_host.md``.
"""

from __future__ import annotations

from pathlib import Path

from gpucast import Job, predict

OUT = Path(__file__).parent / "results" / "framework_host.md"


def main() -> None:
    rows = ["| hidden | seq | tensor | micro-batch | step, no framework (ms) | step, Megatron-LM (ms) | ratio | "
            "framework host a step (ms) | MFU |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for hidden in (1024, 2048):
        cfg = dict(model_type="gpt2", n_embd=hidden, n_layer=24, n_head=16, n_positions=2048, vocab_size=50304,
                   bos_token_id=0, eos_token_id=0)
        for seq in (512, 2048):
            for t in (1, 2, 4):
                for mb in (1, 8):
                    def run(fw):
                        job = Job.from_hf_config(cfg, batch_size=mb, seq_len=seq, precision="fp16", optimizer="adamw",
                                                 gpus=8, parallel=dict(tensor=t, recompute="full", grad_accum=4,
                                                                       framework=fw))
                        return predict(job, gpu="a100-80gb")
                    plain, mega = run("torch"), run("megatron")
                    rows.append(f"| {hidden} | {seq} | {t} | {mb} | {plain.step_time_s * 1e3:.1f} | "
                                f"{mega.step_time_s * 1e3:.1f} | {mega.step_time_s / plain.step_time_s:.2f} | "
                                f"{mega.plan['framework_host_s'] * 1e3:.1f} | {mega.plan['mfu']:.3f} |")
    text = "\n".join(rows) + "\n"
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
