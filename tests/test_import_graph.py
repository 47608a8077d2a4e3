"""No import circles inside `electra`: every module's imports of other electra modules, at module
level and inside functions (a lazy import is still a circle, only a later one), form a graph
without cycles.

What counts as an edge from module M:
- `import electra.a.b` and `from electra.a.b import x`: M -> electra.a.b;
- `from electra.a import b` where electra/a/b.py (or electra/a/b/) exists: M -> electra.a.b; where
  `b` is a name defined in electra/a/__init__.py: M -> electra.a (the package's `__init__`);
- relative imports, resolved against M's package.
Not an edge: a submodule's implicit need for its parent package's `__init__` (Python runs it
first for every submodule, and it is harmless unless the submodule takes names from it, which
is then an explicit edge above), and imports under `if TYPE_CHECKING:`, which never run.
So a package `__init__` may import its submodules, but a submodule that imports names from its
own package's `__init__`, while that `__init__` imports the submodule back, is a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "electra"


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Module name -> file, for every .py under src/electra (packages by their __init__)."""
    out = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, except under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the electra modules it imports (see the module docstring for the rules)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = _package_of(name, path).split(".")
                    base = base[:len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = []
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    targets.append(sub if sub in modules else origin)
            for target in targets:
                if target == ROOT or target.startswith(ROOT + "."):
                    # `import electra.a.b` of a name that is not a module: its nearest module
                    while target not in modules and "." in target:
                        target = target.rpartition(".")[0]
                    if target != name:
                        edges[name].add(target)
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of more than one module that all reach each other (Tarjan's algorithm,
    iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(components)


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path that returns to its start) per strongly connected group."""
    return [_cycle_in(component, edges) for component in strongly_connected(edges)]


def _cycle_in(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search)."""
    start, members = component[0], set(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(edges[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if child not in parents:
                    parents[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no cycle in {component}")  # pragma: no cover


def test_no_import_cycles_in_electra():
    modules = module_files()
    assert "electra.config" in modules and "electra.objectives" in modules
    edges = import_edges(modules)
    report = [f"{' -> '.join(_cycle_in(group, edges))} (all of {', '.join(group)} reach each "
              f"other)" for group in strongly_connected(edges)]
    assert not report, "import cycles:\n" + "\n".join(report)


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root)


def test_lazy_and_package_imports_are_edges(tmp_path):
    """The rules on a toy tree: a function-level import, `from package import submodule`, a
    relative import, a name taken from a package's __init__, and a TYPE_CHECKING import."""
    modules = _write(tmp_path, {
        "electra/__init__.py": "",
        "electra/config.py": "def f():\n    from electra.objectives import objective_class\n",
        "electra/objectives/__init__.py": "from electra import config\nfrom .base import B\n",
        "electra/objectives/base.py": "from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from electra.objectives import x\n"
                                      "B = 1\n",
        "electra/objectives/mlm.py": "from electra.objectives import REGISTRY\n",
    })
    edges = import_edges(modules)
    assert edges["electra.config"] == {"electra.objectives"}
    assert edges["electra.objectives"] == {"electra.config", "electra.objectives.base"}
    assert edges["electra.objectives.base"] == set()
    assert edges["electra.objectives.mlm"] == {"electra.objectives"}
    assert find_cycles(edges) == [["electra.config", "electra.objectives", "electra.config"]]


def test_a_submodule_importing_its_packages_init_back_is_a_cycle(tmp_path):
    modules = _write(tmp_path, {
        "electra/__init__.py": "",
        "electra/tasks/__init__.py": "from electra.tasks.glue import SPECS\n",
        "electra/tasks/glue.py": "def f():\n    from electra.tasks import get_task\n",
    })
    assert find_cycles(import_edges(modules)) == [
        ["electra.tasks", "electra.tasks.glue", "electra.tasks"]]


def test_building_the_parser_imports_no_torch():
    """`electra --help` and the commands that need no model start at once: every command
    group's module, and the registries they take names from, load without torch."""
    import subprocess
    import sys

    code = ("import sys; from electra.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules "
            "if m.startswith('electra.objectives') or m in ('torch', 'electra.tasks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# The layers of `electra`, lowest first (docs/development.md). A module imports only from its
# own layer or lower ones: the runtime every loop shares never reaches into a loop, a loop never
# into the systems built on it, and only the entry points see everything.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({
        "electra.version", "electra.command", "electra.errors", "electra.fileutil",
        "electra.device", "electra.precision", "electra.architectures", "electra.model_config",
        "electra.presets", "electra.config", "electra.tokenizer", "electra.tagschemes",
        "electra.flops", "electra.cli_support", "electra.settings", "electra.progress",
        "electra.hub", "electra.outputs"})),
    ("components", frozenset({
        "electra.data", "electra.conll", "electra.model", "electra.tasks", "electra.objectives",
        "electra.runtime"})),
    ("loops", frozenset({"electra.pretraining", "electra.finetuning", "electra.scoring",
                        "electra.embeddings"})),
    ("systems built on fine-tuning", frozenset({
        "electra.multitask", "electra.cvt", "electra.exporting"})),
    # `electra` itself: its __init__ hands out the functions of `electra.api` on first use
    ("entry points", frozenset({"electra", "electra.demo", "electra.cli", "electra.api"})),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of `module`'s top-level unit (electra.X, or electra itself)."""
    unit = ".".join(module.split(".")[:2])
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    raise KeyError(unit)


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
                  for a, targets in edges.items() for b in targets
                  if layer_of(b) > layer_of(a))


def test_every_module_has_a_layer():
    unplaced = sorted({".".join(m.split(".")[:2]) for m in module_files()
                       if not any(".".join(m.split(".")[:2]) in units for _, units in LAYERS)})
    assert not unplaced, f"add to LAYERS: {unplaced}"


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    report = upward_imports(import_edges(module_files()))
    assert not report, "upward imports:\n" + "\n".join(report)


def test_an_upward_import_is_reported(tmp_path):
    modules = _write(tmp_path, {
        "electra/__init__.py": "",
        "electra/runtime/__init__.py": "",
        "electra/runtime/skeleton.py": "def f():\n    from electra.pretraining.loop import g\n",
        "electra/pretraining/__init__.py": "",
        "electra/pretraining/loop.py": "from electra.runtime.skeleton import f\n",
    })
    assert upward_imports(import_edges(modules)) == [
        "electra.runtime.skeleton (components) imports electra.pretraining.loop (loops)"]


def test_no_function_is_longer_than_80_lines():
    """A function longer than a screen is split into named steps (docs/development.md)."""
    import ast

    long = []
    for path in sorted((SRC / "electra").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} {lines}")
    assert long == []
