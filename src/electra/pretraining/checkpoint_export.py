"""Every pre-training checkpoint is a model: OUT/checkpoints/step_N exports to the Hugging Face
directories the run's end writes to OUT/final/, by the same function (`export_networks`), so a
learning curve (fine-tuning at 25/50/75/100% of pre-training) needs one run, not four.

A checkpoint holds the objective's weights; the run's OUT/settings.json rebuilds the objective
and OUT/run.json names the data, whose tokenizer the export carries. `electra export`,
`electra finetune --model` and `electra pretrain --init-from` take a checkpoint directory
through `model_dir` (one place, which also turns a Hub id into its snapshot: `electra.hub`),
which exports it once to OUT/exports/step_N and reuses that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from electra.config import PretrainConfig, merge
from electra.data.dataset import PretrainingDataset
from electra.errors import ElectraError
from electra.fileutil import refuse_to_replace, reported_write_failures, space_advice, staged_dir
from electra.hub import resolve_model_path
from electra.model.card import RunFacts, write_model_card
from electra.model.hf import save_pretrained
from electra.objectives import ObjectiveContext, SpecialIds, build_objective, objective_step_flops
from electra.runtime import checkpoint
from electra.settings import SETTINGS_FILE, holds_run, read_run
from electra.tokenizer import load_tokenizer, special_token_ids

EXPORTS = "exports"  # OUT/exports/step_N: a checkpoint's export
MAIN_NETWORKS = ("discriminator", "model")  # what fine-tuning takes from an export


def special_ids_for(data_dir: Path) -> SpecialIds:
    ids = special_token_ids(load_tokenizer(data_dir / "tokenizer"))
    return SpecialIds(pad=ids["pad"], unk=ids["unk"], cls=ids["cls"], sep=ids["sep"],
                      mask=ids["mask"])


def step_flops(cfg: PretrainConfig, seq_len: int) -> int:
    """Training FLOPs of one optimizer step (what `electra flops` counts)."""
    return sum(objective_step_flops(cfg.model, cfg.objective, cfg.train.batch_size,
                                    seq_len).values())


def export_extra(steps: int, train_flops: int, vocab_checksum: str, objective: str,
                 init: dict[str, Any] | None) -> dict[str, Any]:
    """What an export's config.json records of its training (`electra_toolkit`)."""
    extra = {"steps": steps, "train_flops": train_flops, "vocab_checksum": vocab_checksum,
             "objective": objective}
    if init is not None:  # train_flops counts this run; the starting point's are here
        extra["init"] = init
    return extra


def export_module(module: torch.nn.Module, path: Path, tokenizer_dir: Path,
                  extra: dict[str, Any]) -> Path:
    """Hugging Face format for Discriminator/Generator modules; a module with its own format
    (e.g. the two-tower generator) provides `save_pretrained(path, tokenizer_dir, extra)`."""
    own = getattr(module, "save_pretrained", None)
    if callable(own):
        return Path(own(path, tokenizer_dir, extra))
    return save_pretrained(module, path, tokenizer_dir, extra)


def export_networks(objective: torch.nn.Module, root: Path, tokenizer_dir: Path,
                    extra: dict[str, Any], card: RunFacts | None = None,
                    name: str | None = None, card_extra: str | None = None,
                    card_license: str | None = None) -> dict[str, str]:
    """ROOT/<network> for each of the objective's exportable networks, each with its model
    card (`card`: what the folder does not record): the final export (OUT/final) and a
    checkpoint's alike. `name`: the cards' model name, NAME-<network> (default: from ROOT);
    `card_extra`: the user's own section (`--card-extra`); `card_license`: their `--license`."""
    written = {}
    for network, module in objective.exportable().items():
        path = export_module(module, root / network, tokenizer_dir, extra)
        write_model_card(path, card, f"{name}-{network}" if name else None, card_extra,
                         card_license)
        written[network] = str(path)
    return written


# --- checkpoints as models ---------------------------------------------------------------


def is_checkpoint(path: str | Path) -> bool:
    """Whether `path` is a pre-training checkpoint: OUT/checkpoints/step_N of a run."""
    p = Path(path)
    return ((p / checkpoint.META).is_file() and p.parent.name == "checkpoints"
            and holds_run(p.parent.parent))


def checkpoint_dir(path: str | Path, step: int | None = None) -> Path:
    """The checkpoint `path` names: a checkpoint directory, or with `step` a run's OUT."""
    p = Path(path)
    if step is not None:
        if not holds_run(p):
            raise ElectraError(f"{p}: not a pre-training run (no {SETTINGS_FILE}); --step "
                               "takes a run's OUT")
        p = checkpoint.step_dir(p, step)
        if not p.is_dir():
            kept = sorted(q.name for q in checkpoint.checkpoint_root(Path(path)).glob("step_*"))
            raise ElectraError(f"{p}: no checkpoint of step {step} (kept: "
                               f"{', '.join(kept) or 'none'})")
    if not is_checkpoint(p):
        raise ElectraError(f"{p}: not a pre-training checkpoint (OUT/checkpoints/step_N)")
    return p


