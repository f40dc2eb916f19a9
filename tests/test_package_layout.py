"""The package's layout shows its layers: the command line is one package, every package ``__init__.py`` is a
face that hands names on, and a long module says in its docstring why it is one job.

Read from the files themselves (``ast``), so the rule and the tree cannot drift apart."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gpucast"
FACE_LINES = 40      # a package __init__.py at most
MODULE_LINES = 400   # a module past this says why it is one job
WHY = "One module of this size because"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_command_line_is_a_package():
    assert not sorted(p.name for p in SRC.glob("cli*.py")), "command modules belong in gpucast/cli/"
    assert (SRC / "cli" / "__main__.py").exists() and (SRC / "cli" / "app.py").exists()


def test_every_package_face_is_short_and_defines_nothing_but_names():
    long, logic = [], []
    for init in sorted(SRC.rglob("__init__.py")):
        rel = str(init.relative_to(SRC.parent))
        if _lines(init) > FACE_LINES:
            long.append(f"{rel} ({_lines(init)} lines)")
        tree = ast.parse(init.read_text(encoding="utf-8"))
        # functions and classes live in modules named for what they do; a face may wrap a lazy import
        defined = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
                   or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(n.body) > 8)]
        if defined:
            logic.append(f"{rel}: {', '.join(defined)}")
    assert not long and not logic, long + logic


def test_a_long_module_says_why_it_is_one_job():
    silent = []
    for path in sorted(SRC.rglob("*.py")):
        if _lines(path) > MODULE_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            if WHY not in " ".join(doc.split()):
                silent.append(f"{path.relative_to(SRC.parent)} ({_lines(path)} lines)")
    assert not silent, silent
