"""The structure issue 25 item 2 asks for, checked on the source (ast, no import):

- a warehouse location is normalised in one place: `tracedb.storage` (`location`, reached
  through `open_storage`), and whether it is a folder or object storage is decided there
  only: no other module asks `is_remote` / `.remote`; they call the storage's methods;
- `tracedb.Warehouse` opens its storage once, in its constructor, and hands that down: no
  method passes `self.path` on (which would be normalised and opened again);
- no import circle among tracedb's modules (imports inside functions count too).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "tracedb"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_only_storage_normalises_a_location_or_tells_local_from_remote():
    bad = []
    for name, path in _modules().items():
        if name == "tracedb.storage":
            continue
        for node in ast.walk(_tree(path)):
            where = f"{path.relative_to(PKG.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr in ("remote", "is_remote"):
                bad.append(f"{where}: .{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr == "location" and isinstance(node.value, ast.Name) \
                    and node.value.id == "storage":
                bad.append(f"{where}: storage.location")
            elif isinstance(node, ast.ImportFrom) and node.module == "tracedb.storage":
                bad += [f"{where}: imports {a.name}" for a in node.names if a.name in ("location", "is_remote")]
    assert bad == []


def test_the_warehouse_hands_its_storage_down():
    cls = next(n for n in _tree(PKG / "api.py").body if isinstance(n, ast.ClassDef) and n.name == "Warehouse")
    passed_on = []
    for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
        if method.name in ("__repr__", "path"):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                    and node.value.id == "self":
                passed_on.append(f"Warehouse.{method.name}:{node.lineno}")
    assert passed_on == []
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    opened = [n for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr == "open_storage"]
    assert len(opened) == 1


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports (anywhere in the file); an import of a
    package's face (`__init__`) names the submodule it reaches where there is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    out.add(f"{base}.{a.name}")
                elif base in modules:
                    out.add(base)
    out.discard(name)
    return out


def test_no_import_circle():
    modules = _modules()
    faces = {n for n, p in modules.items() if p.name == "__init__.py"}
    graph = {n: _imports(n, p, modules) - faces for n, p in modules.items() if n not in faces}
    # Tarjan's strongly connected components: a component of more than one module is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []
