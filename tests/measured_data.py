"""Where the tests find the measured sets of others (``data/measured/<set>`` in the repository:
GPUMemNet's MLP runs, Gavel, Lucid's RTX 3090 set, llm-foundry's MPT table; each folder's README
has its provenance and licence). They are part of the checkout, so no test skips for want of them.
Never packaged: the installed ``gpucast`` does not read them."""

from __future__ import annotations

from pathlib import Path

MEASURED = Path(__file__).resolve().parents[1] / "data" / "measured"
MLP_CSV = MEASURED / "gpumemnet-mlp" / "runs.csv"
GAVEL_JSON = MEASURED / "gavel" / "simulation_throughputs.json"
LUCID = MEASURED / "lucid-rtx3090"
LLM_FOUNDRY = MEASURED / "llm-foundry-a100-40gb"
LLM_INFERENCE = MEASURED / "llm-inference-bench-a100" / "a100_serving.csv"
