"""Translations of a prediction into what cluster schedulers understand.

``resources`` holds the one rule that turns a :class:`~gpucast.prediction.Prediction` into a
share of a GPU; ``ray`` (fractional ``num_gpus`` and a launcher), ``kubernetes`` (HAMi resource
limits through a mutating admission webhook) and ``slurm`` (``--gres=shard:N`` / ``mps:N``) only
spell that share in their engine's units. None of them predicts in its own way: ``remote`` asks
a running prediction service (``gpucast serve``) for the same Prediction, for callers that
cannot afford to import torch (``gpucast slurm --service``).
"""
