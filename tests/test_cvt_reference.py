"""Details of the reference implementation (tensorflow/models research/cvt_text) that the
paper does not state: TensorFlow's initialisers and forget-gate bias, <start>/<end> tokens and
word-boundary characters, the parser's hidden layers, row-sparse embedding momentum, and the
unlabeled-text clean-up."""

from __future__ import annotations

import json
import math

import pytest
import torch
from cvt_helpers import two_task_model

from electra.cvt import encoder as encoder_module
from electra.cvt.batch import encode_words
from electra.cvt.conll import Sentence
from electra.cvt.model import load_model_dir, save_model_dir
from electra.cvt.train import (
    RowSparseMomentum,
    _labeled_batch,
    labeled_loss,
    make_optimizer,
    predict,
)
from electra.cvt.unlabeled import load_sentences, tokenize

WORDS = "the dog saw a cat near every big red market".split()


def _model(seed: int = 0, **overrides):
    model, vocab, cfg, tasks = two_task_model([WORDS + ["zebra"]], seed, **overrides)
    return model.eval(), vocab, cfg, tasks


def _limit(fan_in: int, fan_out: int) -> float:
    return math.sqrt(6.0 / (fan_in + fan_out))


# ---- TensorFlow initialisation (model_helpers.lstm_cell, tf.layers defaults) ----

def test_lstm_forget_gate_bias_is_one_and_other_biases_zero():
    model, *_ = _model()
    for lstm in (model.encoder.lstm1, model.encoder.lstm2):
        h = lstm.hidden_size
        for suffix in ("_l0", "_l0_reverse"):
            b_ih = getattr(lstm, "bias_ih" + suffix).detach()
            b_hh = getattr(lstm, "bias_hh" + suffix).detach()
            assert torch.equal(b_ih[h: 2 * h], torch.ones(h))  # torch gate order i, f, g, o
            assert not b_ih[:h].any() and not b_ih[2 * h:].any() and not b_hh.any()
    old, *_ = _model(tf_init=False)  # torch's default: small random biases
    assert old.encoder.lstm1.bias_ih_l0.detach()[12:24].abs().max() < 0.5


def test_weights_are_glorot_uniform_and_biases_zero():
    model, vocab, cfg, _ = _model(**{"lstm1": 64, "projection": 16, "char_dim": 30})
    enc = model.encoder
    # char embeddings: Glorot over [chars, dim], not torch's N(0, 1)
    chars = enc.chars.embed.weight.detach()[1:]
    lim = _limit(enc.chars.embed.num_embeddings, cfg.char_dim)
    assert chars.abs().max() <= lim
    assert chars.std().item() == pytest.approx(lim / math.sqrt(3), rel=0.2)
    assert not enc.chars.embed.weight[0].any()
    old, *_ = _model(tf_init=False, **{"lstm1": 64, "projection": 16, "char_dim": 30})
    assert old.encoder.chars.embed.weight.detach()[1:].std() > 0.8  # the N(0, 1) it replaces
    # LSTM: the kernel's fans are input + recurrent state and 4 x units; projection [h, proj]
    lstm = enc.lstm1
    lim = _limit(lstm.input_size + lstm.proj_size, 4 * lstm.hidden_size)
    for w in (lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()):
        assert w.abs().max() <= lim and w.std().item() == pytest.approx(lim / math.sqrt(3),
                                                                          rel=0.1)
    assert lstm.weight_hr_l0.abs().max() <= _limit(lstm.hidden_size, lstm.proj_size)
    # dense layers of the heads and the char CNN: Glorot weights, zero biases
    for layer in (model.heads["chunk"].primary.hidden, model.heads["chunk"].aux["fwd"].out,
                  enc.chars.convs[1]):
        w = layer.weight.detach()
        fan_in, fan_out = w.shape[1] * w[0, 0].numel(), w.shape[0] * w[0, 0].numel()
        assert w.abs().max() <= _limit(fan_in, fan_out)
        assert w.abs().max() > 0.8 * _limit(fan_in, fan_out)
        assert not layer.bias.any()


# ---- <start>/<end> tokens (example.Example, minibatching._make_minibatch) ----

