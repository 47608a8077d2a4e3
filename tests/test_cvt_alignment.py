"""How teacher targets and student predictions line up in L_CVT (section 4.1.1, 4.2.2, 4.2.3,
4.3.1): the same sentences, the same word positions, the same masks, soft targets that are the
primary module's plain softmax, and updates that touch only what the reference
(tensorflow/models research/cvt_text) updates on each kind of minibatch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cvt_helpers import TINY, two_task_model, write_chunk, write_unlabeled

import electra.cvt.train as cvt_train
from electra.cvt.batch import encode_words
from electra.cvt.config import make_config
from electra.cvt.modules import cvt_loss
from electra.cvt.run import TrainSettings, run_train
from electra.cvt.tasks import CVTTask
from electra.cvt.train import unlabeled_loss
from electra.cvt.vocab import build_vocab

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SENTS = ["the dog saw a cat near every big red market".split(),
         "Paris likes 12 banks .".split(),
         "a cat".split(),
         "every Market sold the 1,000 ideas".split()]


def _model(seed: int = 0, **overrides):
    model, vocab, cfg, _ = two_task_model(SENTS, seed, **overrides)
    return model, vocab, cfg


def _kl(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """KL(softmax(teacher) || softmax(student)) per row."""
    t = F.log_softmax(teacher, -1)
    return (t.exp() * (t - F.log_softmax(student, -1))).sum(-1)


# ---- check 1 and 3: a full-view module equal to the primary has nothing to learn ----

@pytest.mark.parametrize("task", ["chunk", "dep"])
def test_full_view_copy_of_the_primary_has_zero_cvt_loss_and_gradient(task):
    """Without dropout, a `full` module with the primary's weights predicts exactly the
    teacher's distribution at every real word: L_CVT for it is 0 and so is its gradient. Any
    misalignment (another batch order or padding, positions shifted by <start>/<end>, a
    different mask, smoothed or tempered targets, the KL over padding) would break this."""
    model, vocab, cfg = _model(keep_unlabeled=1.0)
    model.train()
    head = model.heads[task]
    batch = encode_words(SENTS, vocab, cfg.max_word_len)
    assert unlabeled_loss(model, batch, cfg)[1][f"{task}/full"] > 1e-7  # not vacuous
    head.aux["full"].load_state_dict(head.primary.state_dict())
    if task == "chunk":
        head.aux["full"].activate = True  # the reference's full module has no ReLU; the copy must
    loss, parts = unlabeled_loss(model, batch, cfg)
    assert parts[f"{task}/full"] == pytest.approx(0.0, abs=1e-9)
    assert all(v > 1e-7 for k, v in parts.items() if not k.endswith("/full"))
    model.zero_grad(set_to_none=True)
    enc = model.encode(encode_words(SENTS, vocab, cfg.max_word_len), keep=1.0)
    with torch.no_grad():
        teacher = head(enc)
    full = cvt_loss(teacher, head.auxiliary(enc)["full"], head.view_mask("full", enc))
    full.backward()
    grads = [p.grad for p in list(head.aux["full"].parameters()) + list(model.encoder.parameters())
             if p.grad is not None]
    assert grads and max(g.abs().max().item() for g in grads) < 1e-6


# ---- check 2: the same sentences, the same positions, the right masks ----

def test_teacher_and_students_read_the_same_batch_and_targets_are_the_plain_softmax(
        monkeypatch):
    """One teacher pass (keep 1.0, no grad) and one student pass (keep 0.8) over the very same
    batch tensors; the targets handed to the KL are the live primary module's logits, with
    neither label smoothing nor temperature (the reference feeds label_smoothing 0 on
    unlabeled minibatches, shared_inputs.create_feed_dict)."""
    model, vocab, cfg = _model()
    model.train()
    batch = encode_words(SENTS, vocab, cfg.max_word_len)
    calls = []
    real_encode = model.encode

    def spy_encode(b, keep):
        calls.append((b, keep, torch.is_grad_enabled()))
        return real_encode(b, keep=keep)

    seen = []
    real_loss = cvt_train.cvt_loss

    def spy_loss(teacher, student, mask):
        seen.append((teacher, student, mask))
        return real_loss(teacher, student, mask)

    monkeypatch.setattr(model, "encode", spy_encode)
    monkeypatch.setattr(cvt_train, "cvt_loss", spy_loss)
    unlabeled_loss(model, batch, cfg)
    assert [(b is batch, keep, grad) for b, keep, grad in calls] == [(True, 1.0, False),
                                                                       (True, 0.8, True)]
    model.eval()  # the teacher in train mode is the model as evaluated: no other train-mode path
    with torch.no_grad():
        enc = real_encode(batch, keep=1.0)
        expected = {name: head(enc) for name, head in model.heads.items()}
    names = [name for name, head in model.heads.items() for _ in head.aux]
    assert len(seen) == len(names)
    for name, (teacher, student, mask) in zip(names, seen, strict=True):
        assert torch.equal(teacher, expected[name])
        assert not teacher.requires_grad and student.requires_grad
        assert teacher.shape == student.shape and mask.shape == teacher.shape[:2]


@pytest.mark.parametrize("task", ["chunk", "dep"])
def test_cvt_loss_in_a_padded_batch_is_the_per_word_kl_over_each_views_real_words(task):
    """Each view's L_CVT on a padded batch of sentences of different lengths equals the mean,
    over exactly the words that view is trained on, of KL(teacher || student) computed on each
    sentence alone (no padding, no neighbours): all words for fwd/bwd/full (and the parser's
    views), all but the first for future and all but the last for past (the reference rolls its
    mask with the labels, model_helpers.masked_ce_loss)."""
    model, vocab, cfg = _model(keep_unlabeled=1.0)
    model.train()
    head = model.heads[task]
    _, parts = unlabeled_loss(model, encode_words(SENTS, vocab, cfg.max_word_len), cfg)
    per_view: dict[str, list[torch.Tensor]] = {v: [] for v in head.aux}
    with torch.no_grad():
        for words in SENTS:
            enc = model.encode(encode_words([words], vocab, cfg.max_word_len), keep=1.0)
            teacher = head(enc)[0]
            for view, logits in head.auxiliary(enc).items():
                kl = _kl(teacher, logits[0])
                n = len(words)
                keep = {"future": slice(1, n), "past": slice(0, n - 1)}.get(view, slice(0, n))
                per_view[view].append(kl[keep])
    for view, kls in per_view.items():
        words = torch.cat(kls)
        expected_n = sum(len(s) - (view in ("future", "past")) for s in SENTS)
        assert len(words) == expected_n
        assert parts[f"{task}/{view}"] == pytest.approx(words.mean().item(), rel=1e-4, abs=1e-7)


# ---- check 4: labeled and unlabeled text go through the same vocabulary ----

def test_labeled_and_unlabeled_words_share_normalisation_and_characters():
    labeled = [["The", "Stock", "rose", "12", "%"]]
    unlabeled = [["STOCK", "prices", "rose", "1,987", "dlrs"], ["stock", "prices", "fell", "34"]]
    vocab = build_vocab(labeled, unlabeled, 100)
    lab = encode_words(labeled, vocab, 20)
    unl = encode_words(unlabeled, vocab, 20)
    # the same normalised form, whatever the case or digits, gets the same id on both sides
    assert unl["words"][0, 0] == unl["words"][1, 0] == lab["words"][0, 1]  # STOCK/stock/Stock
    assert unl["words"][0, 2] == lab["words"][0, 2]  # rose
    assert unl["words"][0, 1] == unl["words"][1, 1] > 1  # prices: unlabeled-only, seen twice
    assert unl["words"][1, 3] == lab["words"][0, 3]  # 34 and 12 are both 00
    # characters keep their case and come from one character vocabulary
    assert (unl["chars"][0, 0, :5] != lab["chars"][0, 1, :5]).any()  # STOCK vs Stock
    assert unl["chars"][0, 0, 0] == lab["chars"][0, 1, 0]  # S


def test_real_unlabeled_text_is_mostly_in_vocabulary():
    """CoNLL-2000 (1,000 sentences) and Reuters through `build_vocab` as `electra cvt` does:
    unlabeled batches use the labeled batches' ids (hardly any unknown characters, few unknown
    words), so the students do not read a different 'language' than the primary was trained
    on."""
    chunk, reuters = SHARED / "conll2000" / "train.txt", SHARED / "corpus/nltk/reuters.jsonl.gz"
    if not (chunk.is_file() and reuters.is_file()):
        pytest.skip("shared CoNLL-2000 / Reuters not present")
    from electra.cvt.run import subset
    from electra.cvt.unlabeled import load_sentences

    train = subset(CVTTask("chunk").read_file(chunk), 1000)
    unl = load_sentences([reuters], 3000)
    vocab = build_vocab([s.words for s in train], unl, 50_000)
    batch = encode_words(unl, vocab, 20)
    words, chars = batch["words"][batch["words"] > 0], batch["chars"][batch["chars"] > 0]
    assert (chars == 1).float().mean() < 1e-3
    assert (words == 1).float().mean() < 0.05
    labeled = encode_words([s.words for s in train], vocab, 20)
    assert not (labeled["words"] == 1).any() and (labeled["chars"] == 1).float().mean() < 1e-3


# ---- check 5: the direction of an unlabeled update ----

@pytest.mark.parametrize("task", ["chunk", "dep"])
def test_an_sgd_step_on_l_cvt_lowers_it_and_moves_full_toward_the_primary(task):
    model, vocab, cfg = _model(keep_unlabeled=1.0)
    model.train()
    batch = encode_words(SENTS, vocab, cfg.max_word_len)
    head = model.heads[task]
    primary = {k: v.clone() for k, v in head.primary.state_dict().items()}

    def full_kl() -> float:
        with torch.no_grad():
            enc = model.encode(batch, keep=1.0)
            return cvt_loss(head(enc), head.auxiliary(enc)["full"], enc.mask).item()

    before_kl = full_kl()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss, _ = unlabeled_loss(model, batch, cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    after, _ = unlabeled_loss(model, batch, cfg)
    assert after.item() < loss.item()
    assert full_kl() < before_kl
    for k, v in head.primary.state_dict().items():  # the teacher's own module is not moved
        assert torch.equal(v, primary[k])


# ---- check 6: what each kind of update touches in the training loop ----

def test_training_loop_updates_like_the_reference(tmp_path, monkeypatch):
    """In the reference each minibatch is its own MomentumOptimizer update with its own global-
    norm clipping (multitask_model._get_train_op); variables with no gradient (the primary
    modules on unlabeled minibatches, the auxiliary modules on labeled ones) get None from
    compute_gradients and are not touched, momentum included. The teacher is the live model
    (ema_teacher=False), not the EMA."""
    events = []
    real_lab, real_unl = cvt_train.labeled_loss, cvt_train.unlabeled_loss
    real_clip = torch.nn.utils.clip_grad_norm_

    def snap(model):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def lab(model, task, batch, cfg):
        events.append(("lab", snap(model), model))
        return real_lab(model, task, batch, cfg)

    def unl(model, batch, cfg):
        events.append(("unl", snap(model), model))
        assert model.training
        return real_unl(model, batch, cfg)

    norms = []

    def clip(params, max_norm):
        params = list(params)
        total = real_clip(params, max_norm)
        norms.append(torch.sqrt(sum((p.grad ** 2).sum() for p in params if p.grad is not None)))
        return total

    ts: list[int] = []
    real_factor = cvt_train.lr_factor

    def factor(cfg):
        f = real_factor(cfg)
        return lambda t: (ts.append(t), f(t))[1]

    ema_updates = []
    real_ema_update = cvt_train.EMA.update

    def ema_update(self, model):
        ema_updates.append(self.updates)
        return real_ema_update(self, model)

    monkeypatch.setattr(cvt_train, "lr_factor", factor)
    monkeypatch.setattr(cvt_train.EMA, "update", ema_update)
    monkeypatch.setattr(cvt_train, "labeled_loss", lab)
    monkeypatch.setattr(cvt_train, "unlabeled_loss", unl)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    files = {"chunk": write_chunk(tmp_path / "chunk"),
             "unlabeled": write_unlabeled(tmp_path / "raw.txt")}
    run_train(TrainSettings(tasks=["chunk"], data=[str(files["chunk"])], out=str(tmp_path / "o"),
                            config=make_config("small", TINY),
                            unlabeled=[str(files["unlabeled"])], steps=4, seed=3, save_every=0),
              progress=False)
    assert [e[0] for e in events] == ["lab", "unl"] * 4
    assert len(norms) == 8 and all(n <= 1.0 + 1e-5 for n in norms)  # clipped per update
    # the reference's global_step (warm-up, decay) and EMA count every update, both kinds
    assert ts == list(range(9)) and ema_updates == list(range(8))
    for (kind, a, _), (_, b, _) in zip(events, events[1:], strict=False):
        moved = {k for k in a if not torch.equal(a[k], b[k])}
        primary = {k for k in a if ".primary." in k}
        aux = {k for k in a if ".aux." in k}
        if kind == "lab":  # the labeled update: the auxiliary modules stay as they were
            assert not moved & aux and moved & primary
        else:  # the unlabeled update: the primary module stays as it was
            assert not moved & primary and moved & aux
        assert any(k.startswith("encoder.") for k in moved)
