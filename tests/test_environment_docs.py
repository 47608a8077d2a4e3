"""docs/environment.md's table names every environment variable the package reads, and nothing
it does not: a new `ELECTRA_*` variable without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "src" / "electra").rglob("*.py"))
TABLE_ROW = re.compile(r"^\| ((?:`[A-Z_][A-Z0-9_]*`(?:, )?)+) \|", re.M)
# An ELECTRA_* name in a string (a constant or the read itself), and any name read literally.
ELECTRA_NAME = re.compile(r"""["'](ELECTRA_[A-Z0-9_]+)["']""")
READ_BY_NAME = re.compile(r"""(?:environ\.get|getenv|environ\[)\(?\s*["']([A-Z_][A-Z0-9_]*)["']""")


# Read by huggingface_hub when electra.hub hands it an id: documented there, not read by name.
HUB_VARIABLES = {"HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN"}


def documented() -> set[str]:
    text = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    return {name for cell in TABLE_ROW.findall(text) for name in re.findall(r"`(\w+)`", cell)}


def read_in_sources() -> dict[str, list[str]]:
    """Each variable name -> the source files that name it."""
    found: dict[str, list[str]] = {}
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for name in {*ELECTRA_NAME.findall(text), *READ_BY_NAME.findall(text)}:
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_the_scan_finds_the_known_variables():
    assert {"ELECTRA_CACHE", "ELECTRA_CHECK_DATA", "ELECTRA_ALLOW_SLOW_BF16", "WORLD_SIZE",
            "RANK", "LOCAL_RANK"} <= set(read_in_sources())
    assert {"ELECTRA_CACHE", "WORLD_SIZE", "LOCAL_RANK"} <= documented()


def test_every_variable_read_has_a_row():
    missing = {name: files for name, files in read_in_sources().items()
               if name not in documented()}
    assert not missing, f"add to docs/environment.md's table: {missing}"


def test_every_row_is_read_somewhere():
    assert documented() <= set(read_in_sources()) | HUB_VARIABLES, "a row of " \
        "docs/environment.md names a variable no source file reads"


def test_the_hub_variables_have_rows_and_the_module_that_hands_ids_over_names_them():
    assert HUB_VARIABLES <= documented()
    hub = (ROOT / "src" / "electra" / "hub.py").read_text(encoding="utf-8")
    assert all(name in hub for name in HUB_VARIABLES)
