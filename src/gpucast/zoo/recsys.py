"""Recommendation models, written here over ``torch.nn`` (each cites its paper)."""

from __future__ import annotations

from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec


def _mlp(sizes, final_act: bool = True):
    import torch.nn as nn

    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if final_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _ctr_loss(output, inputs):
    """Click-through / implicit-feedback loss: BCE-with-logits against random 0/1 labels."""
    import torch
    import torch.nn.functional as F

    logits = output.float()
    labels = torch.randint(0, 2, logits.shape, device=logits.device).float()
    return F.binary_cross_entropy_with_logits(logits, labels)


# --- NCF -----------------------------------------------------------------------------------

def _ncf(spec: WorkloadSpec, users=138_493, items=26_744, mf_dim=64, mlp=(256, 256, 128, 64)):
    """NeuMF (He et al. 2017, "Neural Collaborative Filtering"): GMF + MLP towers over separate
    user/item embeddings, fused by one linear layer. Sizes: MovieLens-20M, the MLPerf NCF
    recipe. Input: ``(batch, 2)`` (user id, item id)."""
    import torch
    import torch.nn as nn

    class NeuMF(nn.Module):
        def __init__(self):
            super().__init__()
            self.mf_user, self.mf_item = nn.Embedding(users, mf_dim), nn.Embedding(items, mf_dim)
            self.mlp_user = nn.Embedding(users, mlp[0] // 2)
            self.mlp_item = nn.Embedding(items, mlp[0] // 2)
            self.mlp = _mlp(mlp)
            self.out = nn.Linear(mf_dim + mlp[-1], 1)

        def forward(self, pairs):
            u, i = pairs[:, 0], pairs[:, 1]
            gmf = self.mf_user(u) * self.mf_item(i)
            deep = self.mlp(torch.cat([self.mlp_user(u), self.mlp_item(i)], dim=-1))
            return self.out(torch.cat([gmf, deep], dim=-1)).squeeze(-1)

    return NeuMF()


def _ncf_input(spec: WorkloadSpec, batch_size: int):
    import torch

    return (torch.randint(0, 26_744, (batch_size, *spec.input_shape), dtype=torch.long),)


# --- DLRM ----------------------------------------------------------------------------------

_DLRM_TABLES = (100_000,) * 8  # rows per embedding table (a scaled-down Criteo setup)
_DLRM_DIM = 16


def _dlrm(spec: WorkloadSpec, bottom=(512, 256, 64), top=(512, 256)):
    """DLRM (Naumov et al. 2019): bottom MLP on dense features, one embedding per sparse
    feature, pairwise dot-product interaction, top MLP to one logit. The Criteo-Kaggle arch of
    the reference repo (13-512-256-64-16 bottom, 512-256-1 top, dim 16), 8 tables of 100k rows."""
    import torch
    import torch.nn as nn

    n = len(_DLRM_TABLES) + 1

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = _mlp((spec.input_shape[0], *bottom, _DLRM_DIM))
            self.tables = nn.ModuleList(nn.EmbeddingBag(rows, _DLRM_DIM, mode="sum")
                                        for rows in _DLRM_TABLES)
            self.top = _mlp((_DLRM_DIM + n * (n - 1) // 2, *top, 1), final_act=False)
            self.register_buffer("pairs", torch.tril_indices(n, n, offset=-1), persistent=False)

        def forward(self, dense, sparse):
            x = self.bottom(dense)
            feats = torch.stack([x] + [t(sparse[:, k:k + 1]) for k, t in enumerate(self.tables)],
                                dim=1)                                   # (B, n, d)
            inter = feats @ feats.transpose(1, 2)                        # (B, n, n)
            pairs = inter[:, self.pairs[0], self.pairs[1]]               # lower triangle
            return self.top(torch.cat([x, pairs], dim=1)).squeeze(-1)

    return DLRM()


def _dlrm_input(spec: WorkloadSpec, batch_size: int):
    import torch

    sparse = torch.randint(0, min(_DLRM_TABLES), (batch_size, len(_DLRM_TABLES)), dtype=torch.long)
    return torch.randn(batch_size, *spec.input_shape), sparse


# --- DeepRecommender -----------------------------------------------------------------------

def _deeprec(spec: WorkloadSpec, hidden=(512, 512, 1024), dropout=0.8):
    """NVIDIA DeepRecommender (Kuchaiev & Ginsburg 2017, "Training Deep AutoEncoders for
    Collaborative Filtering"): SELU encoder, dropout on the code, decoder constrained to the
    transposed encoder weights (the reference default), SELU on every layer."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    sizes = (spec.input_shape[0], *hidden)

    class AutoEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc_w = nn.ParameterList(nn.Parameter(torch.empty(b, a))
                                          for a, b in zip(sizes, sizes[1:]))
            self.enc_b = nn.ParameterList(nn.Parameter(torch.zeros(b)) for b in sizes[1:])
            self.dec_b = nn.ParameterList(nn.Parameter(torch.zeros(a)) for a in sizes[-2::-1])
            for w in self.enc_w:
                nn.init.xavier_uniform_(w)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            for w, b in zip(self.enc_w, self.enc_b):
                x = F.selu(F.linear(x, w, b))
            x = self.drop(x)
            for w, b in zip(reversed(self.enc_w), self.dec_b):
                x = F.selu(F.linear(x, w.t(), b))
            return x

    return AutoEncoder()


def _deeprec_input(spec: WorkloadSpec, batch_size: int):
    import torch

    return (torch.randn(batch_size, *spec.input_shape),)  # dense user rating vectors


def _masked_mse(output, inputs):
    """DeepRecommender's MMSE: squared error on the rated (non-zero) entries only."""
    ratings = inputs[0].float()
    mask = (ratings != 0).float()
    return ((output.float() - ratings) ** 2 * mask).sum() / mask.sum().clamp(min=1.0)


register(Workload(
    name="ncf", family="recsys", source="gpucast",
    description="NeuMF (He et al. 2017), MovieLens-20M embeddings, MF 64 + MLP 256-256-128-64",
    model_fn=_ncf, input_fn=_ncf_input, loss_fn=_ctr_loss,
    default_batch_size=2048, default_input_shape=(2,), tags=("ctr",),
))

register(Workload(
    name="dlrm-small", family="recsys", source="gpucast",
    description="DLRM (Naumov et al. 2019), 13 dense + 8 sparse features (100k x 16 tables), "
                "dot interaction",
    model_fn=_dlrm, input_fn=_dlrm_input, loss_fn=_ctr_loss,
    default_batch_size=2048, default_input_shape=(13,), tags=("ctr",),
))

register(Workload(
    name="deeprec-autoencoder", family="recsys", source="gpucast",
    description="NVIDIA DeepRecommender autoencoder (Kuchaiev & Ginsburg 2017), 17768 items, "
                "512-512-1024, dropout 0.8",
    model_fn=_deeprec, input_fn=_deeprec_input, loss_fn=_masked_mse,
    default_batch_size=128, default_input_shape=(17_768,), tags=("autoencoder",),
))
