"""CVT model details: each auxiliary module sees exactly its restricted view (sections 4.2.2,
4.2.3), the teacher gets no gradient (4.1.1), dropout differs between labeled and unlabeled
steps (4.3.1, Table 4.1), label smoothing (4.3.1) and the KL loss."""

from __future__ import annotations

import math

import pytest
import torch
from cvt_helpers import TINY

from electra.cvt.batch import encode_words
from electra.cvt.config import make_config
from electra.cvt.conll import Sentence
from electra.cvt.model import CVTModel
from electra.cvt.modules import cvt_loss, supervised_loss
from electra.cvt.tasks import CVTTask
from electra.cvt.train import _labeled_batch, labeled_loss, unlabeled_loss
from electra.cvt.vocab import build_vocab

WORDS = "the dog saw a cat near every big red market".split()


def _model(seed: int = 0):
    torch.manual_seed(seed)
    # wide enough that no ReLU unit is dead for a whole prediction (the checks below also
    # assert that visible words do change it)
    cfg = make_config("small", {**TINY, "hidden": 32, "dep_projection": 16})
    tag = CVTTask("chunk")
    tag.labels = ["B-NP", "E-NP", "O", "S-VP"]
    dep = CVTTask("dep")
    dep.labels = ["det", "nsubj", "obj", "root"]
    vocab = build_vocab([WORDS + ["zebra"]], [], 100)
    return CVTModel(cfg, vocab, [tag, dep]).eval(), vocab, cfg


