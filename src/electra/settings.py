"""One settings path for every command that trains or counts (`pretrain`, `flops`, `finetune`,
`multitask`, `cvt`, `demo`).

A command's settings are sections, each a typed dataclass: `model`, `objective` and `train` for
pre-training, `finetune`, `multitask`, `cvt` and `train` for CVT, `demo`. They are built in one
order everywhere:

1. the defaults, and the preset's values where the command has presets (`apply_preset`);
2. `--config FILE`: a JSON object of sections, e.g. `{"finetune": {"lr": 1e-4}}` (and the
   preset's name, `"preset": NAME`, where the command has presets);
3. the command's own flags;
4. each `--set SECTION.KEY=VALUE` (the value read as JSON where it parses, else as a string).

Every step merges with `electra.config.merge`: types are checked, and an unknown section or key
is an error that names it and where it came from. `resolve` returns where each value came from
(`Sources`), so a command asks that instead of reading its input again. What was used is
written next to the run (`write_settings`, OUT/settings.json), in the form `--config` reads
back; what is not a setting (data, checksums, the start model) goes to OUT/run.json.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from electra.command import path
from electra.config import merge, read_config_json
from electra.errors import ElectraError
from electra.fileutil import write_atomic

SETTINGS_FILE = "settings.json"
RUN_FILE = "run.json"
# A pre-training run written before settings.json and run.json recorded both in OUT/config.json.
LEGACY_RUN_FILE = "config.json"
# A flag's value that sets its field to None (a flag given as None is "not given").
CLEAR = object()


class Source(NamedTuple):
    """Where a setting's value came from: its `kind` (one of KINDS) and, for a message, `where`
    ("--preset small", the config file's path, "--lr", "--set train.seed=3")."""

    kind: str
    where: str


KINDS = ("default", "preset", "file", "flag", "set")
DEFAULT = Source("default", "the default")


class Sources(dict):
    """"SECTION.KEY" (dotted for nested values) -> `Source`, for every value a step after the
    defaults gave; the rest are defaults."""

    def of(self, key: str) -> Source:
        return self.get(key, DEFAULT)

    def given(self, kinds: Sequence[str] = ("file", "flag", "set")) -> dict[str, str]:
        """The keys the user asked for, by the steps of `kinds`, and where."""
        return {key: source.where for key, source in self.items() if source.kind in kinds}

    def record(self, section: str, values: Mapping[str, Any], source: Source) -> None:
        for key in _leaves(values):
            self[f"{section}.{key}"] = source

    def to_json(self) -> dict[str, str]:
        """What run.json records: each value not at its default, and where it came from."""
        return {key: f"{source.kind}: {source.where}" for key, source in sorted(self.items())}


def config_help(sections: Sequence[str], preset: bool = False) -> str:
    names = ", ".join(sections)
    return (f"JSON settings file: an object of sections ({names})"
            + (" and the preset's name" if preset else "")
            + f', e.g. {{"{sections[0]}": {{"KEY": VALUE}}}}; OUT/settings.json of a run is '
            "one; flags and --set override it")


def set_help(sections: Sequence[str], example: str) -> str:
    return (f"any setting of sections {', '.join(sections)} (repeatable; the value is JSON where "
            f"it parses), e.g. --set {example}")


def add_settings_flags(parser, sections: Sequence[str], example: str,
                       preset: bool = False) -> None:
    """`--config FILE` and `--set SECTION.KEY=VALUE`, the same on every command."""
    parser.add_argument("--config", metavar="FILE", type=path,
                        help=config_help(sections, preset))
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        annotation=list[str] | dict[str, Any], help=set_help(sections, example))


def read_config_file(path: str | Path, sections: Sequence[str],
                     preset: bool = False) -> dict[str, Any]:
    """A `--config` file's sections (and `preset`, a name, where the command has presets);
    errors name the file (and the line of a JSON error)."""
    data = read_config_json(path)
    known = [*sections, *(["preset"] if preset else [])]
    if not isinstance(data, dict):
        raise ElectraError(f"{path}: expected a JSON object of sections ({', '.join(known)})")
    unknown = [name for name in data if name not in known]
    if unknown:
        raise ElectraError(f"{path}: unknown section {unknown[0]!r} (known: "
                           f"{', '.join(known)})")
    for name, values in data.items():
        if name == "preset":
            if not isinstance(values, str):
                raise ElectraError(f"{path}: preset must be a name, got {values!r}")
        elif not isinstance(values, dict):
            raise ElectraError(f"{path}: section {name!r} must be an object")
    return data


def config_preset(path: str | Path | None) -> str | None:
    """The preset a `--config` file names, if any (read before the file's sections are merged
    onto that preset's values)."""
    if path is None:
        return None
    data = read_config_json(path)
    preset = data.get("preset") if isinstance(data, dict) else None
    return preset if isinstance(preset, str) else None


