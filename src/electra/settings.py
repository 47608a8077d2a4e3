"""One settings path for every training command (`pretrain`, `finetune`, `multitask`, `cvt`).

A command's settings are sections, each a typed dataclass: `model`, `objective` and `train` for
pre-training, `finetune`, `multitask`, `cvt`. They are built in one order everywhere:

1. the defaults (and the preset's values where the command has presets);
2. `--config FILE`: a JSON object of sections, e.g. `{"finetune": {"lr": 1e-4}}`;
3. the command's own flags;
4. each `--set SECTION.KEY=VALUE` (the value read as JSON where it parses, else as a string).

Every step merges with `electra.config.merge`: types are checked, and an unknown section or key
is an error that names it and where it came from. What was used is written next to the run
(`write_settings`), in the form `--config` reads back.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.config import merge, read_config_json
from electra.errors import ElectraError
from electra.fileutil import write_atomic

SETTINGS_FILE = "settings.json"


def config_help(sections: Sequence[str]) -> str:
    names = ", ".join(sections)
    return (f"JSON settings file: an object of sections ({names}), e.g. "
            f'{{"{sections[0]}": {{"KEY": VALUE}}}}; flags and --set override it')


def set_help(sections: Sequence[str], example: str) -> str:
    return (f"any setting of sections {', '.join(sections)} (repeatable; the value is JSON where "
            f"it parses), e.g. --set {example}")


def add_settings_flags(parser, sections: Sequence[str], example: str) -> None:
    """`--config FILE` and `--set SECTION.KEY=VALUE`, the same on every training command."""
    parser.add_argument("--config", metavar="FILE", help=config_help(sections))
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help=set_help(sections, example))


def read_config_file(path: str | Path, sections: Sequence[str]) -> dict[str, dict]:
    """A `--config` file's sections; errors name the file (and the line of a JSON error)."""
    data = read_config_json(path)
    if not isinstance(data, dict):
        raise ElectraError(f"{path}: expected a JSON object of sections ({', '.join(sections)})")
    unknown = [name for name in data if name not in sections]
    if unknown:
        raise ElectraError(f"{path}: unknown section {unknown[0]!r} (known: "
                           f"{', '.join(sections)})")
    for name, values in data.items():
        if not isinstance(values, dict):
            raise ElectraError(f"{path}: section {name!r} must be an object")
    return data


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


def apply_config_file(targets: dict[str, Any], path: str | Path | None) -> None:
    """Step 2: merge a `--config` file into `targets` (section name -> dataclass)."""
    if path is None:
        return
    for name, values in read_config_file(path, list(targets)).items():
        merge(targets[name], values, where=f"{path}: {name}")


def apply_flags(targets: dict[str, Any], flags: dict[str, dict[str, Any]]) -> None:
    """Step 3: the flags given on the command line (None: not given), by section."""
    for name, values in flags.items():
        merge(targets[name], {k: v for k, v in values.items() if v is not None}, where="flags")


def apply_sets(targets: dict[str, Any], items: Sequence[str]) -> None:
    """Step 4: each `--set SECTION.KEY=VALUE`, in order."""
    for item in items:
        section, nested = parse_set(item, list(targets))
        merge(targets[section], nested, where=f"--set {item}")


def resolve(targets: dict[str, Any], config: str | Path | None,
            flags: dict[str, dict[str, Any]], sets: Sequence[str]) -> None:
    """Steps 2 to 4 on `targets`, which hold step 1 already."""
    apply_config_file(targets, config)
    apply_flags(targets, flags)
    apply_sets(targets, sets)


def overrides(config: str | Path | None, sets: Sequence[str], section: str,
              check: Any) -> dict[str, Any]:
    """One section's values from `--config` and `--set` as a dict (later wins), for a command
    whose section is built later, on top of a preset (`electra cvt`). They are merged into
    `check` (a dataclass of the section's type) on the way, so that an error names the file or
    the --set that caused it."""
    out: dict[str, Any] = {}
    if config is not None:
        values = read_config_file(config, [section]).get(section, {})
        merge(check, values, where=f"{config}: {section}")
        out.update(values)
    for item in sets:
        _, nested = parse_set(item, [section])
        merge(check, nested, where=f"--set {item}")
        _deep_update(out, nested)
    return out


def _deep_update(base: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


def write_settings(out_dir: str | Path, sections: dict[str, Any]) -> Path:
    """OUT/settings.json: the settings a run used, by section, as `--config` reads them."""
    record = {name: dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
              for name, value in sections.items()}
    return write_atomic(Path(out_dir) / SETTINGS_FILE, json.dumps(record, indent=2) + "\n")
