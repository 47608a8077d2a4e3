"""Model cards: the README.md beside every model folder electra writes, which the Hugging Face
Hub and its tools read to list, filter and run a model (its YAML metadata: `library_name`,
`pipeline_tag`, `base_model`, `tags`, `model-index`).

A card states only what the run recorded. Most of it is read from the folder itself
(config.json and its `electra_toolkit` record of a pre-training run, finetune.json of a
fine-tuned model, export.json of an ONNX export); the caller adds what only the run knows
(`RunFacts`: the preset, the tokens seen, the prepared data, every seed's scores). A fact
the run did not record is left out, never guessed.

`huggingface_hub` writes the card (`ModelCard`, `ModelCardData`, `EvalResult`). The `tokenizers`
package electra needs installs it, and the `hf` extra names it; where it is missing all the
same, no card is written and a debug record says so (`write_model_card` returns None), while
`read_card_extra` and `read_card_license` (a user's own section and license, asked for by name)
require it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from electra.errors import ElectraError, install_hint
from electra.fileutil import write_atomic
from electra.hub import HUB_CACHE_PATH

CARD_FILE = "README.md"
LOG = logging.getLogger(__name__)

# A fine-tuned head -> the pipeline that serves it (docs/interoperability.md).
HEAD_PIPELINES = {"sequence": "text-classification", "regression": "text-classification",
                  "token": "token-classification", "span": "question-answering"}
# A native architecture's class-name ending -> the Auto class that loads it.
AUTO_CLASSES = (("ForPreTraining", "AutoModelForPreTraining"),
                ("ForMaskedLM", "AutoModelForMaskedLM"),
                ("ForSequenceClassification", "AutoModelForSequenceClassification"),
                ("ForTokenClassification", "AutoModelForTokenClassification"),
                ("ForQuestionAnswering", "AutoModelForQuestionAnswering"),
                ("Model", "AutoModel"))
TWO_TOWER_TYPE = "electra-two-tower"  # electra.model.two_tower.MODEL_TYPE
CVT_TYPE = "electra-cvt"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class RunFacts:
    """What a run knows that its model folder does not record."""

    preset: str | None = None
    objective: str | None = None  # where the folder does not record it (CVT: cvt, supervised)
    steps: int | None = None  # likewise
    tokens: int | None = None  # tokens seen: steps x batch size x sequence length
    base_model: str | None = None  # where the folder does not record it (a random init's)
    data_dir: str | Path | None = None  # the prepared data (its manifest names the corpus)
    # every seed's {"seed", "scores"} (a multi-task run's scores by task): the run's seeds
    seeds: list[dict] = field(default_factory=list)


def hub_library_available() -> bool:
    return importlib.util.find_spec("huggingface_hub") is not None


def read_card_extra(path: str | Path | None) -> str | None:
    """The user's own card section (`--card-extra FILE`), read before a run so that a missing
    file or library stops it at once."""
    if path is None:
        return None
    if not hub_library_available():
        raise ElectraError(f"--card-extra {path}: model cards need huggingface_hub: "
                           f"{install_hint('hf')}")
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ElectraError(f"--card-extra {path}: cannot read it ({e.strerror})") from None


def read_card_license(license_id: str | None) -> str | None:
    """The license the user states for the cards (`--license ID`: an id the Hub accepts, such
    as apache-2.0, mit or cc-by-4.0), checked before a run. Without it no card states one:
    the run cannot know the license of the data and weights it started from."""
    if license_id is None:
        return None
    if not license_id or any(c.isspace() for c in license_id):
        raise ElectraError(f"--license {license_id!r}: a license id without spaces, as the Hub "
                           "names them (apache-2.0, mit, cc-by-4.0, ...)")
    if not hub_library_available():
        raise ElectraError(f"--license {license_id}: model cards need huggingface_hub: "
                           f"{install_hint('hf')}")
    return license_id


def add_card_extra(root: str | Path, extra: str | None,
                   license_id: str | None = None) -> list[Path]:
    """Append `extra` to the card of every model folder under `root` (a run's OUT), and state
    `license_id` in its metadata; returns the cards changed."""
    if not extra and not license_id:
        return []
    cards = [p for p in sorted(Path(root).rglob(CARD_FILE)) if (p.parent / "config.json").is_file()]
    for card in cards:
        text = card.read_text(encoding="utf-8")
        if license_id:
            text = with_license(text, license_id)
        if extra:
            text = text.rstrip("\n") + "\n\n" + extra + "\n"
        write_atomic(card, text)
    return cards


def with_license(text: str, license_id: str) -> str:
    """A card's text with `license: ID` in its metadata, the rest as it was."""
    from huggingface_hub import ModelCard

    card = ModelCard(text)
    card.data.license = license_id
    return str(card)


def write_model_card(folder: str | Path, run: RunFacts | None = None, name: str | None = None,
                     extra: str | None = None, license_id: str | None = None) -> Path | None:
    """Write FOLDER/README.md from the folder's own records and `run`; return its path, or None
    where huggingface_hub is missing. `name`: the model's name (default: the folder's, or its
    run's for OUT/final/NAME and OUT/model); give it when FOLDER is a staged directory.
    `extra`: the user's own section (--card-extra); `license_id`: their --license."""
    folder = Path(folder)
    if not hub_library_available():
        LOG.debug("%s: no model card written (huggingface_hub is not installed: %s)", folder,
                  install_hint("hf"))
        return None
    card = Card(folder, run or RunFacts(), name or default_name(folder))
    text = card.render()
    if license_id:
        text = with_license(text, license_id)
    if extra:
        text = text.rstrip("\n") + "\n\n" + extra.strip() + "\n"
    path = folder / CARD_FILE
    write_atomic(path, text)
    return path


def with_card(folder: str | Path, run: RunFacts | None = None, name: str | None = None) -> Path:
    """`write_model_card`, returning FOLDER: for writers that return the folder they wrote."""
    write_model_card(folder, run, name)
    return Path(folder)


def default_name(folder: Path) -> str:
    """OUT/final/discriminator -> OUT-discriminator; OUT/model -> OUT; OUT/seed3/model ->
    OUT-seed3; anything else: the folder's own name."""
    folder = Path(folder).resolve()
    if folder.parent.name == "final":
        return f"{folder.parent.parent.name}-{folder.name}"
    if folder.name == "model" and folder.parent.name.startswith("seed"):
        return f"{folder.parent.parent.name}-{folder.parent.name}"
    if folder.name == "model":
        return folder.parent.name
    return folder.name


def hub_id(recorded: str | None) -> str | None:
    """The Hub id a recorded base model stands for: a snapshot in the Hub's cache, or a relative
    `org/name` path that electra did not write (as `huggingface-cli download ID --local-dir
    ID` leaves it). Anything else is a local path, not an id."""
    if not recorded:
        return None
    cached = HUB_CACHE_PATH.search(recorded.replace("\\", "/"))
    if cached:
        return f"{cached[1]}/{cached[2]}"
    if not HUB_ID.match(recorded):
        return None
    path = Path(recorded)
    written_here = (path / "finetune.json").is_file() or "electra_toolkit" in _json(
        path / "config.json")
    return None if written_here else recorded


def median_scores(seeds: list[dict]) -> dict[str, float]:
    """Each metric's median over seeds (results.json's "median")."""
    return {m: statistics.median(s[m] for s in seeds) for m in seeds[0]}


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _count(n: float) -> str:
    return f"{n:,.0f}"


def _flops(n: float) -> str:
    return f"{n:.3g}"


def _score(v: float) -> str:
    return f"{v:.4g}"


@dataclass
class TaskScores:
    """One task of a fine-tuned model: its head, this model's dev scores and, when the run's
    seeds are known, every seed's."""

    name: str
    head_kind: str
    scores: dict[str, float]
    seeds: dict[int, dict[str, float]]


class Card:
    """The facts of one model folder and their card."""

    def __init__(self, folder: Path, run: RunFacts, name: str):
        self.folder, self.run, self.name = folder, run, name
        self.export = _json(folder / "export.json")  # an ONNX export's report
        source = Path(self.export["model"]) if self.export.get("model") else folder
        self.config = _json(folder / "config.json") or _json(source / "config.json")
        self.weights = _json(source / "config.json") if self.export else self.config
        self.finetune = _json(source / "finetune.json")
        self.trained = self.weights.get("electra_toolkit") or {}
        self.tasks = self._tasks()
        # electra.finetuning.baseline's marker: fresh weights, not trained
        self.random_init = _json(source / "init.json") if not self.trained else {}

    # --- facts --------------------------------------------------------------------------------

    def _tasks(self) -> list[TaskScores]:
        info, seeds = self.finetune, self.run.seeds
        if self.model_type == CVT_TYPE:
            return [TaskScores(name, "token" if spec.get("kind") != "dep" else spec["kind"],
                               {}, {s["seed"]: s["scores"][name] for s in seeds})
                    for name, spec in (self.config.get("tasks") or {}).items()]
        if not info:
            return []
        if "tasks" in info:
            picked = self.export.get("task")
            entries = [t for t in info["tasks"]
                       if picked is None or t["task"]["name"].lower() == picked.lower()]
            return [TaskScores(t["task"]["name"], t["head_kind"],
                               (info.get("scores") or {}).get(t["task"]["name"]) or {},
                               {s["seed"]: s["scores"][t["task"]["name"]] for s in seeds})
                    for t in entries]
        return [TaskScores(info["task"]["name"], info["head_kind"], info.get("scores") or {},
                           {s["seed"]: s["scores"] for s in seeds})]

    @property
    def model_type(self) -> str:
        return self.config.get("model_type", "")

    @property
    def architecture(self) -> str:
        return (self.config.get("architectures") or [""])[0]

    @property
    def remote_code(self) -> bool:
        return bool(self.config.get("auto_map")) and not self.export

    @property
    def kind(self) -> str:
        """finetuned | multitask | random-init | discriminator | generator | encoder |
        two-tower | cvt"""
        from electra.model.hf import architecture_of, is_discriminator

        if self.model_type == CVT_TYPE:
            return "cvt"
        if self.model_type == TWO_TOWER_TYPE:
            return "two-tower"
        if self.finetune:
            return "multitask" if "tasks" in self.finetune and not self.export else "finetuned"
        if self.random_init:
            return "random-init"
        if is_discriminator(self.weights):
            return "discriminator"
        if architecture_of(self.weights).endswith("ForMaskedLM"):
            return "generator"
        return "encoder"

    @property
    def pipeline_tag(self) -> str | None:
        """The pipeline that runs the folder in transformers; None where none does (an ONNX
        graph, electra's own formats). A discriminator has no pipeline of its own: served as its
        encoder (feature-extraction)."""
        kind = self.kind
        if self.export or kind in ("cvt", "two-tower"):
            return None
        if kind == "finetuned":
            return HEAD_PIPELINES.get(self.tasks[0].head_kind)
        return "fill-mask" if kind == "generator" else "feature-extraction"

    @property
    def library_name(self) -> str | None:
        if self.export:
            return "onnx"
        return None if self.kind in ("cvt", "two-tower") else "transformers"

    @property
    def base_model(self) -> str | None:
        """The model this one started from, as recorded (a path or an id)."""
        if self.finetune:
            return self.finetune.get("source_model")
        return (self.trained.get("init") or {}).get("from") or self.run.base_model

    @property
    def objective(self) -> str | None:
        return self.trained.get("objective") or self.run.objective

    def auto_class(self) -> str:
        for auto, target in (self.config.get("auto_map") or {}).items():
            if auto != "AutoConfig" and target.rsplit(".", 1)[-1] == self.architecture:
                return auto
        for ending, auto in AUTO_CLASSES:
            if self.architecture.endswith(ending):
                return auto
        return "AutoModel"

    def parameters(self) -> int | None:
        path = self.folder / "model.safetensors"
        if not path.is_file():
            return None
        from safetensors import safe_open

        total = 0
        with safe_open(str(path), framework="np") as f:
            for key in f.keys():
                n = 1
                for d in f.get_slice(key).get_shape():
                    n *= d
                total += n
        return total

    def corpus(self) -> tuple[list[str], str | None]:
        """(the corpus files' names, the prepared data's name) of a pre-training run."""
        if self.run.data_dir is None:
            return [], None
        data = Path(self.run.data_dir)
        manifest = _json(data / "manifest.json")
        return [Path(p).name for p in manifest.get("corpus", [])], data.resolve().name

    # --- the card -----------------------------------------------------------------------------

    def tags(self) -> list[str]:
        tags = ["electra"]
        if self.objective:
            tags.append(self.objective)
        if self.kind == "cvt":
            tags.append("cvt")
        if self.kind == "multitask":
            tags.append("multitask")
        tags += [t.name for t in self.tasks]
        if self.export:
            tags.append("onnx")
        return list(dict.fromkeys(tags))

    def eval_results(self) -> list:
        from huggingface_hub import EvalResult

        results = []
        for task in self.tasks:
            seeds = list(task.seeds.values())
            if len(seeds) > 1:
                values, how = median_scores(seeds), f"median of {len(seeds)} seeds"
            elif seeds:
                values, how = seeds[0], f"seed {next(iter(task.seeds))}"
            else:
                values = task.scores
                how = f"seed {self.finetune['seed']}" if "seed" in self.finetune else ""
            for metric, value in values.items():
                results.append(EvalResult(
                    task_type=HEAD_PIPELINES.get(task.head_kind, "other"),
                    dataset_type=task.name, dataset_name=task.name, dataset_split="validation",
                    metric_type=metric, metric_value=value,
                    metric_name=f"dev {metric}" + (f" ({how})" if how else "")))
        return results

    def metadata(self):
        from huggingface_hub import ModelCardData

        results = self.eval_results()
        return ModelCardData(library_name=self.library_name, pipeline_tag=self.pipeline_tag,
                             base_model=hub_id(self.base_model), tags=self.tags(),
                             model_name=self.name if results else None,
                             eval_results=results or None)

    def render(self) -> str:
        from huggingface_hub import ModelCard

        sections = [f"# {self.name}", self.summary(), self.training(), self.evaluation(),
                    self.usage(), self.framework()]
        body = "\n\n".join(s for s in sections if s)
        return str(ModelCard(f"---\n{self.metadata().to_yaml()}\n---\n\n{body}\n"))

    def summary(self) -> str:
        kind, objective = self.kind, self.objective
        trained = f" pre-trained with the `{objective}` objective" if objective else ""
        what = {
            "discriminator": f"The discriminator of an ELECTRA-style run{trained}: it learns "
                             "to tell the tokens of a text from the plausible replacements a "
                             "generator put in, and it is the network to fine-tune for "
                             "downstream tasks.",
            "generator": f"A masked language model{trained}" + (
                ": the generator, which proposed the replaced tokens the discriminator learned "
                "to detect." if self.folder.resolve().name == "generator" and objective != "mlm"
                else "."),
            "encoder": f"A text encoder{trained}.",
            "two-tower": f"A two-tower cloze generator (Electric, ELECTRA-TT){trained}; not a "
                         "transformers architecture: electra reads it (`electra score`).",
            "cvt": "A CVT (cross-view training) model: a CNN-BiLSTM encoder with one head per "
                   f"task ({', '.join(t.name for t in self.tasks)}), trained by `electra cvt`; "
                   "electra reads it.",
        }.get(kind)
        if kind == "random-init":
            what = (f"Randomly initialised weights (seed {self.random_init.get('seed')}, as "
                    "pre-training starts), not trained: the random-initialisation baseline of a "
                    "transfer comparison" + (f", in the architecture and with the tokenizer of "
                                             f"`{self.base_model}`." if self.base_model else "."))
        if kind == "finetuned":
            task = self.tasks[0]
            what = (f"An encoder fine-tuned on {task.name} "
                    f"({HEAD_PIPELINES.get(task.head_kind, task.head_kind)}).")
        if kind == "multitask":
            names = ", ".join(t.name for t in self.tasks)
            what = (f"One encoder fine-tuned on several tasks at once ({names}), one head per "
                    "task; transformers serves the shared encoder, and `electra export MODEL "
                    "--hf OUT --task NAME` writes one task's model.")
        parts = [what]
        shape = self._shape()
        if shape:
            parts.append(shape)
        if self.export:
            parts.append("This folder is its ONNX export (`model.onnx`"
                         + (", `model.int8.onnx`" if "int8_max_abs_diff" in self.export else "")
                         + f"), checked against PyTorch with ONNX Runtime: largest difference "
                         f"{self.export['max_abs_diff']:.1e}.")
        return " ".join(parts)

    def _shape(self) -> str:
        c = self.weights
        if "num_hidden_layers" not in c or "hidden_size" not in c:
            return ""
        arch = c.get("model_type", "")
        text = (f"Architecture: `{self.architecture or arch}` ({arch}), {c['num_hidden_layers']} "
                f"layers, hidden size {c['hidden_size']}")
        n = self.parameters()
        if n:
            text += f", {_count(n)} parameters"
        if c.get("vocab_size"):
            text += f", vocabulary of {_count(c['vocab_size'])}"
        return text + "."

    def training(self) -> str:
        lines = []
        t, run = self.trained, self.run
        if run.preset:
            lines.append(f"- preset: `{run.preset}`")
        if self.objective:
            lines.append(f"- objective: `{self.objective}`")
        steps = t.get("steps", self.run.steps)
        if steps is not None:
            lines.append(f"- steps: {_count(steps)}")
        if run.tokens is not None:
            lines.append(f"- tokens seen: {_count(run.tokens)} (steps x batch x sequence "
                         "length)")
        if "train_flops" in t:
            lines.append(f"- training FLOPs: {_flops(t['train_flops'])} (this run)")
        files, data = self.corpus()
        if files:
            lines.append(f"- corpus: {', '.join(f'`{f}`' for f in files)}")
        if data:
            lines.append(f"- prepared data: `{data}`")
        if t.get("vocab_checksum"):
            lines.append(f"- vocabulary checksum: `{t['vocab_checksum']}`")
        init = t.get("init") or {}
        if init.get("from"):
            start = f"- started from: `{init['from']}`"
            if init.get("train_flops"):
                start += f" (its own training FLOPs: {_flops(init['train_flops'])})"
            lines.append(start)
        lines += self._finetune_lines()
        return "## Training\n\n" + "\n".join(lines) if lines else ""

    def _finetune_lines(self) -> list[str]:
        info = self.finetune
        if not info:
            return []
        lines = []
        if info.get("source_model"):
            lines.append(f"- fine-tuned from: `{info['source_model']}`")
        s = info.get("settings") or {}
        shown = [(k, label) for k, label in (
            ("lr", "learning rate"), ("layerwise_decay", "layer-wise LR decay"),
            ("epochs", "epochs"), ("batch_size", "batch size"),
            ("max_seq_len", "max sequence length"), ("seeds", "seeds")) if s.get(k) is not None]
        if shown:
            lines.append("- settings: " + ", ".join(f"{label} {s[k]}" for k, label in shown))
        teachers = {k: v for k, v in (info.get("teachers") or {}).items() if v}
        if teachers:
            lines.append("- distilled from: " + ", ".join(f"{k}: `{v}`"
                                                          for k, v in teachers.items()))
        return lines

    def evaluation(self) -> str:
        if not any(t.scores or t.seeds for t in self.tasks):
            return ""
        seed = self.finetune.get("seed")
        out = ["## Evaluation", ""]
        for task in self.tasks:
            seeds = task.seeds
            metrics = list(next(iter(seeds.values())) if seeds else task.scores)
            if len(seeds) > 1:
                medians = median_scores(list(seeds.values()))
                out.append(f"{task.name}, dev set, {len(seeds)} fine-tuning seed"
                           f"{'s' if len(seeds) > 1 else ''} (the median is what the papers "
                           f"report; this folder holds seed {seed}, the best on the dev set):")
                out.append("")
                out.append("| metric | median | " + " | ".join(f"seed {k}" for k in seeds) + " |")
                out.append("| --- | --- | " + " | ".join("---" for _ in seeds) + " |")
                for m in metrics:
                    out.append(f"| {m} | {_score(medians[m])} | "
                               + " | ".join(_score(v[m]) for v in seeds.values()) + " |")
            else:
                own, which = task.scores, seed
                if seeds:
                    [(which, own)] = seeds.items()
                which = f" (seed {which})" if which is not None else ""
                out.append(f"{task.name}, dev set{which}: "
                           + ", ".join(f"{m} {_score(v)}" for m, v in own.items()))
            out.append("")
        return "\n".join(out).rstrip()

    def usage(self) -> str:
        place = f"path/to/{self.name}"
        if self.export:
            graph = "model.onnx"
            return ("## How to use\n\n```python\nimport numpy as np\nimport onnxruntime\n"
                    "from tokenizers import Tokenizer\n\n"
                    f'session = onnxruntime.InferenceSession("{place}/{graph}")\n'
                    f'tokenizer = Tokenizer.from_file("{place}/tokenizer.json")\n'
                    'enc = tokenizer.encode("an example sentence")\n'
                    'feed = {"input_ids": np.array([enc.ids]), '
                    '"attention_mask": np.array([enc.attention_mask]),\n'
                    '        "token_type_ids": np.array([enc.type_ids])}\n'
                    f"outputs = session.run(None, feed)  # {', '.join(self.export['outputs'])}\n"
                    "```")
        if self.library_name != "transformers":
            command = ("electra cvt-predict --model DIR --input FILE --output FILE"
                       if self.kind == "cvt" else "electra score")
            return ("## How to use\n\nThis folder is in electra's own format, which electra "
                    f"reads: `{command}`.")
        remote = ", trust_remote_code=True" if self.remote_code else ""
        auto = self.auto_class()
        lines = [f"from transformers import {auto}, AutoTokenizer, pipeline", "",
                 f'model_id = "{place}"  # this folder, or its Hub id once uploaded']
        if self.pipeline_tag:
            lines.append(f'pipe = pipeline("{self.pipeline_tag}", model=model_id{remote})')
        lines += [f"model = {auto}.from_pretrained(model_id{remote})",
                  "tokenizer = AutoTokenizer.from_pretrained(model_id)"]
        note = ("\n\nThe folder carries its modeling code (remote code), so transformers builds "
                "exactly the trained model with `trust_remote_code=True`." if remote else "")
        return "## How to use\n\n```python\n" + "\n".join(lines) + "\n```" + note

    def framework(self) -> str:
        import torch

        from electra.version import __version__

        return f"Framework: electra {__version__}, PyTorch {torch.__version__}."
