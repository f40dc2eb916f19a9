"""Workloads that follow one script's exact sizes (Gavel's LM, A3C and Recommendation jobs, Lucid's
LSTM and NeuMF): the captured graph has those sizes, counted here from the sizes independently of
the builders, and the per-step work the scripts do is in the graph (the host syncs, the clip and
SGD update)."""

from __future__ import annotations

import pytest

from gpucast.graph import capture
from gpucast.job import Job
from gpucast.surroundings import Stack

TORCH14 = Stack(torch="1.4", cuda="10.1", lazy_loading=False)


def _lstm_layer(inp: int, hidden: int) -> int:
    """One LSTM layer: four gates, each with input and hidden weights and two biases."""
    return 4 * hidden * (inp + hidden + 2)


def _linear(inp: int, out: int) -> int:
    return inp * out + out


def _conv(cin: int, cout: int, k: int) -> int:
    return cin * cout * k * k + cout


# word_language_model on WikiText-2: vocab 33,278, emsize = nhid = 200, 2 layers, untied decoder.
WLM_PARAMS = 33_278 * 200 + 2 * _lstm_layer(200, 200) + _linear(200, 33_278)
# dgriff777 A3Clstm: convs 1->32 5x5, 32->32 5x5, 32->64 4x4, 64->64 3x3, LSTMCell(64*4*4, 512)
# (one layer's weights and biases, as a cell), critic 512->1, actor 512->6.
A3C_PARAMS = (_conv(1, 32, 5) + _conv(32, 32, 5) + _conv(32, 64, 4) + _conv(64, 64, 3)
              + _lstm_layer(64 * 4 * 4, 512) + _linear(512, 1) + _linear(512, 6))
# recoder DynamicAutoencoder([200]) over 20,108 items: encoder and decoder embeddings, bias 200 and
# a bias per item.
RECODER_PARAMS = 2 * 20_108 * 200 + 200 + 20_108
# NeuMF on ml-1m, factor 32, 3 MLP layers: GMF embeddings 32, MLP embeddings 32 * 2**2 = 128 each,
# MLP 256-128-64-32, prediction layer over GMF 32 + MLP 32.
USERS, ITEMS = 6_040, 3_706
NCF_ML1M_PARAMS = ((USERS + ITEMS) * 32 + (USERS + ITEMS) * 128 + _linear(256, 128) + _linear(128, 64)
                   + _linear(64, 32) + _linear(32 + 32, 1))


@pytest.fixture(scope="module")
def traces():
    jobs = {
        "lstm": Job(model="lstm-lm-wikitext2", batch_size=4, seq_len=35, optimizer="sgd", stack=TORCH14),
        "lstm-clipped": Job(model="lstm-lm-wikitext2-clipped", batch_size=4, seq_len=35, optimizer="none",
                            stack=TORCH14),
        "a3c": Job(model="a3c-atari-80", batch_size=20, optimizer="none", stack=TORCH14),
        "recoder": Job(model="recoder-ml20m", batch_size=8, optimizer="adam", stack=TORCH14),
        "ncf": Job(model="ncf-ml1m", batch_size=16, optimizer="sgd"),
    }
    return {k: capture(j) for k, j in jobs.items()}


def test_parameter_counts_are_the_scripts(traces):
    assert WLM_PARAMS == 13_987_678
    assert traces["lstm"].parameters == WLM_PARAMS
    assert traces["lstm-clipped"].parameters == WLM_PARAMS
    assert traces["a3c"].parameters == A3C_PARAMS == 3_249_639
    assert traces["recoder"].parameters == RECODER_PARAMS
    assert traces["ncf"].parameters == NCF_ML1M_PARAMS
    assert traces["a3c"].param_tensors == 16 and traces["lstm"].param_tensors == 11


def test_lstm_decoder_is_wikitext2_wide(traces):
    mm = [o for o in traces["lstm"].ops if o.phase == "fwd" and o.category == "matmul"]
    # the decoder: (bptt * batch) x 200 @ 200 x 33,278
    assert any((35 * 4, 33_278) in o.out_shapes for o in mm)
    emb = [o for o in traces["lstm"].ops if o.op == "embedding"]
    assert emb and emb[0].shapes[0] == (33_278, 200)


def test_clipped_lstm_holds_the_clip_sync_and_one_sgd_add_per_parameter(traces):
    tr = traces["lstm-clipped"]
    assert sum(o.sync for o in tr.ops) == 1          # clip_grad_norm_'s `if clip_coef < 1`
    adds = [o for o in tr.ops if o.phase == "bwd" and o.op in ("add_", "add")]
    norms = [o for o in tr.ops if o.phase == "bwd" and "norm" in o.op]
    assert len(norms) == 11
    assert len([o for o in adds if o.shapes and o.shapes[0] == (33_278, 200)]) >= 2  # SGD on both tables
    assert not any(o.op.startswith("_foreach") for o in tr.ops)


def test_a3c_reads_each_action_on_the_host(traces):
    tr = traces["a3c"]
    assert sum(o.sync for o in tr.ops) == 20             # one host read per frame of the rollout
    convs = [o for o in tr.ops if o.phase == "fwd" and o.category == "conv"]
    assert len(convs) == 4 * 21                           # 20 frames + the bootstrap forward
    assert convs[0].shapes[0] == (1, 1, 80, 80)
    assert not any(o.phase == "optim" and o.kernels and o.op != "zero_" for o in tr.ops)  # Adam is on the CPU


def test_recoder_scatters_every_users_ratings_into_all_items(traces):
    tr = traces["recoder"]
    assert tr.input_kinds == [("int64", (73,)), ("float32", (73,))]
    dense = [o for o in tr.ops if o.op.startswith("scatter")]
    assert dense and dense[0].out_shapes[0] == (8, 20_108)
