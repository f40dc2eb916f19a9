"""The import graph of src/gpucast has no circles (docs/layering.md).

Every `import` / `from ... import` of a gpucast module counts, including those inside functions:
a lazy import still says which module is the lower layer. `from gpucast.x import y` where `y` is a
submodule counts as importing `gpucast.x.y` (and `gpucast.x`, whose `__init__` runs first);
importing a package counts as importing its `__init__`. A strongly connected component of more
than one module is a circle; the failure message prints one cycle through each.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "gpucast"


def _modules() -> dict[str, Path]:
    """Module name -> file, for every .py under src/gpucast (a package is its `__init__`)."""
    out: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The gpucast modules that `module` imports (anywhere in its body)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(name: str) -> None:
        # Importing a.b.c runs a/__init__, a/b/__init__ and a/b/c: the innermost is the one named;
        # parents that are packages are imported too but count only when named themselves.
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = _resolve_relative(module, is_package, node.level, node.module)
            else:
                target = node.module or ""
            if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
                continue
            submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            names = [a.name for a in node.names if f"{target}.{a.name}" not in known]
            for sub in submodules:
                add(sub)
            if names or not submodules:
                add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out)


def _cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module (breadth-first within it)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component


def test_no_import_circles():
    graph = import_graph()
    assert "gpucast.job" in graph and graph["gpucast.cli"], "the checker found no modules"
    components = strongly_connected(graph)
    message = "\n".join(
        f"{len(c)} modules: {', '.join(c)}\n    cycle: {' -> '.join(_cycle(graph, c))}"
        for c in components
    )
    assert not components, f"import circles in src/gpucast:\n{message}"


def test_checker_resolves_imports():
    """The resolver sees relative, absolute, lazy and submodule imports."""
    graph = import_graph()
    assert "gpucast.hardware" in graph["gpucast.estimate"]  # from ..hardware import ...
    assert "gpucast.graph.tracer" in graph["gpucast.graph"]  # package __init__ re-exports
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
