"""Every command shown in README.md and docs/ still exists with the flags shown, so the guide
cannot rot: `electra ...` lines are parsed by the real argument parser (no run), `python -m
experiments.X` / `benchmarks.X` lines and `python tools/X.py` lines run with `--help`, and
`make X` names a Makefile target."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from electra.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def shell_commands(text: str) -> list[str]:
    """The commands of a page's shell blocks: continuation lines joined, comments dropped, each
    pipeline or `&&` chain split into its commands, redirections cut."""
    commands = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            line = re.sub(r"\s#.*$", "", line)
            for part in re.split(r"\s*(?:&&|\|\||\||;)\s*", line):
                part = re.split(r"\s[12]?>>?\s?|\s<\s", f" {part}")[0].strip()
                if part:
                    commands.append(part)
    return commands


def argv_of(command: str) -> tuple[str, list[str]] | None:
    """(program, arguments) with environment assignments and `.venv/bin/` stripped; the flags of
    `srun` and `torchrun` skipped to the program they start (`srun electra ...`, `srun torchrun
    ... -m electra.cli ...`)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    while words and ENV.match(words[0]):
        words = words[1:]
    if not words:
        return None
    program = words[0].removeprefix(".venv/bin/")
    if program == "srun" and len(words) > 1:
        rest = [w for w in words[1:] if not w.startswith("-")]
        if not rest:
            return None
        words = words[words.index(rest[0]):]
        program = words[0].removeprefix(".venv/bin/")
    if program == "torchrun":
        rest = [w for w in words[1:] if not w.startswith("--")]
        if rest and rest[0].removeprefix(".venv/bin/") == "electra":
            return "electra", [w for w in words[words.index(rest[0]) + 1:]]
        return None
    return program, words[1:]


def collect(kind: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for command in shell_commands(page.read_text(encoding="utf-8")):
            parsed = argv_of(command)
            if parsed is None:
                continue
            program, args = parsed
            name = f"{page.relative_to(ROOT)}: {command}"
            if kind == "electra" and program == "electra":
                found.append((name, command))
            elif kind == "module" and program in ("python", "python3") and args[:1] == ["-m"] \
                    and args[1].split(".")[0] in ("experiments", "benchmarks"):
                found.append((name, args[1]))
            elif kind == "script" and program in ("python", "python3") and args[:1] \
                    and args[0].startswith("tools/") and args[0].endswith(".py"):
                found.append((name, args[0]))
            elif kind == "make" and program == "make":
                found.append((name, command))
    return found


def test_the_guide_shows_commands():
    readme = shell_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert readme[:2] == ["make demo", "make test"], readme[:2]
    assert len(collect("electra")) >= 10


@pytest.mark.parametrize("name,command", collect("electra"), ids=lambda v: v[:90])
def test_electra_command_parses(name: str, command: str):
    _, args = argv_of(command)
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as e:
        pytest.fail(f"{name}: the parser refused it (exit {e.code})")
    assert callable(parsed.run)


@pytest.mark.parametrize("module", sorted({m for _, m in collect("module")}))
def test_module_command_has_help(module: str):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


@pytest.mark.parametrize("script", sorted({s for _, s in collect("script")}))
def test_tools_script_has_help(script: str):
    assert (ROOT / script).is_file(), f"{script}: no such file"
    proc = subprocess.run([sys.executable, script, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for name, command in collect("make"):
        target = shlex.split(command)[1] if len(shlex.split(command)) > 1 else "all"
        assert target.split("=")[0] in targets or "=" in target, name
