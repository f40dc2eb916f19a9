"""MkDocs hook: the CLI reference page, generated from the Typer app at build time.

A page that contains the marker ``<!-- gpucast-cli -->`` gets, in its place, every command of
``gpucast.cli.app`` with its usage, arguments and options, written by Typer's own Markdown
generator (``typer.cli.get_docs_for_click``, what ``typer MODULE utils docs`` prints). So a new
command or option shows up in the docs without anyone editing them.

Why a hook and not mkdocs-typer2 / mkdocs-click: with typer >= 0.2x (which vendors click as
``typer._click``) mkdocs-click finds no options (it checks ``isinstance(p, click.Option)``) and
mkdocs-typer2's native engine fails on ``TyperOption.type``; its legacy engine runs ``typer
gpucast.cli utils docs``, which cannot import a module that looks itself up in ``sys.modules``,
and then silently renders nothing. A failure here raises, so ``mkdocs build --strict`` fails.
"""

from __future__ import annotations

import re

MARKER = "<!-- gpucast-cli -->"


def cli_markdown() -> str:
    import typer
    from typer.cli import get_docs_for_click

    from gpucast.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="gpucast")
    # indent=1: the page's own title is the only H1; `gpucast` is H2, commands H3, sub-commands H4.
    docs = get_docs_for_click(obj=command, ctx=ctx, name="gpucast", indent=1)
    if "# `gpucast predict`" not in docs:
        raise RuntimeError("the generated CLI reference has no `gpucast predict` section")
    return _escape_dunders(docs)


def _escape_dunders(text: str) -> str:
    """Help text is plain text: ``__getitem__`` outside code must not turn bold in Markdown."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        if not fence:
            parts = re.split(r"(`[^`]*`)", line)
            line = "".join(p if p.startswith("`") else p.replace("__", r"\_\_") for p in parts)
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_markdown())
