"""The CVT encoder's own Bi-LSTM loop and its de-duplicated character CNN compute what torch's
packed `nn.LSTM` and a per-word CNN compute: only faster, never differently."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from electra.cvt.bilstm import bilstm, packed_lstm, reverse_within
from electra.cvt.encoder import CharCNN


def _packed(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])[0]


def test_the_gpu_path_is_torchs_packed_lstm():
    """`packed_lstm`, the path CUDA inputs take, is the reference `_packed` computes, which
    the loop matches."""
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 12, batch_first=True, bidirectional=True, proj_size=6).double()
    lengths = torch.tensor([6, 3, 1, 5])
    x = torch.randn(4, 7, 5, dtype=torch.float64)
    assert torch.equal(packed_lstm(lstm, x, lengths), _packed(lstm, x, lengths))
    assert torch.allclose(packed_lstm(lstm, x, lengths), bilstm(lstm, x, lengths), atol=1e-12)


@pytest.mark.parametrize("proj", [0, 6])
def test_bilstm_equals_torch_lstm_on_packed_sentences(proj):
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 12, batch_first=True, bidirectional=True, proj_size=proj).double()
    lengths = torch.tensor([6, 3, 1, 5])  # the longest is shorter than the batch (T = 7)
    x = torch.randn(4, 7, 5, dtype=torch.float64, requires_grad=True)
    ours, theirs = bilstm(lstm, x, lengths), _packed(lstm, x, lengths)
    assert ours.shape == theirs.shape == (4, 7, 2 * (proj or 12))
    assert torch.allclose(ours, theirs, atol=1e-12)
    assert not ours[1, 3:].any() and not ours[2, 1:].any()  # zero at padding
    weight = torch.randn_like(ours)
    wrt = [x, *lstm.parameters()]
    g_ours = torch.autograd.grad((ours * weight).sum(), wrt)
    g_theirs = torch.autograd.grad((theirs * weight).sum(), wrt)
    for a, b in zip(g_ours, g_theirs, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


def test_bilstm_backward_direction_ignores_padding_contents():
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    lengths = torch.tensor([2, 4])
    x = torch.randn(2, 4, 3)
    noisy = x.clone()
    noisy[0, 2:] = 100.0  # padding of the first sentence
    with torch.no_grad():
        assert torch.equal(bilstm(lstm, x, lengths)[0], bilstm(lstm, noisy, lengths)[0])


def test_reverse_within_reverses_each_sentence_and_is_its_own_inverse():
    x = torch.arange(8.0).view(2, 4, 1)
    lengths = torch.tensor([3, 4])
    out = reverse_within(x, lengths)
    assert out[..., 0].tolist() == [[2, 1, 0, 3], [7, 6, 5, 4]]
    assert torch.equal(reverse_within(out, lengths), x)


def test_bilstm_refuses_empty_sentences():
    lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    with pytest.raises(ValueError, match="at least one position"):
        bilstm(lstm, torch.randn(2, 3, 3), torch.tensor([3, 0]))


@pytest.mark.parametrize("boundaries", [True, False])
def test_char_cnn_encodes_each_distinct_spelling_once_with_the_same_vectors(boundaries):
    torch.manual_seed(0)
    cnn = CharCNN(n_chars=10, dim=4, widths=[2, 3], filters=5, boundaries=boundaries)
    chars = torch.tensor([[[1, 2, 3], [4, 5, 0], [1, 2, 3]],
                          [[4, 5, 0], [0, 0, 0], [0, 0, 0]]])
    rows = []
    real = cnn._encode
    cnn._encode = lambda flat: rows.append(len(flat)) or real(flat)
    with torch.no_grad():
        out = cnn(chars)
        one_by_one = torch.stack([real(w[None])[0] for w in chars.reshape(6, 3)]).view(2, 3, -1)
    assert rows == [3]  # "123", "45" and the padding word
    assert torch.allclose(out, one_by_one, atol=1e-6)
    assert torch.equal(out[0, 0], out[0, 2]) and torch.equal(out[0, 1], out[1, 0])
