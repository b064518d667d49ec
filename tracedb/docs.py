"""Generated documentation: `python -m tracedb.docs` rewrites docs/schema.md and
docs/queries.md from the code; tests fail when the committed files drift."""

from __future__ import annotations

from pathlib import Path

from tracedb import schema, sqllib

DOCS = Path(__file__).resolve().parent.parent / "docs"


def queries_markdown() -> str:
    out = [
        "# Canned queries",
        "",
        "Generated from the headers of `sql/*.sql` (`python -m tracedb.docs`); do not edit by hand.",
        "Run one with `tracedb query NAME --param name=value`; print it for another engine with `--dialect trino`.",
    ]
    for q in sqllib.list_queries():
        out += ["", f"## `{q.name}`: {q.title}", "", q.description]
        if q.params:
            out += ["", "| parameter | type | default | meaning |", "|---|---|---|---|"]
            for p in q.params:
                default = "required" if p.required else ("NULL" if p.default is None else f"`{p.default}`")
                doc = p.description.replace("|", "\\|")  # a bare | would split the cell
                out.append(f"| `{p.name}` | {p.type_text} | {default} | {doc} |")
    return "\n".join(out) + "\n"


def generated() -> dict[str, str]:
    return {"schema.md": schema.schema_markdown(), "queries.md": queries_markdown()}


def main() -> None:
    """Rewrite docs/schema.md and docs/queries.md (takes no arguments)."""
    import sys

    if sys.argv[1:]:
        raise SystemExit("usage: python -m tracedb.docs   (rewrites docs/schema.md and docs/queries.md)")
    DOCS.mkdir(exist_ok=True)
    for name, text in generated().items():
        (DOCS / name).write_text(text)
        print(f"wrote docs/{name}")


if __name__ == "__main__":
    main()