def test_lstms_read_start_and_end_tokens_around_each_sentence(monkeypatch):
    model, vocab, cfg, _ = _model()
    enc = model.encoder
    seen = []
    real = encoder_module.bilstm

    def spy(lstm, x, lengths):
        seen.append((x.detach().clone(), lengths.clone()))
        return real(lstm, x, lengths)

    monkeypatch.setattr(encoder_module, "bilstm", spy)
    batch = encode_words([WORDS, WORDS[:3]], vocab, cfg.max_word_len)
    with torch.no_grad():
        out = model.encode(batch, keep=1.0)
        start, end = (torch.cat([enc.boundary_words[i], enc.chars(
            torch.full((1, 1, 1), enc.chars.missing))[0, 0]]) for i in (0, 1))
    x, lengths = seen[0]
    assert lengths.tolist() == [12, 5] and x.shape[1] == 12
    assert torch.equal(x[:, 0], start.expand(2, -1))
    assert torch.equal(x[0, 11], end) and torch.equal(x[1, 4], end)
    words = torch.cat([enc.word_embed(batch["words"]), enc.chars(batch["chars"])], -1)
    assert torch.equal(x[0, 1:11], words[0].detach()) and torch.equal(x[1, 1:4],
                                                                      words[1, :3].detach())
    # the heads see the real words only: boundary outputs are dropped, padding is zero
    assert out.full.shape[1] == 10 and out.mask.tolist()[1] == [True] * 3 + [False] * 7
    assert not out.full[1, 3:].any() and not out.fwd1[1, 3:].any()


def test_start_token_reaches_forward_states_only_and_end_token_backward_only():
    model, vocab, cfg, _ = _model()
    batch = encode_words([WORDS], vocab, cfg.max_word_len)
    with torch.no_grad():
        a = model.encode(batch, keep=1.0)
        model.encoder.boundary_words[0] += 1.0  # change <start>
        b = model.encode(batch, keep=1.0)
        model.encoder.boundary_words[1] += 1.0  # change <end>
        c = model.encode(batch, keep=1.0)
    assert not torch.equal(a.fwd1[0, 0], b.fwd1[0, 0]) and torch.equal(a.bwd1, b.bwd1)
    assert not torch.equal(b.bwd1[0, -1], c.bwd1[0, -1]) and torch.equal(b.fwd1, c.fwd1)


def test_boundary_positions_are_outside_losses_and_predictions():
    model, vocab, cfg, (tag, dep) = _model()
    sents = [Sentence(WORDS[:4], tags=["B-NP", "I-NP", "B-VP", "O"]),
             Sentence(WORDS[:2], tags=["B-NP", "I-NP"])]
    batch = _labeled_batch(tag, sents, vocab, cfg)
    enc = model.encode(batch, keep=1.0)
    logits = model.heads["chunk"](enc)
    assert logits.shape[:2] == (2, 4)  # one row per real word, none for <start>/<end>
    # the loss is the mean over the 6 real words, as if the boundaries were not there
    logp = torch.log_softmax(logits, -1)
    nll = -logp.gather(2, batch["tags"].clamp(min=0)[..., None])[..., 0]
    smooth = -logp.mean(-1)
    expected = (0.9 * nll + 0.1 * smooth)[enc.mask].mean()
    cfg.keep_labeled = 1.0  # no dropout, so the two computations agree
    assert labeled_loss(model, tag, batch, cfg).item() == pytest.approx(expected.item())
    # the parser's candidate heads are ROOT and the real words, nothing else
    assert model.heads["dep"](enc).shape == (2, 4, 5 * 4)
    assert [len(p) for p in predict(model, tag, sents, vocab)] == [4, 2]


def test_char_cnn_reads_word_boundary_marks():
    model, vocab, cfg, _ = _model()
    cnn = model.encoder.chars
    chars = encode_words([["a", "cat"]], vocab, cfg.max_word_len)["chars"].reshape(2, -1)
    marked = cnn._mark(chars, (chars != 0).sum(1))
    cat = vocab.char_ids("cat", cfg.max_word_len)
    assert marked[1].tolist() == [0, cnn.bow, *cat, cnn.eow, 0]
    assert marked[0].tolist() == [0, cnn.bow, *vocab.char_ids("a", 9), cnn.eow, 0, 0, 0]
    assert cnn.embed.num_embeddings == len(vocab.chars) + 3
    old, *_ = _model(boundary_tokens=False)
    assert old.encoder.chars.embed.num_embeddings == len(vocab.chars)
    assert not hasattr(old.encoder, "boundary_words")


def test_models_saved_before_these_options_still_load(tmp_path):
    model, vocab, cfg, tasks = _model(boundary_tokens=False, parser_hidden_layer=False)
    out = save_model_dir(tmp_path / "m", model, model.state_dict(), vocab, tasks)
    config = json.loads((out / "config.json").read_text())
    for key in ("boundary_tokens", "tf_init", "sparse_embedding_momentum",
                "parser_hidden_layer"):
        del config["cvt"][key]  # a config.json written before these options existed
    (out / "config.json").write_text(json.dumps(config))
    loaded, *_ = load_model_dir(out)
    assert loaded.cfg.boundary_tokens is False and loaded.cfg.parser_hidden_layer is False
    batch = encode_words([WORDS], vocab, cfg.max_word_len)
    with torch.no_grad():
        assert torch.equal(loaded.encode(batch, 1.0).full, model.encode(batch, 1.0).full)


# ---- the reference's parser layout (depparse_module.PredictionModule) ----

