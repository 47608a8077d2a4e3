"""The two-tower cloze model: q(x_t | x without t) at every position in one pass.

Electric's noise distribution (dissertation 5.1.5, after Baevski et al., 2019): a left-to-right
and a right-to-left Transformer run over the *unmasked* input with causal masks, and a softmax
layer reads the concatenation [h_ltr[t-1], h_rtl[t+1]]. Using the previous/next states rather
than the states at t means no output sees its own token, so one pass scores every position
(an MLM scores only the [MASK]ed ones). Electric needs q for every input token (its NCE
classifier adds log q), which is why it cannot use an MLM generator.

Edges: position 0 has no left state and the last real token no right state; both get a zero
vector there. The official implementation rolls the states circularly instead, which hands
position 0 the last position's left-to-right state (it has seen x_0); zeros keep "no position
sees its own token" exact everywhere. Padding: the right-to-left tower never attends to padding
keys, and the last real token's right state is zero rather than a padding position's state, so
outputs at real positions do not depend on how much padding follows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from electra import flops
from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.model.encoder import Embeddings, GeneratorHead, has_padding
from electra.model.hf import read_config_json, write_model_dir
from electra.model.networks import make_layer

ARCHITECTURE = "ElectraTwoTowerCloze"
MODEL_TYPE = "electra-two-tower"


def causal_bias(attention_mask: torch.Tensor | None, batch: int, seq_len: int,
                right_to_left: bool, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive [B or 1, 1, S, S] bias: query i sees keys j <= i (left-to-right) or j >= i
    (right-to-left), never padding keys. A query always sees itself, so no row is empty (a
    padding query in the right-to-left tower would otherwise have no key at all)."""
    idx = torch.arange(seq_len, device=device)
    allowed = idx[None, :] >= idx[:, None] if right_to_left else idx[None, :] <= idx[:, None]
    allowed = allowed[None]  # [1, S, S]
    if has_padding(attention_mask):  # the host's answer under `known_padding`: no sync
        keys = attention_mask.bool()[:, None, :]  # [B, 1, S]
        allowed = allowed & (keys | torch.eye(seq_len, dtype=torch.bool, device=device)[None])
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
    bias.masked_fill_(~allowed, torch.finfo(dtype).min)
    return bias[:, None]


def causal_attention_bias(cfg: ModelConfig, attention_mask: torch.Tensor | None,
                          x: torch.Tensor, direction: str) -> torch.Tensor:
    """`causal_bias` for input `x` [B, S, H] (the BERT architecture record's
    `causal_attention`)."""
    b, s = x.shape[:2]
    return causal_bias(attention_mask, b, s, direction == "right-to-left", x.dtype, x.device)


class TwoTowerGenerator(nn.Module):
    """Two causal Transformers over shared embeddings and a tied-embedding softmax.

    The softmax layer is ELECTRA's generator head (dense -> GELU -> LayerNorm -> the word
    embedding matrix plus a bias) applied to the 2H-wide concatenated states, as the official
    `_get_cloze_outputs` does. `embeddings` may be another network's module (tied embeddings,
    dissertation 5.3.1)."""

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        arch = cfg.arch
        if embeddings is None:
            embeddings = arch.load("embeddings")(cfg)
        self.embeddings = embeddings
        self.embeddings_project = (nn.Linear(cfg.embedding_size, cfg.hidden_size)
                                   if cfg.embedding_size != cfg.hidden_size else None)
        layers = range(cfg.num_hidden_layers)
        self.ltr_layers = nn.ModuleList(make_layer(cfg, i) for i in layers)
        self.rtl_layers = nn.ModuleList(make_layer(cfg, i) for i in layers)
        # An architecture with a final LayerNorm (the modern one) ends each tower with its own.
        self.ltr_norm, self.rtl_norm = (
            (nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=arch.biases)
             for _ in "lr")
            if arch.final_norm else (nn.Identity(), nn.Identity()))
        self.cloze_head = GeneratorHead(dataclasses.replace(cfg, hidden_size=2 * cfg.hidden_size),
                                        biases=arch.biases)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.causal_attention = arch.load("causal_attention")

    def hidden(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S, 2H]: [h_ltr[t-1], h_rtl[t+1]] with zeros at the edges."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        b = input_ids.shape[0]
        ltr, rtl = x, x
        ltr_bias, rtl_bias = (self.causal_attention(self.config, attention_mask, x, direction)
                              for direction in ("left-to-right", "right-to-left"))
        for layer in self.ltr_layers:
            ltr = layer(ltr, ltr_bias)
        for layer in self.rtl_layers:
            rtl = layer(rtl, rtl_bias)
        ltr, rtl = self.ltr_norm(ltr), self.rtl_norm(rtl)
        zero = ltr.new_zeros(b, 1, ltr.shape[-1])
        prev_ltr = torch.cat([zero, ltr[:, :-1]], dim=1)
        next_rtl = torch.cat([rtl[:, 1:], zero.to(rtl.dtype)], dim=1)
        if attention_mask is not None:
            # The last real token's right neighbour is padding: treat it as the sequence end.
            next_real = torch.cat([attention_mask[:, 1:], attention_mask.new_zeros(b, 1)], dim=1)
            next_rtl = next_rtl * next_real[:, :, None].to(next_rtl.dtype)
        return torch.cat([prev_ltr, next_rtl.to(prev_ltr.dtype)], dim=-1)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of q(. | x without t): [B, S, V], or [M, V] at flat indices `positions` into
        B*S (the vocabulary projection only where it is needed)."""
        h = self.hidden(input_ids, token_type_ids, attention_mask)
        if positions is not None:
            h = h.reshape(-1, h.shape[-1]).index_select(0, positions)
        return self.cloze_head(h, self.embeddings.word_embeddings.weight, self.output_bias)

    @torch.no_grad()
    def token_log_probs(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                        attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, S] log q(x_t | x without t) of the tokens present (fp32; 0 at padding): the
        two-tower pseudo-log-likelihood terms (dissertation 5.4.5, "TwoTower")."""
        logits = self.forward(input_ids, token_type_ids, attention_mask).float()
        out = logits.log_softmax(-1).gather(-1, input_ids[..., None]).squeeze(-1)
        if attention_mask is not None:
            out = out * attention_mask.to(out.dtype)
        return out

    def save_pretrained(self, path: str | Path, tokenizer_dir: str | Path | None = None,
                        extra: dict | None = None) -> Path:
        """The training loop's export hook (pretrain.checkpoint_export.export_module)."""
        return save_two_tower(self, path, tokenizer_dir, extra)


