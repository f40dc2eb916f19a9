"""MkDocs hook: every job field, generated from the HTTP service's schema at build time.

A page that contains the marker ``<!-- gpucast-job-fields -->`` gets, in its place, a table per group
(the job's own fields, then ``data``, ``loop``, ``stack``, ``parallel``, ``adapter``, ``serve``) with each
field's JSON type and its description, read from :class:`gpucast.service.schemas.JobSpec` (the schema the
service validates requests with, whose groups are the job spec's). So a new field shows up in the reference
without anyone editing it, and ``tests/test_docs_reference.py`` checks that none is missing. A failure here
raises, so ``mkdocs build --strict`` fails.
"""

from __future__ import annotations

MARKER = "<!-- gpucast-job-fields -->"
GROUPS = ("data", "loop", "stack", "parallel", "adapter", "serve")


def _type(prop: dict) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "anyOf" in prop:
        kinds = [_type(p) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    if "$ref" in prop:
        return "group"
    kind = prop.get("type", "any")
    return f"list of {_type(prop['items'])}" if kind == "array" and "items" in prop else kind


def _rows(props: dict, prefix: str = "") -> list[str]:
    out = []
    for name, prop in props.items():
        if name in GROUPS and not prefix:
            continue
        text = " ".join(prop.get("description", "").split()).replace("|", "\\|") or "-"
        out.append(f"| `{prefix}{name}` | {_type(prop)} | {text} |")
    return out


def fields_markdown() -> str:
    from gpucast.service.schemas import JobSpec

    schema = JobSpec.model_json_schema()
    defs = schema.get("$defs", {})
    head = ["| field | type | what |", "| --- | --- | --- |"]
    parts = ["### The job", "", *head, *_rows(schema["properties"])]
    for group in GROUPS:
        ref = schema["properties"][group]
        target = next((p["$ref"] for p in ref.get("anyOf", [ref]) if "$ref" in p), None)
        if target is None:
            raise RuntimeError(f"the job schema's group {group!r} has no definition")
        sub = defs[target.rsplit("/", 1)[-1]]
        parts += ["", f"### `{group}`", "", *head, *_rows(sub["properties"], f"{group}.")]
    return "\n".join(parts)


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, fields_markdown())
