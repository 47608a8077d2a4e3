"""A bidirectional LSTM layer over padded sentences of different lengths.

It computes what torch's one-layer, batch-first, bidirectional `nn.LSTM` computes on a packed
sequence, and it reads its weights from such a module. Saved models therefore keep torch's
parameter names. The backward direction reads each sentence reversed within its own length,
so it starts at the sentence's last word and padding never reaches a real word's output.
Outputs at padded positions are zero, as `pad_packed_sequence` leaves them.

Why not call `nn.LSTM` on a packed sequence: on CPU, its backward pass fills a zero tensor the
size of the whole layer's input gates once per time step and adds into it, and that is
quadratic in the sentence length. A profile of a `small` CVT step put this at about a quarter
of the step's time. torch's oneDNN LSTM kernel cannot help: torch uses it neither for packed
input nor with projections. Here the input-to-gate products of every time step and both
directions are one batched matmul, and each step then costs one batched matmul per direction
pair. It is the same function as torch's; float32 results differ by rounding only (the sums
run in another order), so runs before this loop existed are not reproduced bit for bit. On a
GPU the loop's many small kernels would leave it waiting on the host, and cuDNN's packed LSTM
computes the same function in a few kernels: CUDA inputs take that path.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from electra.device import backend_of


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[B, T, D]: each row's first `lengths[b]` positions reversed, padding left in place.
    Applying it twice gives `x` back."""
    t = torch.arange(x.shape[1], device=x.device)[None, :]
    n = lengths.to(x.device)[:, None]
    index = torch.where(t < n, n - 1 - t, t)
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[2]))


def _stacked(lstm: nn.LSTM, name: str) -> torch.Tensor:
    """The forward and backward directions' `name` (e.g. weight_hh), stacked: [2, ...]."""
    return torch.stack([getattr(lstm, f"{name}_l0"), getattr(lstm, f"{name}_l0_reverse")])


def bilstm(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[B, T, input] -> [B, T, 2 * out]: forward outputs, then backward, as nn.LSTM orders
    them (out = proj_size, or hidden_size without a projection)."""
    if not (lstm.bidirectional and lstm.batch_first and lstm.num_layers == 1 and lstm.bias):
        raise ValueError("bilstm needs a one-layer, batch-first, bidirectional LSTM with biases")
    if int(lengths.min()) < 1:
        raise ValueError("bilstm: every sentence needs at least one position")
    if backend_of(x.device).packed_lstm:
        return packed_lstm(lstm, x, lengths)
    b, t, _ = x.shape
    hidden, proj = lstm.hidden_size, lstm.proj_size
    # torch's gate order: input, forget, cell, output
    inputs = torch.stack([x, reverse_within(x, lengths)]).reshape(2, b * t, -1)
    bias = (_stacked(lstm, "bias_ih") + _stacked(lstm, "bias_hh"))[:, None, :]
    # bmm, then the bias: baddbmm would first copy the broadcast bias into every row, slowly
    gates_in = torch.bmm(inputs, _stacked(lstm, "weight_ih").transpose(1, 2)) + bias
    w_hh = _stacked(lstm, "weight_hh").transpose(1, 2)
    w_hr = _stacked(lstm, "weight_hr").transpose(1, 2) if proj else None
    h = x.new_zeros(2, b, proj or hidden)
    c = x.new_zeros(2, b, hidden)
    outputs = []
    for gates_t in gates_in.view(2, b, t, 4 * hidden).unbind(2):
        i, f, g, o = torch.baddbmm(gates_t, h, w_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        if w_hr is not None:
            h = torch.bmm(h, w_hr)
        outputs.append(h)
    out = torch.stack(outputs, dim=2)  # [2, B, T, out]
    real = torch.arange(t, device=x.device)[None, :] < lengths.to(x.device)[:, None]
    both = torch.cat([out[0], reverse_within(out[1], lengths)], dim=-1)
    return torch.where(real[..., None], both, 0.0)


def packed_lstm(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`lstm` on the packed sentences, padded back to [B, T, 2 * out] with zeros: the function
    `bilstm` computes, through torch's (cuDNN's, on a GPU) kernel."""
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])[0]
