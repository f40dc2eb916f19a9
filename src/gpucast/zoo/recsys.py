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


# NeuMF as the NCF scripts (hexiangnan/neural_collaborative_filtering, guoyang9/NCF) build it on
# MovieLens-1M: 6,040 users, 3,706 items (He et al. 2017, Table 1), predictive factor 32 and three
# MLP layers: 128-d user and item MLP embeddings, MLP 256-128-64-32, GMF 32.
ML1M_USERS, ML1M_ITEMS = 6_040, 3_706


def _ids_input(users: int, items: int):
    """An ``input_fn`` of ``(batch, 2)`` (user id, item id) pairs within the tables' sizes."""

    def input_fn(spec: WorkloadSpec, batch_size: int):
        import torch

        return (torch.stack([torch.randint(0, users, (batch_size,)), torch.randint(0, items, (batch_size,))], 1),)

    return input_fn


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


# --- recoder's DynamicAutoencoder (the model Gavel's Recommendation job trains) ---------------
# ML-20M as Liang et al. 2018 (VAE-CF) preprocess it (ratings >= 3.5 kept, users with >= 5):
# 136,677 users, 20,108 items, 10.0M interactions (their Table 1): 73 per user on average.
ML20M_ITEMS = 20_108
ML20M_INTERACTIONS_PER_USER = 73


def _recoder(spec: WorkloadSpec, items: int = ML20M_ITEMS, hidden: int = 200, noise: float = 0.5):
    """recoder's ``DynamicAutoencoder(hidden_layers=[200], activation_type='tanh',
    noise_prob=0.5, sparse=False)`` (Gavel's recommendation/recoder/nn.py): item embeddings
    gathered for the batch's items (an encoder ``Embedding(items, 200)`` used as the weight of a
    linear layer from the item ratings, its bias 200; a decoder ``Embedding(items, 200)`` and a
    bias per item), with one hidden layer there are no further linear layers.

    ``forward(cols, values)`` starts where recoder's ``__compute_loss`` does: the batch's sparse
    ratings densified on the GPU (``to_dense``: a zero fill of batch x items and one scatter),
    then the row L2 ``normalize``, dropout 0.5 (the noise layer), the encoder, tanh, the decoder.
    Every item is in the batch (no negative sampling's subset: an upper bound on the columns).
    Returns the logits and the dense ratings (the target)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class DynamicAutoencoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.en_embedding_layer = nn.Embedding(items, hidden)
            self.en_bias = nn.Parameter(torch.zeros(hidden))
            self.de_embedding_layer = nn.Embedding(items, hidden)
            self.de_bias = nn.Parameter(torch.zeros(items))
            self.noise_layer = nn.Dropout(noise)

        def forward(self, cols, values):
            dense = values.new_zeros(cols.shape[0], items).scatter_(1, cols, values)
            batch_items = torch.arange(items, device=cols.device)      # input.items, on the GPU
            z = self.noise_layer(F.normalize(dense, p=2, dim=1))
            z = torch.tanh(F.linear(z, self.en_embedding_layer(batch_items).t(), self.en_bias))
            out = F.linear(z, self.de_embedding_layer(batch_items), self.de_bias.index_select(0, batch_items))
            return out, dense

    return DynamicAutoencoder()


def _recoder_input(spec: WorkloadSpec, batch_size: int):
    """Each user's interactions: item columns and values, ``input_shape`` (interactions,) each."""
    import torch

    n = spec.input_shape[0]
    return torch.randint(0, ML20M_ITEMS, (batch_size, n)), torch.ones(batch_size, n)


def _recoder_loss(output, inputs):
    """recoder's 'logistic' loss: ``BCEWithLogitsLoss(reduction='sum')(output, dense)`` divided by
    the batch size (``torch.FloatTensor([B]).to(device)``)."""
    import torch.nn.functional as F

    logits, dense = output
    normalization = logits.new_tensor([logits.shape[0]]).squeeze()
    return F.binary_cross_entropy_with_logits(logits, dense, reduction="sum") / normalization


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
    name="ncf-ml1m", family="recsys", source="gpucast",
    description="NeuMF (He et al. 2017), MovieLens-1M embeddings (6,040 x 3,706), GMF 32 + MLP "
                "256-128-64-32",
    model_fn=lambda spec: _ncf(spec, users=ML1M_USERS, items=ML1M_ITEMS, mf_dim=32, mlp=(256, 128, 64, 32)),
    input_fn=_ids_input(ML1M_USERS, ML1M_ITEMS), loss_fn=_ctr_loss,
    default_batch_size=256, default_input_shape=(2,), tags=("ctr",),
))

register(Workload(
    name="recoder-ml20m", family="recsys", source="gpucast",
    description="recoder DynamicAutoencoder [200] tanh, noise 0.5, ML-20M (VAE-CF split) 20,108 items, "
                "sparse batches densified on the GPU, BCE-with-logits",
    model_fn=_recoder, input_fn=_recoder_input, loss_fn=_recoder_loss,
    default_batch_size=2048, default_input_shape=(ML20M_INTERACTIONS_PER_USER,), tags=("autoencoder",),
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