def two_tower_config(model: TwoTowerGenerator, extra: dict | None = None) -> dict:
    out = {"architectures": [ARCHITECTURE], "model_type": MODEL_TYPE,
           **dataclasses.asdict(model.config)}
    if extra:
        out["electra_toolkit"] = extra
    return out


def save_two_tower(model: TwoTowerGenerator, out_dir: str | Path,
                   tokenizer_dir: str | Path | None = None, extra: dict | None = None) -> Path:
    """config.json + model.safetensors (+ tokenizer files), written atomically like
    `electra.model.hf.save_pretrained`. Not a `transformers` architecture: read it back with
    `load_two_tower`."""
    return write_model_dir(out_dir, two_tower_config(model, extra), model.state_dict(),
                           tokenizer_dir)


def load_two_tower(model_dir: str | Path) -> TwoTowerGenerator:
    """A TwoTowerGenerator from a directory written by `save_two_tower` (eval mode)."""
    d = Path(model_dir)
    cfg_path, weights = d / "config.json", d / "model.safetensors"
    raw = read_config_json(d)
    if raw.get("model_type") != MODEL_TYPE:
        raise ElectraError(f"{cfg_path}: model_type {raw.get('model_type')!r} is not "
                           f"{MODEL_TYPE!r} (not a two-tower cloze model)")
    try:
        cfg = ModelConfig(**{k: raw[k] for k in ModelConfig.__dataclass_fields__ if k in raw})
    except TypeError as e:
        raise ElectraError(f"{cfg_path}: bad model fields ({e})") from None
    cfg.validate()
    if not weights.is_file():
        raise ElectraError(f"{d}: no model.safetensors")
    try:
        state = load_file(str(weights))
    except Exception as e:  # safetensors raises several types for corrupt files
        raise ElectraError(f"{weights}: unreadable ({e})") from None
    model = TwoTowerGenerator(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ElectraError(f"{weights}: weights do not match config.json "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.eval()


def two_tower_step_breakdown(cfg: ModelConfig, batch_size: int, seq_len: int,
                             prefix: str = "generator") -> dict[str, float]:
    """Training FLOPs of the two-tower generator (section 5.2.2 rules): one embedding pass
    feeding both towers, 2 x L causal layers (counted as bidirectional attention, as the official
    accounting counts every layer), and the softmax at every position (output fraction 1)."""
    scale = flops.TRAIN_PASSES * batch_size
    wide = dataclasses.replace(cfg, hidden_size=2 * cfg.hidden_size)
    return {
        f"{prefix}.embeddings": scale * flops.embedding_flops(cfg, seq_len),
        f"{prefix}.layers": scale * 2 * flops.layers_flops(cfg, seq_len),
        f"{prefix}.head": scale * flops.mlm_head_flops(wide, seq_len, 1.0),
    }