def _variants(vocab, cfg, k: int):
    """Batches of the sentence and of the sentence with word k replaced. Separate batches:
    a batched matmul may round a row differently (1e-9) depending on its neighbours, and the
    checks below use exact equality."""
    other = list(WORDS)
    other[k] = "zebra"
    return [encode_words([s], vocab, cfg.max_word_len) for s in (WORDS, other)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if torch.equal(a, b):
        return True
    assert (a - b).abs().max() > 1e-6, "tiny difference: neither equal nor changed"
    return False


# ---- 4.2.2: tagging views ----

# which positions j the module's prediction at t may depend on
TAG_SEES = {"fwd": lambda j, t: j <= t, "bwd": lambda j, t: j >= t,
            "future": lambda j, t: j < t, "past": lambda j, t: j > t,
            "full": lambda j, t: True}


@pytest.mark.parametrize("view", list(TAG_SEES))
def test_tagging_auxiliary_sees_exactly_its_view_section_4_2_2(view):
    model, vocab, cfg = _model()
    n = len(WORDS)
    with torch.no_grad():
        for k in range(n):
            out = [model.heads["chunk"].auxiliary(model.encode(b, keep=1.0))[view][0]
                   for b in _variants(vocab, cfg, k)]
            for t in range(n):
                same = _same(out[0][t], out[1][t])
                # unchanged exactly when word k is outside the view; changed when inside
                assert same == (not TAG_SEES[view](k, t)), (view, k, t)


def test_primary_tagger_sees_the_whole_sentence():
    model, vocab, cfg = _model()
    with torch.no_grad():
        out = [model.heads["chunk"](model.encode(b, keep=1.0))[0]
               for b in _variants(vocab, cfg, len(WORDS) - 1)]
    assert all(not _same(out[0][t], out[1][t]) for t in range(len(WORDS)))


# ---- 4.2.3: parsing views (edge scores; the softmax over heads couples them) ----

def _dep_sees(view: str):
    sees = {"fwd": lambda j, i: j <= i, "bwd": lambda j, i: j >= i}
    head_side, dep_side = view.split("-")

    def f(j: int, u: int, t: int) -> bool:  # u: head position (-1 = ROOT), t: dependent
        return (u >= 0 and sees[head_side](j, u)) or sees[dep_side](j, t)
    return f


@pytest.mark.parametrize("view", ["fwd-fwd", "fwd-bwd", "bwd-fwd", "bwd-bwd"])
def test_parsing_auxiliary_sees_exactly_its_view_section_4_2_3(view):
    model, vocab, cfg = _model()
    n, n_rels = len(WORDS), 4
    sees = _dep_sees(view)
    with torch.no_grad():
        for k in (0, 4, n - 1):
            scores = [model.heads["dep"].auxiliary(model.encode(b, keep=1.0))[view]
                      .reshape(n, n + 1, n_rels) for b in _variants(vocab, cfg, k)]
            for t in range(n):
                for u in range(-1, n):
                    if u == t:
                        continue  # self-loops are masked
                    same = _same(scores[0][t, u + 1], scores[1][t, u + 1])
                    assert same == (not sees(k, u, t)), (view, k, u, t)


def test_parser_masks_padding_heads_and_self_loops():
    model, vocab, cfg = _model()
    batch = encode_words([WORDS, WORDS[:3]], vocab, cfg.max_word_len)
    with torch.no_grad():
        logits = model.heads["dep"](model.encode(batch, keep=1.0)).reshape(2, 10, 11, 4)
    assert (logits[1, :, 4:] < -1e8).all()  # heads past the 3-word sentence
    assert all((logits[0, t, t + 1] < -1e8).all() for t in range(10))
    assert (logits[0, 0, 0] > -1e8).all()  # ROOT is a head for everyone


# ---- 4.1.1: the teacher is fixed; 4.3.1: dropout per kind of batch ----

def test_no_gradient_flows_into_the_primary_teacher_section_4_1_1():
    model, vocab, cfg = _model()
    model.train()
    batch = encode_words([WORDS, WORDS[:5]], vocab, cfg.max_word_len)
    loss, parts = unlabeled_loss(model, batch, cfg)
    loss.backward()
    assert set(parts) == {f"{t}/{v}" for t, vs in (
        ("chunk", ("fwd", "bwd", "future", "past", "full")),
        ("dep", ("fwd-fwd", "fwd-bwd", "bwd-fwd", "bwd-bwd", "full"))) for v in vs}
    for head in model.heads.values():
        assert all(p.grad is None for p in head.primary.parameters())
        assert all(p.grad is not None for p in head.aux.parameters())
    assert model.encoder.lstm1.weight_ih_l0.grad.abs().sum() > 0  # students train the encoder


def test_dropout_differs_between_labeled_and_unlabeled_steps_table_4_1(monkeypatch):
    model, vocab, cfg = _model()
    model.train()
    seen: list[float] = []
    real = model.encoder.forward

    def spy(*args, keep):
        seen.append(keep)
        return real(*args, keep=keep)

    monkeypatch.setattr(model.encoder, "forward", spy)
    sent = Sentence(WORDS[:4], tags=["B-NP", "I-NP", "B-VP", "O"])
    chunk = CVTTask("chunk")
    chunk.labels = ["B-NP", "E-NP", "O", "S-VP"]
    labeled_loss(model, chunk, _labeled_batch(chunk, [sent], vocab, cfg), cfg)
    assert seen == [0.5]  # labeled: keep 0.5
    seen.clear()
    unlabeled_loss(model, encode_words([WORDS], vocab, cfg.max_word_len), cfg)
    assert seen == [1.0, 0.8]  # teacher without dropout, students at keep 0.8
    # and keep < 1 really drops: two student passes differ, two teacher passes do not
    batch = encode_words([WORDS], vocab, cfg.max_word_len)
    a, b = (model.encode(batch, keep=0.8).full for _ in range(2))
    c, d = (model.encode(batch, keep=1.0).full for _ in range(2))
    assert not torch.equal(a, b) and torch.equal(c, d)


# ---- losses ----

def test_label_smoothing_0_1_section_4_3_1():
    logits = torch.tensor([[[2.0, 0.0, -1.0]]])
    target = torch.tensor([[0]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    logp = torch.log_softmax(logits[0, 0], -1)
    expected = 0.9 * -logp[0] + 0.1 * -logp.mean()
    assert supervised_loss(logits, target, mask, 0.1).item() == pytest.approx(expected.item())
    assert supervised_loss(logits, target, mask).item() == pytest.approx(-logp[0].item())


def test_cvt_loss_is_kl_from_teacher_to_student():
    teacher = torch.tensor([[[1.0, 0.0]]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    assert cvt_loss(teacher, teacher.clone(), mask).item() == pytest.approx(0.0, abs=1e-7)
    p = torch.softmax(teacher[0, 0], -1)
    q = torch.tensor([0.5, 0.5])
    kl = float((p * (p / q).log()).sum())
    assert cvt_loss(teacher, torch.zeros(1, 1, 2), mask).item() == pytest.approx(kl)
    assert math.isfinite(cvt_loss(torch.tensor([[[0.0, -1e9]]]), torch.tensor([[[0.0, -1e9]]]),
                                  mask).item())


def test_char_cnn_vector_does_not_depend_on_the_batch_padding():
    model, vocab, cfg = _model()
    short = encode_words([["a", "cat"]], vocab, cfg.max_word_len)["chars"]
    long = encode_words([["a", "cat"], ["extraordinarily"]], vocab, cfg.max_word_len)["chars"]
    with torch.no_grad():
        a = model.encoder.chars(short)[0]
        b = model.encoder.chars(long[:1])[0]
    assert long.shape[2] > short.shape[2]
    assert torch.allclose(a, b, atol=1e-6)


# ---- reference details of the auxiliary tagging modules ----

def test_future_and_past_are_not_trained_where_they_see_nothing_reference_mask_roll():
    """The reference shifts its loss mask with the labels, so `future` is never trained on a
    sentence's first word and `past` never on its last: there they have no input."""
    model, vocab, cfg = _model()
    batch = encode_words([WORDS, WORDS[:3]], vocab, cfg.max_word_len)
    enc = model.encode(batch, keep=1.0)
    head = model.heads["chunk"]
    n = len(WORDS)
    full = [[True] * n, [True] * 3 + [False] * (n - 3)]
    future = [[False] + [True] * (n - 1), [False, True, True] + [False] * (n - 3)]
    past = [[True] * (n - 1) + [False], [True, True, False] + [False] * (n - 3)]
    assert head.view_mask("future", enc).tolist() == future
    assert head.view_mask("past", enc).tolist() == past
    for view in ("fwd", "bwd", "full"):
        assert head.view_mask(view, enc).tolist() == full
    # a batch where a view has no position at all gives a zero loss, not NaN
    one = model.encode(encode_words([["dog"]], vocab, cfg.max_word_len), keep=1.0)
    assert not head.view_mask("future", one).any()
    loss, _ = unlabeled_loss(model, encode_words([["dog"]], vocab, cfg.max_word_len), cfg)
    assert math.isfinite(loss.item())


def test_full_view_auxiliary_tagger_has_no_relu_like_the_reference():
    model, _, _ = _model()
    head = model.heads["chunk"]
    assert head.aux["full"].activate is False
    assert head.primary.activate and all(head.aux[v].activate for v in TAG_SEES if v != "full")
    x = -torch.ones(1, 1, head.aux["full"].hidden.in_features)
    m = head.aux["full"]
    assert torch.allclose(m(x), m.out(m.hidden(x)))
