"""The import graph of src/gpucast has no circles, and every import goes down the layer table of
docs/layering.md (read from the page, so the page and the check cannot drift apart).

Every `import` / `from ... import` of a gpucast module counts, including those inside functions:
a lazy import still says which module is the lower layer. `from gpucast.x import y` where `y` is a
submodule counts as importing `gpucast.x.y` (and `gpucast.x`, whose `__init__` runs first);
importing a package counts as importing its `__init__`. A strongly connected component of more
than one module is a circle; the failure message prints one cycle through each.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "gpucast"
LAYERING = Path(__file__).resolve().parents[1] / "docs" / "layering.md"


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
    assert "gpucast.hardware" in graph["gpucast.estimate.estimator"]  # from ..hardware import ...
    assert "gpucast.graph.tracer" in graph["gpucast.graph"]  # package __init__ re-exports
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


# ------------------------------------------------------------------------------ the layer order

def layer_table(text: str | None = None) -> list[tuple[str, list[str]]]:
    """``[(layer name, [module patterns])]`` from the bottom up: the rows of docs/layering.md's
    table, the backticked names of its second column."""
    text = LAYERING.read_text(encoding="utf-8") if text is None else text
    section = text.split("### Which layers sit below which", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not line.lstrip().startswith("|") or set(cells[0]) <= set("- ") or cells[0] == "layer":
            continue
        rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return rows


def _specificity(pattern: str) -> int:
    return len(pattern.replace("*", ""))


def layer_of(module: str, table) -> tuple[int, str] | None:
    """(index, pattern) of the most specific pattern naming ``module``: ``gpucast`` is the front
    door alone, ``x.y`` names gpucast.x.y and everything under it, ``cli*`` a glob."""
    best = None
    for i, (_name, patterns) in enumerate(table):
        for pat in patterns:
            if pat == PACKAGE:
                hit = module == PACKAGE
            else:
                full = f"{PACKAGE}.{pat}"
                hit = (fnmatch.fnmatchcase(module, full) if "*" in pat
                       else module == full or module.startswith(full + "."))
            if hit and (best is None or _specificity(pat) > _specificity(best[1])):
                best = (i, pat)
    return best


def layer_violations(graph: dict[str, set[str]], table) -> list[str]:
    """Every import of a higher layer, and every module no row names."""
    out = []
    for module in sorted(graph):
        mine = layer_of(module, table)
        if mine is None:
            out.append(f"{module}: no row of the table names it")
            continue
        for dep in sorted(graph[module]):
            theirs = layer_of(dep, table)
            if theirs is not None and theirs[0] > mine[0]:
                out.append(f"{module} ({table[mine[0]][0]}) imports {dep} ({table[theirs[0]][0]})")
    return out


def test_the_layer_table_is_read_from_the_page():
    table = layer_table()
    names = [n for n, _ in table]
    assert len(table) >= 8 and names[0].startswith("1.") and "leaves" in names[0], names
    assert all(pats for _, pats in table), table
    assert layer_of("gpucast.zoo.base", table)[0] < layer_of("gpucast.zoo", table)[0]  # most specific wins
    assert layer_of("gpucast.cli.sim", table) == layer_of("gpucast.cli", table)         # a package whole
    assert layer_of("gpucast", table)[0] == len(table) - 1                              # the front door
    assert layer_of("gpucast.api", table)[0] < layer_of("gpucast.learn.rows", table)[0]


def test_every_import_goes_down_the_layer_table():
    graph = import_graph()
    problems = layer_violations(graph, layer_table())
    assert not problems, "imports against docs/layering.md's layer table:\n" + "\n".join(problems)


def test_the_leaves_import_no_gpucast_module():
    graph = import_graph()
    table = layer_table()
    leaves = [m for m in graph if layer_of(m, table) and layer_of(m, table)[0] == 0]
    assert "gpucast.version" in leaves and "gpucast.fileio" in leaves
    assert {m: sorted(graph[m]) for m in leaves if graph[m]} == {}


def test_the_checker_finds_an_upward_import():
    """A made-up graph and table: the check names the offending edge and an unlisted module."""
    table = layer_table("### Which layers sit below which\n| layer | modules | what |\n| --- | --- | --- |\n"
                        "| low | `a`, `a.b*` | x |\n| high | `c` | y |\n### next\n")
    assert [n for n, _ in table] == ["low", "high"]
    graph = {"gpucast.a.x": {"gpucast.c"}, "gpucast.c": {"gpucast.a.x"}, "gpucast.d": set()}
    assert layer_violations(graph, table) == ["gpucast.a.x (low) imports gpucast.c (high)",
                                              "gpucast.d: no row of the table names it"]


# The predictor path: what `gpucast.api` imports, transitively. The layer order already keeps
# it below `learn`; this says by name what must never be on it, and the few modules of those
# packages that are, each with the reason.
NEVER_ON_THE_PREDICTOR_PATH = ("gpucast.learn", "gpucast.cluster", "gpucast.integrations", "gpucast.advisor",
                               "gpucast.service", "gpucast.cli", "gpucast.profile")
ON_THE_PATH_ALTHOUGH_IN_LEARN = {
    # predict(learned=...) applies a hybrid model the caller loaded; numpy and the physics only
    "gpucast.learn.apply": "applies a loaded hybrid model",
    "gpucast.learn.features": "the features learn.apply feeds the loaded model",
    # an environment's split-conformal intervals around a prediction; numpy only
    "gpucast.learn.intervals": "an environment's intervals",
}


def predictor_path(graph: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = ["gpucast.api"]
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_predictor_path_only_goes_down():
    graph = import_graph()
    path = predictor_path(graph)
    assert "gpucast.estimate" in path and "gpucast.probe.dataset" in path  # the checker sees the path
    bad = sorted(m for m in path if m == PACKAGE or (m.startswith(NEVER_ON_THE_PREDICTOR_PATH)
                                                      and m not in ON_THE_PATH_ALTHOUGH_IN_LEARN))
    assert not bad, f"gpucast.api imports, directly or not: {bad}"
    # probe.host (this CPU's speed, which probe.dataset scales by) writes environment files
    # through estimate.environment_file, not learn.artifacts
    assert "gpucast.probe.host" in path and "gpucast.learn.artifacts" not in path
    # the allowed learn modules import nothing else of learn
    for m in ON_THE_PATH_ALTHOUGH_IN_LEARN:
        assert {d for d in graph[m] if d.startswith("gpucast.learn")} <= set(ON_THE_PATH_ALTHOUGH_IN_LEARN), m
