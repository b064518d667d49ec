"""Plain `--help` for the tracedb commands, in the style of sqlite-utils and datasette.

Typer's own help shows Python annotations as types (`<bool>`, `<list[Path]>`,
`{paths}...`) and its rich markup eats `[default: ...]`. These command classes render
help from the click parameters instead: the usage line with metavars (`PATH...`), each
option with a plain type name (`DIR`, `INTEGER`, `TEXT`; none for flags), its help, the
environment variable and `[default: ...]`, and the docstring (with its `Example:`) as
written.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any

from typer.core import TyperCommand, TyperGroup

# Parameters are click's (typer < 0.20), typer's own vendored click (0.20-0.28: types
# named "str", "int", ...) or typer's type descriptors (0.29): only the attributes all
# have are used, and the type name comes from whichever describes it.
_NAMES = {"text": "TEXT", "string": "TEXT", "str": "TEXT", "integer": "INTEGER", "int": "INTEGER",
          "float": "NUMBER", "path": "PATH", "boolean": "BOOLEAN", "bool": "BOOLEAN"}
_PY = {str: "TEXT", int: "INTEGER", float: "NUMBER", bool: "BOOLEAN", Path: "PATH"}


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False))


def _type_name(param: Any) -> str:
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        if getattr(desc, "is_choice", False) and desc.choices:
            return "[" + "|".join(map(str, desc.choices)) + "]"
        if getattr(desc, "is_path", False):
            return "PATH"
        ann = desc.annotation
        args = typing.get_args(ann)
        if args:  # list[str], Optional[int]
            ann = next((a for a in args if a is not type(None)), ann)
        return _PY.get(ann, getattr(ann, "__name__", "VALUE").upper())
    typ = getattr(param, "type", None)
    choices = getattr(typ, "choices", None)
    if choices:
        return "[" + "|".join(map(str, choices)) + "]"
    name = getattr(typ, "name", "") or "value"
    return _NAMES.get(name, name.upper())


def _metavar(param: Any) -> str:
    if param.metavar:
        return param.metavar
    if _is_flag(param):
        return ""
    return _type_name(param)


def _argument_usage(param: Any) -> str:
    text = _metavar(param) if param.metavar else param.name.upper()
    if param.nargs != 1 and not text.endswith("..."):
        text += "..."
    return text if param.required else f"[{text}]"


def _extras(param: Any) -> str:
    extras = []
    envvar = getattr(param, "envvar", None)
    if envvar and getattr(param, "show_envvar", True):
        extras.append(f"env var: {envvar if isinstance(envvar, str) else ', '.join(envvar)}")
    default = param.default
    flag = _is_flag(param)
    if (getattr(param, "show_default", True) is not False and not flag
            and default not in (None, (), []) and not callable(default)):
        shown = ", ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        extras.append(f"default: {shown}")
    if param.required:
        extras.append("required")
    return f"  [{'; '.join(extras)}]" if extras else ""


def _write_doc(text: str | None, formatter: Any) -> None:
    if text:
        formatter.write_paragraph()
        for line in inspect.cleandoc(text).splitlines():
            formatter.write(f"  {line}".rstrip() + "\n")


def _write_params(cmd: Any, ctx: Any, formatter: Any) -> None:
    args, opts = [], []
    for p in cmd.get_params(ctx):
        if getattr(p, "hidden", False):
            continue
        help_text = (getattr(p, "help", None) or "") + _extras(p)
        if _is_argument(p):
            args.append((_argument_usage(p).strip("[]"), help_text))
        else:
            names = ", ".join(sorted(p.opts, key=len) + list(p.secondary_opts))
            mv = _metavar(p)
            opts.append((f"{names} {mv}".strip(), help_text))
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args)
    if opts:
        with formatter.section("Options"):
            formatter.write_dl(opts)


class PlainCommand(TyperCommand):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        pieces = ["[OPTIONS]"] + [_argument_usage(p) for p in self.get_params(ctx) if _is_argument(p)]
        formatter.write_usage(ctx.command_path, " ".join(pieces))
        _write_doc(self.help, formatter)
        _write_params(self, ctx, formatter)


class PlainGroup(TyperGroup):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] COMMAND [ARGS]...")
        _write_doc(self.help, formatter)
        _write_params(self, ctx, formatter)
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=70)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
