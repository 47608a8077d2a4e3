"""The PLL scorers' numbers (dissertation 5.4.5): MLM n-pass, Electric, ELECTRA-TT, two-tower."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_scoring_models import build_scoring_models

from electra.model.hf import load_pretrained
from electra.scoring import load_scorer
from electra.scoring.pll import length_sorted_batches, pad_batch, tt_noise_ratio

TEXTS = [
    "The cat sat on the mat.",
    "Who should Derek hug after shocking Richard?",
    "a",
    "",
    "Zürich and the café were naïve, said the résumé of his brother!",
    "tas vor qui zel",
    "The cat sat on the mat.",
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> dict[str, Path]:
    return build_scoring_models(tmp_path_factory.mktemp("scoring"), vocab_dir)


@pytest.fixture(scope="module")
def scorers(models) -> dict:
    out = {"mlm": load_scorer(models["mlm"]), "electric": load_scorer(models["electric-disc"])}
    if "two-tower" in models:
        out["electra-tt"] = load_scorer(models["electra-tt-disc"], models["two-tower"])
        out["two-tower"] = load_scorer(models["two-tower"])
    return out


def test_length_sorted_batches_longest_first_stable():
    assert length_sorted_batches([3, 5, 3, 9, 1], 2) == [[3, 1], [0, 2], [4]]
    ids, mask = pad_batch([[2, 7, 3], [2, 3]], pad_id=0)
    assert ids.tolist() == [[2, 7, 3], [2, 3, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_mlm_pll_equals_hand_loop_masking_each_position(models, scorers):
    """Salazar et al. (2020): one copy per token with that token masked; the batched scorer
    (copies of several texts in one padded batch) equals masking each position by hand."""
    scorer = scorers["mlm"]
    model = load_pretrained(models["mlm"]).eval()
    texts = TEXTS[:3]
    ids, _ = scorer.encode(texts)
    scored = scorer.score(texts, batch_size=5, per_token=True)
    for seq, result in zip(ids, scored, strict=True):
        hand = []
        for pos in range(1, len(seq) - 1):
            masked = torch.tensor([seq])
            masked[0, pos] = scorer.special["mask"]
            with torch.no_grad():
                logp = F.log_softmax(model(masked)[0, pos], dim=-1)
            hand.append(float(logp[seq[pos]]))
        assert len(result.token_scores) == len(hand) == len(seq) - 2
        assert result.token_scores == pytest.approx(hand, abs=1e-5)
        assert result.pll == pytest.approx(sum(hand), abs=1e-5)


@pytest.mark.parametrize("name", ["mlm", "electric", "electra-tt", "two-tower"])
def test_pll_is_sum_of_token_scores_over_non_special_tokens(scorers, name):
    if name not in scorers:
        pytest.skip("electra.model.two_tower is not available")
    scorer = scorers[name]
    scored = scorer.score(TEXTS, batch_size=3, per_token=True)
    for text, result in zip(TEXTS, scored, strict=True):
        pieces = scorer.tokenizer.encode(text, add_special_tokens=False).tokens
        assert result.tokens == pieces  # [CLS] and [SEP] are not scored
        assert len(result.token_scores) == len(pieces)
        assert result.pll == pytest.approx(math.fsum(result.token_scores), abs=1e-9)
        if name in ("mlm", "two-tower"):  # normalised log-probabilities
            assert all(s < 0 for s in result.token_scores)
    assert scored[3].pll == 0.0 and scored[3].tokens == []  # the empty text


@pytest.mark.parametrize("name", ["mlm", "electric", "electra-tt"])
def test_batching_and_length_sorting_do_not_change_results(scorers, name):
    if name not in scorers:
        pytest.skip("electra.model.two_tower is not available")
    scorer = scorers[name]
    one = scorer.score(TEXTS, batch_size=1, per_token=True)
    many = scorer.score(TEXTS, batch_size=64, per_token=True)
    for a, b in zip(one, many, strict=True):
        assert a.text == b.text
        assert a.token_scores == pytest.approx(b.token_scores, abs=1e-5)
    # Order preserved: scoring the texts reversed gives the reversed results.
    backwards = scorer.score(TEXTS[::-1], batch_size=3)
    assert [s.text for s in backwards] == TEXTS[::-1]
    assert [s.pll for s in backwards] == pytest.approx([s.pll for s in many[::-1]], abs=1e-5)
    # Distinct texts get distinct scores (the comparison above is not between equal numbers).
    assert len({round(s.pll, 3) for s in many if s.tokens}) == len(set(TEXTS)) - 1


def test_electric_token_scores_are_negative_energies(models, scorers):
    """Section 5.4.5: PLL(x) = sum_t -E(x)_t, E the discriminator's per-token output."""
    scorer = scorers["electric"]
    disc = load_pretrained(models["electric-disc"]).eval()
    text = TEXTS[1]
    ids, _ = scorer.encode([text])
    with torch.no_grad():
        energy = disc(torch.tensor(ids))[0]
    result = scorer.score([text], per_token=True)[0]
    assert result.token_scores == pytest.approx((-energy[1:-1]).tolist(), abs=1e-5)
    assert result.pll == pytest.approx(float(-energy[1:-1].sum()), abs=1e-4)


