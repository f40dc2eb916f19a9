"""The references hold every option and every field, and no page calls a documented feature unmodelled.

Independent of the code's output: the fields are read from the dataclasses themselves, the options from
the Typer app, and the pages are the files under ``docs/``. The CLI reference is what the docs' hook
generates (``docs/hooks/typer_cli.py``), so a command whose option the generator drops fails here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import typer

from gpucast.job import _SURROUNDING_FIELDS, Job

DOCS = Path(__file__).resolve().parents[1] / "docs"
STALE = re.compile(r"not (?:yet )?modell?ed yet|not yet modell?ed", re.I)


def _hook(name: str = "typer_cli"):
    spec = importlib.util.spec_from_file_location(f"{name}_hook", DOCS / "hooks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _options(command, path: str = "gpucast"):
    """(command path, option flag) of every visible option of every command and sub-command (typer vendors
    click, so its classes are told by what they say they are, not by isinstance)."""
    for p in command.params:
        if p.param_type_name == "option" and not p.hidden:
            yield path, max(p.opts, key=len)
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            if not sub.hidden:
                yield from _options(sub, f"{path} {name}")


def test_every_cli_option_is_in_the_generated_reference():
    from gpucast.cli import app

    text = _hook().cli_markdown()
    command = typer.main.get_command(app)
    missing = [f"{path} {flag}" for path, flag in _options(command) if flag not in text]
    assert len(list(_options(command))) > 50 and not missing, missing[:10]
    assert "<!-- gpucast-cli -->" in (DOCS / "cli.md").read_text(encoding="utf-8")


def test_every_job_field_is_in_the_job_spec_reference():
    """In the generated table (what the service takes) or, for what only a local job has (a dataset's code,
    an ONNX file's digest), in the page's own text."""
    page = (DOCS / "job-spec.md").read_text(encoding="utf-8")
    assert "<!-- gpucast-job-fields -->" in page
    text = page + _hook("job_fields").fields_markdown()
    names = [f.name for f in dataclasses.fields(Job) if f.compare]
    names += [f"{group}.{f.name}" for group, cls in _SURROUNDING_FIELDS.items() for f in dataclasses.fields(cls)
              if not f.name.startswith("_")]

    def documented(name: str) -> bool:
        leaf = name.rsplit(".", 1)[-1]
        # a field of the YAML example (`  name:` or `  # name:`), or named in backticks (`group.name`, `name`)
        return bool(re.search(rf"^\s*(#\s*)?{re.escape(leaf)}:", text, re.M)) or f"`{name}`" in text \
            or f"`{leaf}`" in text
    missing = [n for n in names if not documented(n)]
    assert len(names) > 60 and not missing, missing


def test_no_page_says_a_documented_field_is_not_modelled_yet():
    fields = {f.name for cls in _SURROUNDING_FIELDS.values() for f in dataclasses.fields(cls)}
    stale = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for sentence in re.split(r"(?<=[.;])\s", text.replace("\n", " ")):
            if STALE.search(sentence):
                named = {w.rsplit(".", 1)[-1] for w in re.findall(r"`([\w.]+)`", sentence)}
                stale += [f"{page.name}: {sentence.strip()[:120]}" for _ in [0] if named & fields]
    assert not stale, stale


def test_a_fact_is_written_on_one_page():
    """No sentence of 14 words or more (prose: code blocks and tables aside) stands on two pages: a fact
    is described once and linked from elsewhere, so the copies cannot drift apart."""
    where: dict[str, set] = {}
    for page in sorted(DOCS.glob("*.md")):
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        text = re.sub(r"^\|.*$", "", text, flags=re.M)
        for sentence in re.split(r"(?<=[.!?])\s+", text.replace("\n", " ")):
            words = sentence.split()
            if len(words) >= 14:
                where.setdefault(" ".join(words), set()).add(page.name)
    twice = {s[:100]: sorted(p) for s, p in where.items() if len(p) > 1}
    assert not twice, twice
