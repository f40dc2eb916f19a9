"""Recurrent language and translation models, written here over ``torch.nn.LSTM`` / ``GRU``.

No maintained library ships these classic definitions, so they are short classes in this file.
Inputs are token ids ``(batch, seq_len)``; the loss is next-token cross-entropy.
"""

from __future__ import annotations

from functools import partial

from gpucast.zoo import register
from gpucast.zoo.base import Workload, next_token_loss, token_input


def _rnn_lm(cell: str, vocab: int, hidden: int, layers: int, dropout: float):
    """Word-level RNN LM of Zaremba et al. 2014 ("Recurrent Neural Network Regularization"):
    embedding (size = hidden) -> dropout -> stacked LSTM/GRU -> dropout -> linear to vocab."""
    import torch.nn as nn

    class RNNLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
            self.rnn = rnn(hidden, hidden, layers, dropout=dropout, batch_first=True)
            self.drop = nn.Dropout(dropout)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, tokens):
            h, _ = self.rnn(self.drop(self.embed(tokens)))
            return self.out(self.drop(h))

    return RNNLM()


def _seq2seq(vocab: int, hidden: int, layers: int, dropout: float):
    """LSTM encoder-decoder with Luong dot attention (Sutskever et al. 2014; Luong et al. 2015),
    teacher-forced: the decoder reads the target tokens and predicts each next one."""
    import torch
    import torch.nn as nn

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(vocab, hidden)
            self.tgt_embed = nn.Embedding(vocab, hidden)
            self.encoder = nn.LSTM(hidden, hidden, layers, dropout=dropout, batch_first=True)
            self.decoder = nn.LSTM(hidden, hidden, layers, dropout=dropout, batch_first=True)
            self.combine = nn.Linear(2 * hidden, hidden)
            self.drop = nn.Dropout(dropout)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, src, tgt):
            enc, state = self.encoder(self.drop(self.src_embed(src)))
            dec, _ = self.decoder(self.drop(self.tgt_embed(tgt)), state)
            attn = torch.softmax(dec @ enc.transpose(1, 2), dim=-1)  # (B, T_tgt, T_src)
            h = torch.tanh(self.combine(torch.cat([dec, attn @ enc], dim=-1)))
            return self.out(self.drop(h))

    return Seq2Seq()


PTB_VOCAB = 10_000
for _size, _hidden, _drop in (("small", 200, 0.0), ("medium", 650, 0.5), ("large", 1500, 0.65)):
    register(Workload(
        name=f"lstm-lm-{_size}", family="rnn", source="gpucast",
        description=f"2-layer LSTM LM, hidden {_hidden} (Zaremba et al. 2014 {_size}), "
                    f"PTB vocab 10k, seq 35",
        model_fn=lambda spec, h=_hidden, d=_drop: _rnn_lm("lstm", PTB_VOCAB, h, 2, d),
        input_fn=token_input(PTB_VOCAB), loss_fn=next_token_loss,
        default_batch_size=20, default_seq_len=35, tags=("lm", "ptb"),
    ))

register(Workload(
    name="gru-lm", family="rnn", source="gpucast",
    description="2-layer GRU LM, hidden 650 (Zaremba et al. 2014 medium shape), PTB vocab 10k, "
                "seq 35",
    model_fn=lambda spec: _rnn_lm("gru", PTB_VOCAB, 650, 2, 0.5),
    input_fn=token_input(PTB_VOCAB), loss_fn=next_token_loss,
    default_batch_size=20, default_seq_len=35, tags=("lm", "ptb"),
))

register(Workload(
    name="lstm-seq2seq", family="rnn", source="gpucast",
    description="LSTM encoder-decoder NMT with dot attention, 2x512 each side, vocab 32k, seq 50",
    model_fn=lambda spec: _seq2seq(32_000, 512, 2, 0.2),
    input_fn=token_input(32_000, streams=2), loss_fn=partial(next_token_loss, stream=1),
    default_batch_size=64, default_seq_len=50, tags=("translation",),
))