def test_parser_has_hidden_layers_with_dropout_and_scaled_projections():
    model, vocab, cfg, _ = _model()
    scorer = model.heads["dep"].primary
    full = model.encoder.full_dim
    assert (scorer.head_hidden.in_features, scorer.head_hidden.out_features) == (full, 32)
    assert (scorer.dep.in_features, scorer.dep.out_features) == (32, 16)  # hidden -> proj
    assert scorer.w_rel.shape == (4, 32, 16) and scorer.w_shared.shape == (32, 16)
    assert scorer.scale.item() == pytest.approx(16 ** 0.25) and scorer.scale.requires_grad
    batch = encode_words([WORDS], vocab, cfg.max_word_len)
    with torch.no_grad():
        enc = model.encode(batch, keep=1.0)
        x = enc.full[0]
        heads = torch.relu(scorer.head_hidden(torch.cat([scorer.root[None], x]))) / 2.0
        deps = scorer.dep(torch.relu(scorer.dep_hidden(x))) / 2.0
        w = scorer.w_rel + scorer.w_shared
        expected = torch.einsum("uh,rhq,tq->tur", heads, w, deps)
        got = model.heads["dep"](enc).reshape(10, 11, 4)
        allowed = got > -1e8
        assert torch.allclose(got[allowed], expected[allowed], atol=1e-5)
        # dropout on the hidden layers: the same encoding scores differently at keep 0.8
        enc.keep = 0.8
        assert not torch.equal(model.heads["dep"](enc), model.heads["dep"](enc))
    old, *_ = _model(parser_hidden_layer=False)
    assert old.heads["dep"].primary.head.out_features == 16
    assert not hasattr(old.heads["dep"].primary, "scale")


# ---- row-sparse momentum (TF MomentumOptimizer on IndexedSlices) ----

def test_embedding_rows_without_gradient_keep_value_and_momentum():
    emb = torch.nn.Embedding(5, 3)
    opt = RowSparseMomentum(emb.parameters(), lr=0.1, momentum=0.9, row_sparse=[emb.weight])
    start = emb.weight.detach().clone()

    def step(ids: list[int]) -> None:
        opt.zero_grad()
        emb(torch.tensor(ids)).sum().backward()
        opt.step()

    step([1])  # grad 1 on row 1: buffer 1, row 1 moves by 0.1
    after_one = emb.weight.detach().clone()
    step([2])  # row 1 unused: dense momentum would move it by another 0.09
    assert torch.equal(emb.weight[1], after_one[1])
    assert torch.equal(emb.weight[[0, 3, 4]], start[[0, 3, 4]])
    step([1])  # the kept buffer resumes: 0.9 * 1 + 1
    assert torch.allclose(emb.weight[1], after_one[1] - 0.1 * 1.9)
    assert torch.allclose(emb.weight[2], start[2] - 0.1)


def test_optimizer_is_row_sparse_for_embeddings_only_when_asked():
    model, *_ = _model()
    opt = make_optimizer(model, model.cfg)
    assert opt.row_sparse == [model.encoder.word_embed.weight,
                              model.encoder.chars.embed.weight]
    dense, *_ = _model(sparse_embedding_momentum=False)
    assert make_optimizer(dense, dense.cfg).row_sparse == []


# ---- unlabeled text: what the labeled data and the reference's news text look like ----

def test_tokenize_keeps_abbreviation_periods_and_decodes_entities():
    assert tokenize("&lt;Allied-Lyons PLC> told the U.S. Inc. and Mr. Smith, e.g. A &amp; P.") \
        == ["Allied-Lyons", "PLC", "told", "the", "U.S.", "Inc.", "and", "Mr.", "Smith", ",",
            "e.g.", "A", "&", "P", "."]


def test_unlabeled_text_drops_all_capitals_heading_lines(tmp_path):
    (tmp_path / "r.jsonl").write_text(json.dumps(
        {"text": "BAHIA COCOA REVIEW\n  Showers continued in\n  the zone.\n  U.S. 1987 FIGURES"
                 "\n  Prices rose."}) + "\n")
    assert load_sentences([tmp_path / "r.jsonl"], 10) == [
        ["Showers", "continued", "in", "the", "zone", "."], ["Prices", "rose", "."]]
    assert load_sentences([tmp_path / "r.jsonl"], 10, clean=False)[0][:4] == [
        "BAHIA", "COCOA", "REVIEW", "Showers"]  # as read before (cvt_probe.py --before)
    assert tokenize("&lt;Allied-Lyons> of the U.S.", clean=False) == [
        "&", "lt", ";", "Allied-Lyons", ">", "of", "the", "U.S", "."]
    # a one-line document (JSON lines of reviews, say) is text even when it is all capitals
    (tmp_path / "one.jsonl").write_text(json.dumps({"text": "GREAT FILM. LOVED IT."}) + "\n")
    assert load_sentences([tmp_path / "one.jsonl"], 10) == [["GREAT", "FILM", "."],
                                                             ["LOVED", "IT", "."]]
