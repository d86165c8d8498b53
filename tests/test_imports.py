"""The core's import graph: no cycles among emojikit modules and no import of a plugin package;
no plugin imports another (what plugins share lives in the core, as a third party's would).

Imports inside functions count too (hiding a cycle in a function is still a cycle), and so do
imports under `if TYPE_CHECKING:`. The graph is read from the source (AST), nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, module: str) -> set[str]:
    """Every module name an `import` or `from ... import` in the file may refer to."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def core_graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """(core module -> core modules it imports, [(core module, plugin module)])."""
    files = {module_name(p, root): p for p in (root / "emojikit").rglob("*.py")}
    plugin_packages = {p.name for p in (root / "plugins").iterdir() if (p / "__init__.py").exists()}
    graph: dict[str, set[str]] = {m: set() for m in files}
    to_plugins = []
    for module, path in files.items():
        for name in imported_names(path, module):
            if name.split(".")[0] in plugin_packages:
                to_plugins.append((module, name))
            while name and name not in files:
                name = name.rpartition(".")[0]
            # Package __init__ re-exports are not edges of the architecture.
            if name and name != module and files[name].name != "__init__.py":
                graph[module].add(name)
    return graph, to_plugins


def plugin_to_plugin_imports(root: Path = ROOT) -> list[tuple[str, str]]:
    """[(plugin module, module of another plugin package it imports)]."""
    plugin_packages = {p.name for p in (root / "plugins").iterdir() if (p / "__init__.py").exists()}
    found = []
    for package in sorted(plugin_packages):
        for path in sorted((root / "plugins" / package).rglob("*.py")):
            module = module_name(path, root / "plugins")
            found += [(module, name) for name in sorted(imported_names(path, module))
                      if name.split(".")[0] in plugin_packages - {package}]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_the_core():
    graph, _ = core_graph()
    assert {"emojikit.ui.cli", "emojikit.play.game", "emojikit.composition.assembly"} <= set(graph), "the walk missed core modules"
    assert cycles(graph) == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles(graph))


def test_the_core_never_imports_a_plugin():
    _, to_plugins = core_graph()
    assert to_plugins == [], "core -> plugin imports: " + ", ".join(f"{a} -> {b}" for a, b in to_plugins)


def test_no_plugin_imports_another_plugin():
    """A plugin that needs another's code would fail when that one is blocked or not installed;
    shared code (loading a model, reading emoji) belongs in the core, importable by third parties."""
    found = plugin_to_plugin_imports()
    assert found == [], "plugin -> plugin imports: " + ", ".join(f"{a} -> {b}" for a, b in found)


def test_the_walk_sees_a_cycle_and_a_plugin_import(tmp_path):
    """The checks themselves: a cycle hidden in a function and a plugin import are both found."""
    core, plugin = tmp_path / "emojikit", tmp_path / "plugins" / "emojikit_fake"
    core.mkdir()
    plugin.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "a.py").write_text("from emojikit import b\n")
    (core / "b.py").write_text("def f():\n    from emojikit.a import x\n    import emojikit_fake.thing\n")
    (plugin / "__init__.py").write_text("")
    graph, to_plugins = core_graph(tmp_path)
    assert cycles(graph) == [["emojikit.a", "emojikit.b"]]
    assert ("emojikit.b", "emojikit_fake.thing") in to_plugins
    other = tmp_path / "plugins" / "emojikit_other"
    other.mkdir()
    (other / "__init__.py").write_text("")
    (other / "judge.py").write_text("def build():\n    from emojikit_fake import loading\n")
    assert plugin_to_plugin_imports(tmp_path) == [("emojikit_other.judge", "emojikit_fake"), ("emojikit_other.judge", "emojikit_fake.loading")]


def test_every_flat_module_path_of_the_old_layout_still_imports_as_the_moved_module():
    """Plugins written against the flat layout (`emojikit.components`, `emojikit.web.models`) keep working."""
    import importlib

    from emojikit._moved import MOVED, new_name

    for old in MOVED:
        moved = importlib.import_module(f"emojikit.{old}")
        assert moved is importlib.import_module(new_name(f"emojikit.{old}"))
        assert moved.__spec__.name == new_name(f"emojikit.{old}")
    assert importlib.import_module("emojikit.web.models") is importlib.import_module("emojikit.ui.web.models")
    from emojikit.components import Component  # noqa: F401  the spelling of docs and third-party plugins
    from emojikit.game import play  # noqa: F401


def test_the_core_folder_holds_packages_and_the_public_api_only():
    """The tree shows the architecture: no module sits loose beside the domain packages."""
    loose = sorted(p.name for p in (ROOT / "emojikit").glob("*.py") if p.name not in {"__init__.py", "_moved.py"})
    assert loose == []
    for old in __import__("emojikit._moved", fromlist=["MOVED"]).MOVED:
        assert not (ROOT / "emojikit" / f"{old}.py").exists()


def test_an_old_module_path_runs_as_a_script():
    """`python -m emojikit.cli` (the flat layout's spelling) still runs the command line."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "emojikit.cli", "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Usage: emojikit" in done.stdout, done.stderr[-2000:]
