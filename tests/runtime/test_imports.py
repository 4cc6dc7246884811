"""The package's module graph: built statically from every import in frontend/ (function-level ones
included), it has no cycle, and no module imports another's private names. The format modules are
leaves the ops import; the public namespaces re-export the ops on them."""

from __future__ import annotations

import ast
from pathlib import Path

import paths

import hipskinny

FRONTEND = paths.REPO / "frontend"


def _modules() -> dict[str, Path]:
    out = {}
    for p in FRONTEND.rglob("*.py"):
        parts = list(p.relative_to(FRONTEND).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["hipskinny", *parts])] = p
    return out


def _graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """module -> the package modules it imports (anywhere in it); and (importer, module, name) of each
    private name imported from another module."""
    mods = _modules()
    edges: dict[str, set[str]] = {}
    private = []
    for name, p in mods.items():
        package = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in mods:          # a submodule
                        out.add(f"{target}.{alias.name}")
                    elif target in mods:
                        out.add(target)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append((name, target, alias.name))
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in mods)
        out.discard(name)
        edges[name] = out
    return edges, private


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_module_graph_has_no_cycle():
    edges, _ = _graph()
    assert sum(map(len, edges.values())) > 100          # the graph was read
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_private_name_is_imported_across_modules():
    assert _graph()[1] == []


def test_formats_are_leaves_and_the_namespaces_carry_their_ops():
    edges, _ = _graph()
    for fmt in ("bnb", "w4a16", "mla"):
        assert not any(m.startswith("hipskinny.ops") for m in edges[f"hipskinny.formats.{fmt}"]), fmt
    assert not any(m.startswith("hipskinny.ops") for m in edges["hipskinny.fp8"])
    assert hipskinny.bnb.matmul_4bit is hipskinny.matmul_4bit
    assert hipskinny.w4a16.linear is hipskinny.w4a16_linear
    from hipskinny.ops.sparse_mla import sparse_decode
    assert hipskinny.mla.sparse_decode is sparse_decode
    from hipskinny.formats import bnb
    assert hipskinny.bnb.quantize_4bit is bnb.quantize_4bit and "matmul_4bit" in hipskinny.bnb.__all__
