"""The XLNet-style SQuAD head: shapes, losses by hand, start-conditioned ends, post-processing,
prediction files, and a tiny end-to-end training run on real SQuAD examples."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from electra.config import ModelConfig
from electra.data.vocab import train_vocab
from electra.model.encoder import Encoder
from electra.model.squad_head import SquadHead
from electra.tasks.squad.data import (
    SquadAnswer,
    SquadExample,
    SquadFeature,
    collate_features,
    convert_examples_to_features,
    load_squad_json,
    read_squad,
)
from electra.tasks.squad.head import (
    RawPrediction,
    postprocess_predictions,
    split_outputs,
    write_na_probs,
    write_predictions,
)
from electra.tasks.squad.metrics import evaluate_v1, evaluate_v2
from electra.tokenizer import load_tokenizer

DEV = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / "dev-v1.1.json.gz"

B, S, H = 3, 10, 8


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    hidden = torch.randn(B, S, H)
    p_mask = torch.zeros(B, S, dtype=torch.long)
    p_mask[:, 1:3] = 1  # question + [SEP]
    p_mask[:, -1] = 1
    p_mask[2, 7:] = 1  # a shorter (padded) row
    return hidden, p_mask


def test_training_shapes_and_loss_by_hand() -> None:
    hidden, p_mask = _inputs()
    head = SquadHead(H)
    starts, ends = torch.tensor([3, 0, 4]), torch.tensor([5, 0, 6])
    out = head(hidden, p_mask, starts, ends)
    assert out.start_logits.shape == out.end_logits.shape == (B, S)
    assert out.cls_logits is None and out.start_top_index is None
    assert torch.all(out.start_logits[p_mask.bool()] == torch.finfo(torch.float32).min)
    start_lp = out.start_logits.log_softmax(-1)
    end_lp = out.end_logits.log_softmax(-1)
    rows = torch.arange(B)
    expected = -(start_lp[rows, starts].mean() + end_lp[rows, ends].mean()) / 2
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    out.loss.backward()
    assert all(p.grad is not None for p in head.parameters())


def test_v2_loss_adds_half_the_answerability_bce() -> None:
    hidden, p_mask = _inputs()
    head = SquadHead(H, v2=True)
    starts, ends = torch.tensor([3, 0, 4]), torch.tensor([5, 0, 6])
    impossible = torch.tensor([0.0, 1.0, 0.0])
    out = head(hidden, p_mask, starts, ends, impossible)
    assert out.cls_logits.shape == (B,)
    base = (F.cross_entropy(out.start_logits, starts) + F.cross_entropy(out.end_logits, ends)) / 2
    bce = F.binary_cross_entropy_with_logits(out.cls_logits, impossible)
    assert out.loss.item() == pytest.approx((base + 0.5 * bce).item(), rel=1e-6)
    # The classifier reads [CLS] and the start-probability-weighted state, by hand:
    weights = out.start_logits.softmax(-1)
    x = torch.cat([torch.einsum("bs,bsh->bh", weights, hidden), hidden[:, 0]], -1)
    by_hand = head.answer_class.dense_1(torch.tanh(head.answer_class.dense_0(x))).squeeze(-1)
    torch.testing.assert_close(out.cls_logits, by_hand)
    with pytest.raises(ValueError, match="is_impossible"):
        head(hidden, p_mask, starts, ends)


def test_end_logits_depend_on_the_start() -> None:
    hidden, p_mask = _inputs()
    head = SquadHead(H)
    ends = torch.tensor([5, 5, 5])
    a = head(hidden, p_mask, torch.tensor([3, 3, 3]), ends).end_logits
    b = head(hidden, p_mask, torch.tensor([4, 4, 4]), ends).end_logits
    visible = ~p_mask.bool()
    assert (a - b)[visible].abs().min() > 0
    # XLNet's PoolerEndLogits by hand: dense(concat(token, start)) -> tanh -> LayerNorm -> dense.
    start_state = hidden[:, 3:4].expand(-1, S, -1)
    end = head.end_logits
    x = end.LayerNorm(torch.tanh(end.dense_0(torch.cat([hidden, start_state], -1))))
    lowest = torch.finfo(torch.float32).min
    by_hand = end.dense_1(x).squeeze(-1).masked_fill(p_mask.bool(), lowest)
    torch.testing.assert_close(a, by_hand)
    # ... and the start logits do not depend on the gold start.
    torch.testing.assert_close(head(hidden, p_mask, torch.tensor([3, 3, 3]), ends).start_logits,
                               head(hidden, p_mask, torch.tensor([4, 4, 4]), ends).start_logits)


def test_inference_beam_matches_training_path() -> None:
    hidden, p_mask = _inputs()
    head = SquadHead(H, v2=True, start_n_top=3, end_n_top=2).eval()
    with torch.no_grad():
        out = head(hidden, p_mask)
        assert out.start_top_log_probs.shape == out.start_top_index.shape == (B, 3)
        assert out.end_top_log_probs.shape == out.end_top_index.shape == (B, 3, 2)
        assert out.cls_logits.shape == (B,)
        masked = p_mask.bool()
        for b in range(B):
            assert not masked[b, out.start_top_index[b]].any()
            assert not masked[b, out.end_top_index[b]].any()
        # Each beam entry equals the training path's end distribution given that start.
        for i in range(3):
            starts = out.start_top_index[:, i]
            train = head(hidden, p_mask, starts, starts, torch.zeros(B))
            top = train.end_logits.log_softmax(-1).topk(2, dim=-1)
            torch.testing.assert_close(out.end_top_log_probs[:, i], top.values)
            assert torch.equal(out.end_top_index[:, i], top.indices)
            torch.testing.assert_close(out.start_top_log_probs[:, i],
                                       train.start_logits.log_softmax(-1)[torch.arange(B), starts])
        # The beam is clipped to the sequence length.
        short = SquadHead(H, start_n_top=50, end_n_top=50)(hidden, p_mask)
        assert short.end_top_index.shape == (B, S, S)


def test_bf16_autocast() -> None:
    """Mixed precision: the -inf-like mask fits bf16, the losses and beams stay finite."""
    hidden, p_mask = _inputs()
    head = SquadHead(H, v2=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(hidden, p_mask, torch.tensor([3, 0, 4]), torch.tensor([5, 0, 6]),
                   torch.tensor([0.0, 1.0, 0.0]))
        beam = head(hidden, p_mask)
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    assert torch.isfinite(beam.end_top_log_probs).all()
    assert not p_mask.bool().gather(1, beam.start_top_index).any()


def test_matches_hugging_face_xlnet_squad_head() -> None:
    """Same parameter names as transformers' XLNet/XLM `SQuADHead`, and the same numbers: its
    training loss (v1) and its inference beam (it returns probabilities where we return log
    probabilities) and answerability logits (v2, whose inference path we share)."""
    xlm = pytest.importorskip("transformers.models.xlm.modeling_xlm")
    from transformers import XLMConfig

    hidden, p_mask = _inputs()
    config = XLMConfig(emb_dim=H, start_n_top=3, end_n_top=2, layer_norm_eps=1e-12)
    theirs = xlm.XLMSQuADHead(config).eval()
    ours = SquadHead(H, v2=True, start_n_top=3, end_n_top=2).eval()
    assert set(ours.state_dict()) == set(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    starts, ends = torch.tensor([3, 0, 4]), torch.tensor([5, 0, 6])
    with torch.no_grad():
        loss = theirs(hidden, starts, ends, p_mask=p_mask.float())[0]
        v1 = SquadHead(H, start_n_top=3, end_n_top=2)
        v1.load_state_dict(ours.state_dict(), strict=False)
        torch.testing.assert_close(v1(hidden, p_mask, starts, ends).loss, loss)
        # Our [CLS] is first (BERT); XLNet's is last, so name it.
        cls_index = torch.zeros(B, dtype=torch.long)
        ref = theirs(hidden, p_mask=p_mask.float(), cls_index=cls_index, return_dict=True)
        out = ours(hidden, p_mask)
    torch.testing.assert_close(out.start_top_log_probs.exp(), ref.start_top_log_probs)
    assert torch.equal(out.start_top_index, ref.start_top_index)
    # transformers lays the end beam out end-major: [B, k_end * k_start].
    torch.testing.assert_close(out.end_top_log_probs.exp().transpose(1, 2).reshape(B, -1),
                               ref.end_top_log_probs)
    assert torch.equal(out.end_top_index.transpose(1, 2).reshape(B, -1), ref.end_top_index)
    torch.testing.assert_close(out.cls_logits, ref.cls_logits)


def test_activation_choice() -> None:
    hidden, p_mask = _inputs()
    assert SquadHead(H, activation="gelu")(hidden, p_mask).start_top_index.shape == (B, 5)
    with pytest.raises(ValueError, match="activation"):
        SquadHead(H, activation="relu")


# --- post-processing ---------------------------------------------------------------------------

CONTEXT = "alpha beta gamma delta"
SPANS = {"alpha": (0, 5), "beta": (6, 10), "gamma": (11, 16), "delta": (17, 22)}


def _feature(window: int, words: list[str], max_context: list[bool]) -> SquadFeature:
    """[CLS] q [SEP] words [SEP] with hand-set offsets and max-context flags."""
    n = len(words)
    return SquadFeature(
        example_index=0, qid="q", window_index=window, input_ids=[2, 7, 3] + [9] * n + [3],
        token_type_ids=[0, 0, 0] + [1] * (n + 1), p_mask=[0, 1, 1] + [0] * n + [1],
        offsets=[None, None, None] + [SPANS[w] for w in words] + [None],
        max_context=[False] * 3 + max_context + [False])


def _beam(pairs: list[tuple[int, int, float, float]], cls_logit: float | None = None
          ) -> RawPrediction:
    """A beam with one end per start: (start, end, start log-prob, end log-prob)."""
    return RawPrediction([p[2] for p in pairs], [p[0] for p in pairs],
                         [[p[3]] for p in pairs], [[p[1]] for p in pairs], cls_logit)


def test_postprocess_picks_the_max_context_candidate_across_windows() -> None:
    example = SquadExample("q", "which?", CONTEXT, [SquadAnswer("gamma delta", 11)])
    # Window 0 holds alpha beta gamma (gamma's best window is 1); window 1 beta gamma delta.
    f0 = _feature(0, ["alpha", "beta", "gamma"], [True, True, False])
    f1 = _feature(1, ["beta", "gamma", "delta"], [False, True, True])
    raw0 = _beam([(5, 5, -0.1, -0.1),   # "gamma": best score, but no max context here
                  (3, 4, -2.0, -1.0),   # "alpha beta": valid, -3.0
                  (1, 4, -0.1, -0.1),   # starts in the question
                  (4, 3, -0.1, -0.1),   # end before start
                  (0, 0, -0.1, -0.1)])  # [CLS]: not a span
    raw1 = _beam([(4, 5, -1.0, -1.0),   # "gamma delta": valid, -2.0 -> the answer
                  (3, 5, -0.2, -0.2)])  # "beta gamma delta": beta lacks max context here
    predictions, na_probs = postprocess_predictions([example], [f0, f1], [raw0, raw1])
    assert predictions == {"q": "gamma delta"} and na_probs == {}
    # Length limit: with max_answer_len 1, "gamma delta" (2 tokens) is out.
    predictions, _ = postprocess_predictions([example], [f0, f1], [raw0, raw1], max_answer_len=1)
    assert predictions == {"q": ""}  # "alpha beta" is 2 tokens too
    # No valid candidate at all: the empty answer.
    assert postprocess_predictions([example], [f0], [_beam([(5, 5, -0.1, -0.1)])])[0] == {"q": ""}


def test_postprocess_skips_beam_positions_past_a_short_window() -> None:
    """A short window batched with longer ones is padded; its masked positions all tie at the
    minimum logit, so a beam may pick padding past the window's length. Those positions are
    skipped, not looked up."""
    example = SquadExample("q", "which?", CONTEXT, [SquadAnswer("gamma delta", 11)])
    short = _feature(0, ["beta", "gamma"], [True, True])  # 6 positions
    raw = _beam([(41, 63, -0.1, -0.1),   # padding of the batch's longer windows
                 (3, 48, -0.2, -0.2),    # a real start, an end in the padding
                 (4, 4, -1.0, -1.0)])    # "gamma": the only candidate inside the window
    assert postprocess_predictions([example], [short], [raw])[0] == {"q": "gamma"}


def test_postprocess_v2_null_score_and_threshold() -> None:
    example = SquadExample("q", "which?", CONTEXT, [])
    f0 = _feature(0, ["alpha", "beta", "gamma"], [True, True, False])
    f1 = _feature(1, ["beta", "gamma", "delta"], [False, True, True])
    raws = [_beam([(3, 3, -1.0, -1.0)], cls_logit=2.0), _beam([(5, 5, -0.5, -0.5)], cls_logit=0.5)]
    predictions, na_probs = postprocess_predictions([example], [f0, f1], raws)
    # The null score is the window minimum (0.5): sigmoid(0.5) = 0.622 > 0.5 -> no answer.
    assert na_probs["q"] == pytest.approx(1 / (1 + math.exp(-0.5)))
    assert predictions == {"q": ""}
    predictions, _ = postprocess_predictions([example], [f0, f1], raws, na_prob_thresh=0.7)
    assert predictions == {"q": "delta"}


def test_split_outputs_and_prediction_files(tmp_path: Path) -> None:
    hidden, p_mask = _inputs()
    with torch.no_grad():
        raw = split_outputs(SquadHead(H, v2=True, start_n_top=2, end_n_top=3)(hidden, p_mask))
    assert len(raw) == B and len(raw[0].start_index) == 2 and len(raw[0].end_index[1]) == 3
    assert isinstance(raw[0].cls_logit, float)
    with pytest.raises(ValueError, match="not an inference output"):
        split_outputs(SquadHead(H)(hidden, p_mask, torch.zeros(B, dtype=torch.long),
                                   torch.zeros(B, dtype=torch.long)))
    predictions = {"q1": "Café “x”", "q2": ""}
    path = write_predictions(tmp_path / "out" / "predictions.json", predictions)
    na_path = write_na_probs(tmp_path / "out" / "na_probs.json", {"q1": 0.1, "q2": 0.9})
    assert json.loads(path.read_text(encoding="utf-8")) == predictions
    data = {"data": [{"paragraphs": [{"context": "", "qas": [
        {"id": "q1", "answers": [{"text": "cafe x", "answer_start": 0}]},
        {"id": "q2", "answers": []}]}]}]}
    na_probs = json.loads(na_path.read_text(encoding="utf-8"))
    assert evaluate_v2(data, predictions, na_probs)["best_exact"] == pytest.approx(50.0)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["na_probs.json",
                                                                   "predictions.json"]


# --- end to end --------------------------------------------------------------------------------


@pytest.mark.skipif(not DEV.is_file(), reason=f"SQuAD dev set not found at {DEV}")
def test_tiny_encoder_and_head_learn_real_squad(tmp_path: Path) -> None:
    """Loss goes down when a tiny Encoder + head fit 32 real questions (a wiring check, not
    accuracy), and the whole inference path yields a scoreable prediction per question."""
    examples = read_squad(DEV)[0][:32]
    corpus = tmp_path / "contexts.txt"
    corpus.write_text("\n\n".join(dict.fromkeys(ex.context for ex in examples)), encoding="utf-8")
    tokenizer = load_tokenizer(train_vocab([corpus], 1000, tmp_path / "tok", show_progress=False))
    features = convert_examples_to_features(examples, tokenizer, max_seq_len=128, doc_stride=64,
                                            max_query_len=24)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tokenizer.get_vocab_size(), embedding_size=32, hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=128, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
    encoder, head = Encoder(cfg), SquadHead(cfg.hidden_size, v2=True)
    params = [*encoder.parameters(), *head.parameters()]
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    # One full batch (every step sees the same data): the windows holding an answer, plus a few
    # without one for the answerability loss. All 126 windows would triple the step time.
    labelled = [f for f in features if not f.is_impossible]
    batch = collate_features(labelled + [f for f in features if f.is_impossible][:8])
    losses = []
    for _ in range(25):
        hidden = encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        loss = head(hidden, batch["p_mask"], batch["start_positions"], batch["end_positions"],
                    batch["is_impossible"]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses

    encoder.eval(), head.eval()
    with torch.no_grad():
        batch = collate_features(features)
        hidden = encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        raw = split_outputs(head(hidden, batch["p_mask"]))
    predictions, na_probs = postprocess_predictions(examples, features, raw)
    assert set(predictions) == set(na_probs) == {ex.qid for ex in examples}
    dataset = {"data": [{"paragraphs": [{"context": ex.context, "qas": [
        {"id": ex.qid, "answers": [{"text": a.text, "answer_start": a.start}
                                   for a in ex.answers]}]} for ex in examples]}]}
    scores = evaluate_v1(dataset, predictions)
    assert 0.0 <= scores["exact_match"] <= scores["f1"] <= 100.0


@pytest.mark.skipif(not DEV.is_file(), reason=f"SQuAD dev set not found at {DEV}")
def test_oracle_beam_scores_near_100_on_full_dev(tmp_path: Path) -> None:
    """Data -> post-processing -> official metric, end to end on all 10,570 dev questions: a
    "model" whose beam is each window's own label loses only answers that start mid-token and
    spans whose start lacks max context in the one window holding them (BERT's rule)."""
    examples = read_squad(DEV)[0]
    corpus = tmp_path / "contexts.txt"
    corpus.write_text("\n\n".join(dict.fromkeys(ex.context for ex in examples)), encoding="utf-8")
    tokenizer = load_tokenizer(train_vocab([corpus], 3000, tmp_path / "tok", show_progress=False))
    features = convert_examples_to_features(examples, tokenizer)  # 384 / 128 / 64
    assert len(features) > len(examples)
    oracle = [RawPrediction([0.0], [f.start_position], [[0.0]], [[f.end_position]])
              for f in features]
    predictions, na_probs = postprocess_predictions(examples, features, oracle)
    assert len(predictions) == 10570 and na_probs == {}
    scores = evaluate_v1(load_squad_json(DEV), predictions)
    assert 98.5 < scores["exact_match"] <= scores["f1"] < 100.0
    with pytest.raises(ValueError, match="does not belong"):
        postprocess_predictions(examples[1:], features, oracle)