def export_dir(ckpt: Path) -> Path:
    """Where a checkpoint is exported by default: OUT/exports/step_N."""
    return ckpt.parent.parent / EXPORTS / ckpt.name


def export_checkpoint(ckpt: str | Path, dest: str | Path | None = None,
                      overwrite: bool = False, card_extra: str | None = None,
                      card_license: str | None = None) -> Path:
    """Write the checkpoint's networks as the run's end would (DEST/discriminator, ...;
    default OUT/exports/step_N, kept where it is already written) and return DEST. The whole
    directory appears at once; a failed write leaves nothing and is one error."""
    ckpt = checkpoint_dir(ckpt)
    out = Path(dest) if dest is not None else export_dir(ckpt)
    if dest is None and out.is_dir() and not overwrite:
        return out  # exports appear whole (staged): this is the checkpoint's export
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise refuse_to_replace(out, "files", "--hf")
    objective, extra, tokenizer_dir, card = _load(ckpt)

    def describe(reason: str) -> str:
        return (f"{out}: {reason} while exporting checkpoint {ckpt} (partial files removed); "
                f"{space_advice(reason)} and run the same command again")

    with reported_write_failures(describe), staged_dir(out) as tmp:
        export_networks(objective, tmp, tokenizer_dir, extra, card,
                        f"{ckpt.parent.parent.name}-{ckpt.name}", card_extra, card_license)
    return out


def model_dir(path: str | Path, revision: str | None = None, what: str = "--model") -> Path:
    """`path` as a model directory: a Hub id its snapshot in the cache (`electra.hub`), a
    checkpoint its export (OUT/exports/step_N, written on first use, reused after), any other
    folder as it is. The one place where `finetune --model`, `pretrain --init-from` and
    `export` take a checkpoint or an id. `revision`: the id's branch, tag or commit."""
    p = resolve_model_path(path, revision, what)
    if not is_checkpoint(p):
        return p
    return export_checkpoint(p)


def main_network_dir(path: str | Path, revision: str | None = None,
                     what: str = "--model") -> Path:
    """The network fine-tuning starts from: for a checkpoint its export's discriminator (or an
    MLM's model), a Hub id its snapshot, any other folder as it is."""
    p = resolve_model_path(path, revision, what)
    if not is_checkpoint(p):
        return p
    export = export_checkpoint(p)
    for name in MAIN_NETWORKS:
        if (export / name).is_dir():
            return export / name
    raise ElectraError(f"{export}: the export holds no {' or '.join(MAIN_NETWORKS)}/")


def _load(ckpt: Path) -> tuple[torch.nn.Module, dict[str, Any], Path, RunFacts]:
    """(the run's objective with the checkpoint's weights, its export's extra, the tokenizer,
    what its model cards add)."""
    meta = checkpoint.verify(ckpt)
    out = ckpt.parent.parent
    settings, record = read_run(out)
    cfg = PretrainConfig.from_preset(settings.get("preset") or "tiny")
    merge(cfg, {k: v for k, v in settings.items() if k != "preset"}, where=str(out /
                                                                               SETTINGS_FILE))
    if not record.get("data"):
        raise ElectraError(f"{out}: its run record names no data directory, whose tokenizer "
                           "an export carries")
    data_dir = Path(record["data"])
    if not (data_dir / "tokenizer").is_dir():
        raise ElectraError(f"{ckpt}: exporting it needs the tokenizer of the run's data "
                           f"{data_dir} (named in {out}/run.json), which is not there")
    data = PretrainingDataset(data_dir)
    if meta.get("vocab_checksum", data.vocab_checksum) != data.vocab_checksum:
        raise ElectraError(f"{data_dir}: its vocabulary is not the one of checkpoint {ckpt} "
                           "(vocab checksum differs)")
    context = ObjectiveContext(special=special_ids_for(data_dir), token_counts=data.token_counts)
    with torch.random.fork_rng(devices=[]):  # initial weights, all replaced: the caller's
        objective = build_objective(cfg.model, cfg.objective, context=context)  # stream stays
    checkpoint.load_weights(ckpt, objective)
    objective.eval()
    step = int(meta["step"])
    extra = export_extra(step, step * step_flops(cfg, data.seq_len), data.vocab_checksum,
                         cfg.objective.name, record.get("init"))
    card = RunFacts(preset=cfg.preset, data_dir=data_dir,
                    tokens=step * cfg.train.batch_size * data.seq_len)
    return objective, extra, data_dir / "tokenizer", card