def parse_set(item: str, sections: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """`--set SECTION.KEY=VALUE` -> (SECTION, {KEY: VALUE}); KEY may be dotted (nested)."""
    key, sep, raw = item.partition("=")
    section, dot, rest = key.partition(".")
    if not sep or not dot or not rest:
        raise ElectraError(f"--set {item!r}: expected SECTION.KEY=VALUE")
    if section not in sections:
        raise ElectraError(f"--set {item!r}: unknown section {section!r} (known: "
                           f"{', '.join(sections)})")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    *parents, last = rest.split(".")
    nested: dict[str, Any] = {last: value}
    for parent in reversed(parents):
        nested = {parent: nested}
    return section, nested


def apply_preset(targets: dict[str, Any], sources: Sources, where: str) -> None:
    """Step 1's preset, already in `targets`: record every section's values as the preset's
    (`where`: how it was chosen, e.g. "--preset small")."""
    for name, values in targets.items():
        sources.record(name, dataclasses.asdict(values), Source("preset", where))


def resolve(targets: dict[str, Any], config: str | Path | None,
            flags: Mapping[str, Mapping[str, Any]], sets: Sequence[str],
            sources: Sources | None = None, preset: bool = False,
            flag_names: Mapping[str, str] | None = None) -> Sources:
    """Steps 2 to 4 on `targets` (section name -> dataclass), which hold step 1 already;
    returns `sources` (new if None) with where every value that is not a default came from.

    `flags`: by section, each field's value from the command line (None: not given; `CLEAR`:
    set to None). `flag_names`: "SECTION.KEY" -> the flag that sets it, for messages."""
    sources = Sources() if sources is None else sources
    if config is not None:
        for name, values in read_config_file(config, list(targets), preset).items():
            if name != "preset":
                merge(targets[name], values, where=f"{config}: {name}")
                sources.record(name, values, Source("file", str(config)))
    for name, values in flags.items():
        given = {key: None if value is CLEAR else value
                 for key, value in values.items() if value is not None}
        merge(targets[name], given, where="flags")
        for key, value in values.items():
            if value is CLEAR:  # back to its default, None
                sources.pop(f"{name}.{key}", None)
            elif value is not None:
                flag = (flag_names or {}).get(f"{name}.{key}", "--" + key.replace("_", "-"))
                sources[f"{name}.{key}"] = Source("flag", flag)
    for item in sets:
        name, nested = parse_set(item, list(targets))
        merge(targets[name], nested, where=f"--set {item}", name_keys=False)
        sources.record(name, nested, Source("set", f"--set {item}"))
    return sources


def one_length(flags: dict[str, Any], given: str | None, lengths: Sequence[str]) -> None:
    """A run's length is one of `lengths` (fields: steps, a time or FLOPs budget, epochs). The
    one the command line gave (`given`; None: none) clears the others in `flags`, so that a
    --config's other length no longer applies."""
    if given is not None:
        flags.update({field: CLEAR for field in lengths if field != given})


def write_settings(out_dir: str | Path, sections: Mapping[str, Any]) -> Path:
    """OUT/settings.json: the settings a run used, by section, as `--config` reads them."""
    record = {name: dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
              for name, value in sections.items()}
    return write_atomic(Path(out_dir) / SETTINGS_FILE, json.dumps(record, indent=2) + "\n")


def write_run_record(out_dir: str | Path, record: Mapping[str, Any]) -> Path:
    """OUT/run.json: what a run used that is not a setting (its data and their checksums, the
    model it started from, where each setting came from) and what it became."""
    return write_atomic(Path(out_dir) / RUN_FILE, json.dumps(record, indent=2) + "\n")


def holds_run(out_dir: str | Path) -> bool:
    out = Path(out_dir)
    return (out / SETTINGS_FILE).exists() or (out / LEGACY_RUN_FILE).exists()


def read_run(out_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(OUT/settings.json, OUT/run.json) of a run (empty where it has no run.json); an
    unreadable one is an error naming it."""
    out = Path(out_dir)
    legacy = not (out / SETTINGS_FILE).exists() and (out / LEGACY_RUN_FILE).exists()
    path = out / (LEGACY_RUN_FILE if legacy else SETTINGS_FILE)
    try:
        if legacy:
            record = json.loads(path.read_text())
            settings = record.pop("config")
        else:
            settings = json.loads(path.read_text())
            record = json.loads((out / RUN_FILE).read_text()) if (out / RUN_FILE).exists() else {}
        if not isinstance(settings, dict) or not isinstance(record, dict):
            raise TypeError
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise ElectraError(f"{path}: unreadable run settings") from None
    return settings, record


def _leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key
