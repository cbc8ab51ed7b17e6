"""The engine's layers, read from every import statement (``ast``, function-level ones too).

- A backend package (``packages/bitnet-*`` but the core and the meta package)
  and the template import of ``bitnet_core`` only ``hal``, ``sdk`` and
  ``errors``: what a backend builds on is the SDK, so the core's other modules
  can change without breaking a backend. Their ``tests/`` and ``bench/`` may use
  the rest (``bitnet_core.testing``, ``model``); ``src/`` may not.
- No cycle among ``bitnet_core``'s subpackages and top-level modules: an edge
  ``a -> b`` is any import in ``a`` (at module level, in a function, under
  ``TYPE_CHECKING``) of something in ``b``, relative imports resolved. The
  package root (``bitnet_core/__init__.py``, which re-exports every layer) is
  not a node.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "packages" / "bitnet-core" / "src" / "bitnet_core"
NOT_BACKENDS = {"bitnet-core", "bitnet"}
#: what a backend may import of bitnet_core
SURFACE = ("bitnet_core.hal", "bitnet_core.sdk", "bitnet_core.errors")


def module_name(path: Path, src: Path) -> tuple[str, bool]:
    """The dotted name of ``path`` under the source root ``src``, and whether it is a package."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def imports(path: Path, src: Path) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports (absolute, dotted), with its line; for ``from m import
    n`` both ``m.n`` (``n`` may be a submodule) and, through it, ``m``."""
    name, is_package = module_name(path, src)
    package = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno


def surface_violations(src: Path) -> list[str]:
    """``file:line imports X`` for each import of bitnet_core outside ``SURFACE`` under ``src``."""
    found = []
    for path in sorted(src.rglob("*.py")):
        for target, line in imports(path, src):
            if target.split(".")[0] != "bitnet_core":
                continue
            if not any(target == s or target.startswith(s + ".") for s in SURFACE):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{line} imports {target}")
    return found


def layer_graph(core: Path) -> dict[str, dict[str, str]]:
    """``graph[a][b]``: one place (``file:line``) where layer ``a`` of the package at ``core``
    imports layer ``b`` (a layer: a subpackage or top-level module of it)."""
    top = core.name
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(core.rglob("*.py")):
        name, _ = module_name(path, core.parent)
        parts = name.split(".")
        if len(parts) < 2:  # the package root re-exports the layers: not a node
            continue
        for target, line in imports(path, core.parent):
            tparts = target.split(".")
            if tparts[0] != top or len(tparts) < 2:
                continue
            layer = tparts[1]
            if not ((core / layer).is_dir() or (core / f"{layer}.py").is_file()):
                continue  # a name defined in the package root
            if layer != parts[1]:
                graph[parts[1]].setdefault(layer, f"{path.relative_to(core.parent)}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected set of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = set()
            while True:
                w = stack.pop()
                members.add(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(cycle_through(graph, v, members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycle_through(graph: dict[str, dict[str, str]], start: str, members: set[str]) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``members``."""
    paths = {start: [start]}
    queue = [start]
    for v in queue:
        for w in sorted(graph.get(v, {})):
            if w == start:
                return [*paths[v], start]
            if w in members and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError("not a cycle")


def describe(graph: dict[str, dict[str, str]], cycle: list[str]) -> str:
    steps = [f"  {a} -> {b}  ({graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


def backend_sources() -> list[Path]:
    found = [
        p / "src"
        for p in sorted((ROOT / "packages").iterdir())
        if (p / "pyproject.toml").is_file() and p.name not in NOT_BACKENDS
    ]
    return [*found, *sorted((ROOT / "templates").glob("*/src"))]


def test_backends_import_only_the_surface():
    sources = backend_sources()
    assert len(sources) >= 5, sources  # cuda, opencl, vulkan, webgpu and the template
    problems = [v for src in sources for v in surface_violations(src)]
    assert not problems, "backends import bitnet_core beyond hal, sdk and errors:\n" + "\n".join(
        problems
    )


def test_no_cycle_among_core_layers():
    graph = layer_graph(CORE)
    assert {"hal", "sdk", "model", "server", "cli"} <= set(graph)
    found = cycles(graph)
    assert not found, "import cycles among bitnet_core's layers:\n" + "\n".join(
        describe(graph, c) for c in found
    )


def test_the_checks_see_a_planted_fault(tmp_path):
    """A function-level relative import closing a cycle, and a backend reaching past the SDK."""
    core = tmp_path / "bitnet_core"
    for rel, text in {
        "__init__.py": "from .b import y\n",
        "a/__init__.py": "",
        "a/one.py": "from ..b import y\n",
        "b/__init__.py": "y = 1\n",
        "b/two.py": "def f():\n    from ..c.three import z\n",
        "c/three.py": "from .. import a\nz = 2\n",
        "errors.py": "",
    }.items():
        (core / rel).parent.mkdir(parents=True, exist_ok=True)
        (core / rel).write_text(text)
    graph = layer_graph(core)
    found = cycles(graph)
    assert len(found) == 1 and set(found[0]) == {"a", "b", "c"}, found
    assert "bitnet_core/b/two.py:2" in describe(graph, found[0])
    backend = tmp_path / "src" / "bitnet_x"
    backend.mkdir(parents=True)
    (backend / "runner.py").write_text(
        "from bitnet_core.sdk.runner import GenericRunner\n"
        "from bitnet_core import errors\n"
        "def f():\n    from bitnet_core.model.api import load\n"
    )
    assert [v.split(" imports ")[1] for v in surface_violations(tmp_path / "src")] == [
        "bitnet_core.model.api.load"
    ]