def test_tt_noise_ratio_counts_k_and_n_as_training_does():
    """n = non-padding tokens incl. [CLS]/[SEP]; k = round(mask_prob * n), >= 1, <= maskable
    (masking.select_positions)."""
    n = torch.tensor([12, 4, 3, 2])
    candidates = n - 2
    assert tt_noise_ratio(n, candidates, 0.15).tolist() == pytest.approx(
        [2 / 12, 1 / 4, 1 / 3, 1 / 2])
    assert tt_noise_ratio(n, candidates, 0.15, positives="n-k").tolist() == pytest.approx(
        [2 / 10, 1 / 3, 1 / 2, 1 / 1])
    assert tt_noise_ratio(torch.tensor([20]), torch.tensor([18]), 0.25).tolist() == [0.25]


def test_electra_tt_formula_by_hand(models, scorers):
    """p(x_t | x without t) = k q D / (n (1 - D)), D = P(original) = sigmoid(-logit)."""
    from electra.model.two_tower import load_two_tower

    scorer = scorers["electra-tt"]
    assert scorer.mask_prob == 0.25  # from the run's OUT/config.json
    disc = load_pretrained(models["electra-tt-disc"]).eval()
    gen = load_two_tower(models["two-tower"]).eval()
    text = "Who should Derek hug after shocking Richard?"
    ids, _ = scorer.encode([text])
    x = torch.tensor(ids)
    n = x.shape[1]
    k = max(1, round(0.25 * n))
    with torch.no_grad():
        d = torch.sigmoid(-disc(x)[0]).double()
        q = F.softmax(gen(x)[0].double(), dim=-1).gather(1, x[0][:, None]).squeeze(1)
    expected = torch.log(k * q * d / (n * (1 - d)))[1:-1]
    result = scorer.score([text], per_token=True)[0]
    assert result.token_scores == pytest.approx(expected.tolist(), abs=1e-4)
    two_tower = scorers["two-tower"].score([text], per_token=True)[0]
    assert two_tower.token_scores == pytest.approx(torch.log(q)[1:-1].tolist(), abs=1e-5)


def test_long_texts_are_truncated_and_flagged(scorers):
    text = " ".join(["the cat"] * 100)
    scored = scorers["electric"].score([text, "the cat"], per_token=True)
    assert scored[0].truncated and not scored[1].truncated
    assert len(scored[0].tokens) == scorers["electric"].max_len - 2


def test_bf16_autocast_is_close_to_fp32(models):
    fp32 = load_scorer(models["electric-disc"]).pll(TEXTS)
    bf16 = load_scorer(models["electric-disc"], bf16=True).pll(TEXTS)
    assert bf16 == pytest.approx(fp32, abs=0.5)
    assert bf16 != fp32  # autocast really ran in bf16
