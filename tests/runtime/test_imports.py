"""The package's module graph: built statically from every import in frontend/ (function-level ones
included), it has no cycle, and no module imports another's private names. The format modules are
leaves the ops import; the public namespaces re-export the ops on them. One import identity: the
package, build_scripts and the test helpers in one process load each module of the package once,
under the name `hipskinny` (issue 55)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import paths
import pytest

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
    for fmt in ("fp8", "bnb", "w4a16", "mla"):
        assert not any(m.startswith("hipskinny.ops") for m in edges[f"hipskinny.formats.{fmt}"]), fmt
    assert not any(m.startswith("hipskinny.ops") for m in edges["hipskinny.fp8"])
    assert hipskinny.bnb.matmul_4bit is hipskinny.matmul_4bit
    assert hipskinny.w4a16.linear is hipskinny.w4a16_linear
    assert hipskinny.mla.sparse_decode is hipskinny.mla.sparse_mla is hipskinny.sparse_mla
    assert hipskinny.moe.fused_moe is hipskinny.fused_moe and hipskinny.moe.topk_softmax is hipskinny.topk_softmax
    from hipskinny.formats import bnb, fp8
    assert hipskinny.bnb.quantize_4bit is bnb.quantize_4bit and "matmul_4bit" in hipskinny.bnb.__all__
    assert hipskinny.fp8.quantize is fp8.quantize and hipskinny.fp8.__all__ == fp8.__all__


def test_no_op_module_imports_another():
    """Shared code lives in the shared modules (``ops/_*.py``): an op module imports none of the others."""
    edges, _ = _graph()
    ops = {m for m in edges if m.startswith("hipskinny.ops.") and not m.rsplit(".", 1)[1].startswith("_")}
    assert len(ops) >= 8
    assert {m: sorted(edges[m] & ops) for m in ops if edges[m] & ops} == {}


# Imports `first`, then the rest of hipskinny and build_scripts, then the test helpers, and reports
# what would be a second copy of the package: a file loaded as two modules, a `frontend` module, the
# torch-registration import hooks (`hipskinny.torch_ops._RegisterAfterTorch`, one per copy) and
# whether build_scripts' arch table and code-object error are the package's.
_IDENTITY_SCRIPT = """
import importlib, json, os, sys
from pathlib import Path

for name in [FIRST, *[n for n in ("hipskinny", "build_scripts") if n != FIRST]]:
    importlib.import_module(name)
for name in ("cli", "compiler", "manifest", "toolchain", "cache"):
    importlib.import_module("build_scripts." + name)
hooks = [f"{type(f).__module__}.{type(f).__qualname__}" for f in sys.meta_path
         if type(f).__name__ == "_RegisterAfterTorch"]
torch_before_helpers = "torch" in sys.modules
import paths, compilers, emulated, dlpack_helpers, fakehip, conftest_fakehip  # the test helpers
import hipskinny, hipskinny.arch, build_scripts.cli, build_scripts.compiler

mine = [Path(os.path.realpath(p)) for p in (REPO, os.path.dirname(hipskinny.__file__))]
names = {}
for name, module in list(sys.modules.items()):
    f = getattr(module, "__file__", None)
    if f and any(Path(os.path.realpath(f)).is_relative_to(d) for d in mine):
        names.setdefault(os.path.realpath(f), []).append(name)
print(json.dumps({
    "twice": {f: sorted(n) for f, n in names.items() if len(n) > 1},
    "frontend": sorted(n for n in sys.modules if n == "frontend" or n.startswith("frontend.")),
    "hooks": hooks, "torch_before_helpers": torch_before_helpers,
    "one_arch_table": build_scripts.cli.ARCHS is hipskinny.arch.ARCHS,
    "one_code_object_error": build_scripts.compiler.CodeObjectError is hipskinny.CodeObjectError,
}))
"""


@pytest.mark.parametrize("first", ["hipskinny", "build_scripts"])
def test_no_package_module_is_loaded_under_two_names_with_build_scripts_and_test_helpers(first):
    """`python -m build_scripts` runs from the repository root and the tests import build_scripts next to
    the package: whichever comes first, every module of the package is loaded once, as `hipskinny.*`
    (never `frontend.*`), so there is one arch table, one `CodeObjectError` class (an
    ``except hipskinny.CodeObjectError`` catches build_scripts' errors) and one torch-registration hook."""
    script = f"FIRST = {first!r}\nREPO = {str(paths.REPO)!r}\n" + textwrap.dedent(_IDENTITY_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(paths.folders())
    done = subprocess.run([sys.executable, "-c", script], cwd=paths.REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["twice"] == {}, "files loaded as two modules"
    assert seen["frontend"] == []
    assert seen["one_arch_table"] and seen["one_code_object_error"]
    assert not seen["torch_before_helpers"]        # torch's import would take the hook out of sys.meta_path
    assert seen["hooks"] == ["hipskinny.torch_ops._RegisterAfterTorch"]
