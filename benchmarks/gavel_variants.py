"""The supplementary module jobs of ``benchmarks/gavel_compare.py``: three of Gavel's models written
as Gavel's own code defines them, where gpucast's zoo cannot express them (a different
architecture or vocabulary): pytorch/examples' WikiText-2 LSTM (job type ``LM``), recoder's
DynamicAutoencoder over ML-20M (``Recommendation``) and dgriff777's A3C LSTM (``A3C``). Each
:class:`Variant` is a model, input and loss factory for ``Job.from_module``; the comparison
reports them apart from the headline zoo mapping, never mixed into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Variant", "VARIANTS"]


def _ce_loss(output, inputs):
    import torch
    import torch.nn.functional as F

    logits = output.float().reshape(-1, output.shape[-1])
    return F.cross_entropy(logits, torch.randint(0, logits.shape[-1], logits.shape[:1], device=logits.device))


WIKITEXT2_VOCAB = 33_278  # pytorch/examples word_language_model dictionary over WikiText-2


def _wikitext_lstm():
    """pytorch/examples RNNModel as Gavel runs it: LSTM, emsize 200, nhid 200, 2 layers, dropout
    0.2, untied decoder to the WikiText-2 vocabulary; input (bptt, batch)."""
    import torch.nn as nn

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.2)
            self.encoder = nn.Embedding(WIKITEXT2_VOCAB, 200)
            self.rnn = nn.LSTM(200, 200, 2, dropout=0.2)
            self.decoder = nn.Linear(200, WIKITEXT2_VOCAB)

        def forward(self, tokens):
            out, _ = self.rnn(self.drop(self.encoder(tokens)))
            return self.decoder(self.drop(out))

    return RNNModel()


def _wikitext_input(batch_size):
    import torch

    return (torch.randint(0, WIKITEXT2_VOCAB, (35, batch_size), dtype=torch.long),)


ML20M_ITEMS = 20_108  # ML-20M after VAE-CF preprocessing (Liang et al. 2018, Table 1)


def _recoder_autoencoder():
    """recoder's DynamicAutoencoder(hidden_layers=[200], tanh, noise_prob=0.5) over all items:
    L2-normalise, dropout, gathered item embedding as the encoder weight, tanh, gathered item
    embedding as the decoder weight; logits out (BCE-with-logits, sum, / batch)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class DynamicAutoencoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.en = nn.Embedding(ML20M_ITEMS, 200)
            self.en_bias = nn.Parameter(torch.zeros(200))
            self.de = nn.Embedding(ML20M_ITEMS, 200)
            self.de_bias = nn.Parameter(torch.zeros(ML20M_ITEMS))
            self.noise = nn.Dropout(0.5)

        def forward(self, x, items):
            z = self.noise(F.normalize(x, p=2, dim=1))
            z = torch.tanh(F.linear(z, self.en(items).t(), self.en_bias))
            return F.linear(z, self.de(items), self.de_bias.index_select(0, items))

    return DynamicAutoencoder()


def _recoder_input(batch_size):
    import torch

    return torch.rand(batch_size, ML20M_ITEMS), torch.arange(ML20M_ITEMS)


def _bce_sum_loss(output, inputs):
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(output.float(), inputs[0].float(), reduction="sum") / output.shape[0]


def _dgriff_a3c():
    """dgriff777/rl_a3c_pytorch A3Clstm on 1x80x80 Pong frames: conv 32 5x5 p2 + pool, conv 32 5x5
    p1 + pool, conv 64 4x4 p1 + pool, conv 64 3x3 p1 + pool -> 1024, LSTMCell(1024, 512), actor 6,
    critic 1; a 20-frame rollout stepped one frame at a time, then one backward."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class A3Clstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 5, 1, 2)
            self.conv2 = nn.Conv2d(32, 32, 5, 1, 1)
            self.conv3 = nn.Conv2d(32, 64, 4, 1, 1)
            self.conv4 = nn.Conv2d(64, 64, 3, 1, 1)
            self.lstm = nn.LSTMCell(1024, 512)
            self.critic = nn.Linear(512, 1)
            self.actor = nn.Linear(512, 6)

        def forward(self, frames):
            hx = cx = torch.zeros(1, 512, device=frames.device)
            logits, values = [], []
            for t in range(frames.shape[0]):
                x = frames[t:t + 1]
                for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
                    x = F.relu(F.max_pool2d(conv(x), 2, 2))
                hx, cx = self.lstm(x.flatten(1), (hx, cx))
                logits.append(self.actor(hx))
                values.append(self.critic(hx))
            return torch.cat(logits), torch.cat(values)

    return A3Clstm()


def _a3c_input(batch_size):
    import torch

    return (torch.randn(batch_size, 1, 80, 80),)


def _a3c_loss(output, inputs):
    import torch
    import torch.nn.functional as F

    logits, values = output
    logp = F.log_softmax(logits.float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    act = torch.randint(0, logits.shape[-1], logits.shape[:1], device=logits.device)
    adv = torch.randn(values.shape[0], device=values.device)
    return (-(logp.gather(1, act[:, None]).squeeze(1) * adv).sum() - 0.01 * entropy.sum()
            + 0.5 * (values.squeeze(1) - adv).pow(2).sum())


@dataclass(frozen=True)
class Variant:
    name: str
    job_type: str
    model_fn: Callable
    input_fn: Callable
    loss_fn: Callable
    optimizer: str
    batch: Callable[[int | None], int]
    what: str


VARIANTS = [
    Variant("wikitext2-lstm", "LM", _wikitext_lstm, _wikitext_input, _ce_loss, "sgd",
            lambda b: b, "LSTM 200x2 with the 33,278-word WikiText-2 decoder, dropout 0.2"),
    Variant("recoder-dae-200", "Recommendation", _recoder_autoencoder, _recoder_input,
            _bce_sum_loss, "adam", lambda b: b,
            "recoder DynamicAutoencoder [200] tanh over all 20,108 items (upper bound: negative "
            "sampling shows a batch fewer items)"),
    Variant("dgriff-a3c-lstm", "A3C", _dgriff_a3c, _a3c_input, _a3c_loss, "none", lambda b: 20,
            "dgriff777 A3Clstm, 20-frame rollout; optimizer 'none' because Gavel's Adam runs on "
            "the CPU copy of the model"),
]
