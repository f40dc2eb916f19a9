"""Recurrent language and translation models, written here over ``torch.nn.LSTM`` / ``GRU``.

No maintained library ships these classic definitions, so they are short classes in this file.
Inputs are token ids ``(batch, seq_len)``; the loss is next-token cross-entropy.
"""

from __future__ import annotations

from functools import partial

from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec, after_backward, host_read, next_token_loss, token_input


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


# --- pytorch/examples word_language_model on WikiText-2 ------------------------------------------
# The RNNModel of word_language_model/model.py with main.py's defaults (--emsize 200 --nhid 200
# --nlayers 2 --dropout 0.2 --bptt 35, untied): the script Gavel runs as its LM job
# (workloads/pytorch/language_modeling) and Lucid as its LSTM (workloads/lstm). WikiText-2's
# vocabulary as data.Corpus builds it (train/valid/test words plus <eos>): 33,278 tokens
# (Merity et al. 2016, Table 1: 33,278).
WIKITEXT2_VOCAB = 33_278
WLM_CLIP = 0.25     # main.py --clip
WLM_LR = 20.0       # main.py --lr (plain SGD: no momentum, no weight decay)


def _wlm_lstm(vocab: int = WIKITEXT2_VOCAB, emsize: int = 200, nhid: int = 200, layers: int = 2,
              dropout: float = 0.2, log_softmax: bool = False):
    """word_language_model's RNNModel: embedding -> dropout -> LSTM (sequence-first, dropout
    between layers) -> dropout -> linear decoder to the vocabulary, untied. ``forward`` takes the
    loader's (batch, bptt) token ids and transposes them as main.py does (``data.t()``); the
    hidden state starts from zeros (main.py carries the previous step's, detached: two views
    instead of two fills). ``log_softmax``: forward returns ``F.log_softmax(decoded.view(-1,
    vocab), dim=1)`` as later versions of model.py (and Lucid's copy of it) do."""
    import torch.nn as nn
    import torch.nn.functional as F

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(vocab, emsize)
            self.rnn = nn.LSTM(emsize, nhid, layers, dropout=dropout)
            self.decoder = nn.Linear(nhid, vocab)

        def forward(self, tokens, targets=None):
            emb = self.drop(self.encoder(tokens.t()))
            out, _ = self.rnn(emb)
            decoded = self.decoder(self.drop(out).view(-1, out.shape[-1]))
            if log_softmax:
                return F.log_softmax(decoded, dim=1)
            return decoded.view(out.shape[0], out.shape[1], -1)

    return RNNModel()


def _wlm_input(spec: WorkloadSpec, batch_size: int):
    """What CorpusDataset yields per step: (batch, bptt) token ids and their next-token targets."""
    import torch

    return tuple(torch.randint(0, WIKITEXT2_VOCAB, (batch_size, spec.seq_len), dtype=torch.long)
                 for _ in range(2))


def _wlm_loss(output, inputs):
    """main.py: ``criterion(output.view(-1, ntokens), targets.flatten())``, CrossEntropyLoss over
    every one of the bptt positions (the loader's targets, transposed like the data)."""
    import torch.nn.functional as F

    return F.cross_entropy(output.reshape(-1, output.shape[-1]), inputs[1].t().reshape(-1))


def _clip_then_sgd(params, max_norm: float = WLM_CLIP, lr: float = WLM_LR) -> None:
    """``clip_grad_norm_(params, 0.25)`` as PyTorch 1.4 runs it, then ``SGD(lr).step()``.

    1.4's clip_grad_norm_ sums ``norm(grad) ** 2`` parameter by parameter with tensor arithmetic
    (three kernels a parameter; the code quoted in pytorch/pytorch#31474, replaced by one
    ``torch.stack`` of the norms in #32020 after 1.4), takes the root, and ``if clip_coef < 1``
    reads the coefficient on the host (one sync) before ``grad.mul_(clip_coef)`` per parameter.
    Plain SGD is one ``p.add_(grad, alpha=-lr)`` a parameter."""
    total = 0.0
    for p in params:
        total = total + p.grad.norm(2) ** 2
    clip_coef = max_norm / (total ** 0.5 + 1e-6)
    if host_read(clip_coef < 1):
        for p in params:
            p.grad.mul_(clip_coef)
    for p in params:
        p.add_(p.grad, alpha=-lr)


register(Workload(
    name="lstm-lm-wikitext2", family="rnn", source="gpucast",
    description="word_language_model LSTM LM (pytorch/examples): 2x200 LSTM, embedding 200, "
                "dropout 0.2, untied, WikiText-2 vocab 33,278, bptt 35",
    model_fn=lambda spec: _wlm_lstm(), input_fn=_wlm_input, loss_fn=_wlm_loss,
    default_batch_size=20, default_seq_len=35, tags=("lm", "ptb"),
))

# Lucid's copy (S-Lab-System-Group/Lucid workloads/lstm/models.py) returns log-probabilities,
# F.log_softmax(decoded.view(-1, ntoken), dim=1), and its profile_lstm.py trains them with
# nn.CrossEntropyLoss, which applies log_softmax once more: a second (bptt x batch, vocab) tensor
# and its gradient, traced here rather than added by hand.
register(Workload(
    name="lstm-lm-wikitext2-logsoftmax", family="rnn", source="gpucast",
    description="lstm-lm-wikitext2 whose forward ends in log_softmax (Lucid's lstm/models.py), "
                "trained with CrossEntropyLoss: log_softmax twice over the 33,278-word vocabulary",
    model_fn=lambda spec: _wlm_lstm(log_softmax=True), input_fn=_wlm_input, loss_fn=_wlm_loss,
    default_batch_size=20, default_seq_len=35, tags=("lm", "ptb"),
))

register(Workload(
    name="lstm-lm-wikitext2-clipped", family="rnn", source="gpucast",
    description="lstm-lm-wikitext2 with main.py's own update in the graph: clip_grad_norm_(0.25) "
                "as in PyTorch 1.4 (one host sync) and plain SGD; train with optimizer 'none'",
    model_fn=lambda spec: after_backward(_wlm_lstm(), _clip_then_sgd), input_fn=_wlm_input,
    loss_fn=_wlm_loss, default_batch_size=20, default_seq_len=35, tags=("lm", "ptb"),
))
