"""Why does CVT hurt at CPU scale? A controlled probe (docs/experiments/cvt.md).

Trains the `small` model supervised for `--warm` labeled steps (cached under WORK), then
continues for `--steps` steps in one of three modes and prints the live (not EMA) primary
module's dev score every `--every` steps, one JSON line each:

    sup   labeled updates only (the baseline continuation)
    cvt   one labeled, then one unlabeled update per step (as `electra cvt`)
    unl   unlabeled updates only

Variants isolate what an unlabeled update does: `--cvt-weight` scales L_CVT, `--unl-lr`
scales the lr of unlabeled updates, `--views` keeps only some auxiliary modules, `--unl-groups`
lets the unlabeled gradient reach only parameters whose names start with one of the prefixes,
`--noise` replaces the encoder's unlabeled gradient by Gaussian noise of the same norm per
tensor, `--freeze-encoder` lets it reach the auxiliary modules only, `--aux-warm N` first
fits the auxiliary modules alone for N unlabeled updates (in the probe they start random,
unlike CVT from scratch, where they learn alongside the encoder). `--before` switches off
the reference details added on 2026-11-24 (TensorFlow initialisation with forget-gate bias 1,
<start>/<end> tokens and word-boundary characters, row-sparse embedding momentum, the parser's
hidden layers) and the unlabeled-text clean-up, i.e. the setup docs/experiments/cvt.md's probe table
measured; its warm-up model is cached separately.

    OMP_NUM_THREADS=1 python -m experiments.cvt_probe --mode cvt --views full
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.shared_data import SHARED
from electra.cvt.batch import Sampler, encode_words
from electra.cvt.config import make_config
from electra.cvt.model import CVTModel
from electra.cvt.run import subset
from electra.cvt.tasks import CVTTask
from electra.cvt.train import (
    _labeled_batch,
    labeled_loss,
    lr_factor,
    make_optimizer,
    predict,
    unlabeled_loss,
)
from electra.cvt.unlabeled import load_sentences
from electra.cvt.vocab import build_vocab

BEFORE = ("tf_init", "boundary_tokens", "sparse_embedding_momentum", "parser_hidden_layer")
DATA = {"chunk": SHARED / "conll2000", "pos": SHARED / "ud_english_ewt"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/cvt_probe"))
    p.add_argument("--task", default="chunk", choices=sorted(DATA))
    p.add_argument("--train-sentences", type=int, default=1000)
    p.add_argument("--warm", type=int, default=150, help="supervised steps before the probe")
    p.add_argument("--mode", default="cvt", choices=["sup", "cvt", "unl"])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--dev", type=int, default=500, help="first N dev sentences scored")
    p.add_argument("--max-unlabeled", type=int, default=30_000)
    p.add_argument("--cvt-weight", type=float, default=1.0)
    p.add_argument("--unl-lr", type=float, default=1.0)
    p.add_argument("--views", default="", help="comma list of auxiliary modules to keep")
    p.add_argument("--unl-groups", default="", help="comma list of parameter-name prefixes")
    p.add_argument("--noise", action="store_true")
    p.add_argument("--freeze-encoder", action="store_true")
    p.add_argument("--aux-warm", type=int, default=0,
                   help="unlabeled updates of the auxiliary modules alone (encoder frozen) "
                   "before the probe, so that its students start fitted rather than random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    p.add_argument("--before", action="store_true",
                   help="the reference details of 2026-11-24 off (names in BEFORE)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    torch.set_num_threads(1)
    if a.before:
        a.set = [f"{k}=false" for k in BEFORE] + a.set
    overrides = {kv.split("=", 1)[0]: json.loads(kv.split("=", 1)[1]) for kv in a.set}
    cfg = make_config("small", overrides)
    task = CVTTask(a.task)
    train = subset(task.read_file(task.find(DATA[a.task], "train")), a.train_sentences)
    dev = task.read_file(task.find(DATA[a.task], "dev"))[: a.dev]
    task.set_labels(train)
    unl = load_sentences([SHARED / "corpus/nltk/reuters.jsonl.gz"], a.max_unlabeled,
                         clean=not a.before)
    vocab = build_vocab([s.words for s in train], unl, cfg.max_vocab)
    torch.manual_seed(a.seed)
    model = CVTModel(cfg, vocab, [task])
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    lab = Sampler([len(s.words) for s in train], cfg.batch_size, a.seed)
    uns = Sampler([len(w) for w in unl], cfg.batch_size, a.seed + 1000)
    params = list(model.parameters())
    frozen = False  # True during --aux-warm

    def score() -> float:
        s = task.score(dev, predict(model, task, dev, vocab, 64))
        model.train()
        return round(100 * (s["f1"] if "f1" in s else s["accuracy"]), 2)

    def step(loss: torch.Tensor, unlabeled: bool) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if unlabeled:
            for n, q in model.named_parameters():
                if q.grad is None:
                    continue
                if ((a.freeze_encoder or frozen) and n.startswith("encoder")) or (
                        a.unl_groups and not n.startswith(tuple(a.unl_groups.split(",")))):
                    q.grad = None
                elif a.noise and n.startswith("encoder"):
                    r = torch.randn_like(q.grad)
                    q.grad = r * (q.grad.norm() / r.norm())
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        scale = a.unl_lr if unlabeled else 1.0
        for g in opt.param_groups:
            g["lr"] *= scale
        opt.step()
        for g in opt.param_groups:
            g["lr"] /= scale
        sched.step()

    def labeled() -> float:
        model.train()
        sents = [train[i] for i in lab.next()]
        loss = labeled_loss(model, task, _labeled_batch(task, sents, vocab, cfg), cfg)
        step(loss, False)
        return loss.item()

    def unlabeled() -> float:
        model.train()
        batch = encode_words([unl[i] for i in uns.next()], vocab, cfg.max_word_len)
        loss, _ = unlabeled_loss(model, batch, cfg)
        step(a.cvt_weight * loss, True)
        return loss.item()

    a.work.mkdir(parents=True, exist_ok=True)
    # the reference-detail switches are always in the key, so caches written before they
    # existed (other weights, other shapes) are never loaded
    switches = "ref" + "".join(str(int(getattr(cfg, k))) for k in BEFORE)
    key = "_".join([a.task, str(a.train_sentences), str(a.warm), str(a.seed), switches]
                   + [kv.replace("=", "") for kv in a.set if kv.split("=")[0] not in BEFORE])
    cache = a.work / f"warm_{key}.pt"
    t0 = time.time()
    if cache.exists():
        state = torch.load(cache, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        lab.load_state_dict(state["lab"])
    else:
        for _ in range(a.warm):
            labeled()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "sched": sched.state_dict(), "lab": lab.state_dict()}, cache)
    if a.views:
        for view in list(model.heads[a.task].aux.keys()):
            if view not in a.views.split(","):
                del model.heads[a.task].aux[view]
    frozen = True
    for _ in range(a.aux_warm):
        unlabeled()
    frozen = False
    print(json.dumps({"step": 0, "warm": a.warm, "score": score(),
                      "seconds": round(time.time() - t0)}), flush=True)
    for i in range(1, a.steps + 1):
        rec = {}
        if a.mode in ("sup", "cvt"):
            rec["sup_loss"] = round(labeled(), 3)
        if a.mode in ("cvt", "unl"):
            rec["cvt_loss"] = round(unlabeled(), 3)
        if i % a.every == 0:
            print(json.dumps({"step": i, **rec, "score": score(),
                              "seconds": round(time.time() - t0)}), flush=True)


if __name__ == "__main__":
    main()
