"""hipskinny's ops as torch custom ops: ``torch.ops.hipskinny.<op>`` (and ``<op>_out``).

Each op module declares its ops in ``TORCH_OPS`` (a schema, the Python function behind it and the
output's shape for torch's fake tensors); this module registers them with ``torch.library`` once
torch is importable, so ``torch.compile(fullgraph=True)`` traces through them and torch's fake
tensors infer shapes without running a kernel. ``out=`` variants are separate ops whose schema
marks ``out`` as mutated (``Tensor(a!) out``) and that return nothing, which torch's
functionalization handles without a graph break.

Importing hipskinny never imports torch. Registration happens when torch is imported: at once
if torch was imported before hipskinny, else right after ``import torch`` completes (a one-shot
import hook); `register` does it explicitly.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Op modules whose TORCH_OPS are registered (a new family adds its module name here).
OP_MODULES: tuple[str, ...] = ("gemv", "skinny_gemm", "fp8_linear", "matmul_4bit")


@dataclass(frozen=True)
class TorchOp:
    """One custom op: ``schema`` in torch's schema language (its name is the op's name), ``impl`` the
    Python function torch calls, ``out_shape(*shapes)`` the result shape from the positional
    arguments (tensors by their shapes, other values as they are; None for ops that return
    nothing: ``out=`` variants)."""

    schema: str
    impl: Callable[..., Any]
    out_shape: Callable[..., tuple[int, ...]] | None = None
    out_dtype: Callable[..., Any] | None = None     # (x, *tensors, **options) -> torch dtype; None: x's

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


def declare(name: str, args: str, impl: Callable[..., Any], out_shape: Callable[..., tuple[int, ...]],
            options: str = "", out_dtype: Callable[..., Any] | None = None) -> tuple[TorchOp, TorchOp]:
    """The functional op ``name(args[, *, options]) -> Tensor`` and its ``name_out`` twin writing into
    ``Tensor(a!) out``; ``impl(*args, out=None, **options)`` is the public Python function."""
    kw = f", *, {options}" if options else ""

    def into(*a: Any, **k: Any) -> None:
        *inputs, out = a
        impl(*inputs, out=out, **k)

    return (TorchOp(f"{name}({args}{kw}) -> Tensor", impl, out_shape, out_dtype),
            TorchOp(f"{name}_out({args.replace('=None', '')}, Tensor(a!) out{kw}) -> ()", into))


def ops() -> list[TorchOp]:
    found: list[TorchOp] = []
    for module in OP_MODULES:
        found += importlib.import_module(f"{__package__}.ops.{module}").TORCH_OPS
    return found


_lock = threading.RLock()
_library: Any = None


def registered() -> bool:
    return _library is not None


def register() -> None:
    """Register every op with torch (idempotent, thread-safe). Imports torch."""
    global _library
    if _library is not None:
        return
    # torch first, outside the lock: while another thread is importing torch it holds torch's module
    # lock and then (in the import hook) takes ours, so waiting for torch while holding ours deadlocks.
    import torch

    with _lock:
        if _library is not None:
            return
        lib = torch.library.Library("hipskinny", "DEF")
        try:
            for op in ops():
                lib.define(op.schema)
                # Any device: the Python function itself says what it supports.
                lib.impl(op.name, op.impl, "CompositeExplicitAutograd")
                torch.library.register_fake(f"hipskinny::{op.name}", _fake(op), lib=lib)
        except BaseException:
            lib._destroy()       # all or nothing: a later register() starts from a clean namespace
            raise
        _library = lib


def _fake(op: TorchOp) -> Callable[..., Any]:
    shape_of = op.out_shape
    if shape_of is None:
        return lambda *a, **k: None

    def fake(x: Any, *rest: Any, **kwargs: Any) -> Any:
        shapes: Sequence[Any] = [tuple(t.shape) if hasattr(t, "shape") else t for t in (x, *rest)]
        dtype = op.out_dtype(x, *rest, **kwargs) if op.out_dtype is not None else x.dtype
        return x.new_empty(shape_of(*shapes), dtype=dtype)

    return fake


class _RegisterAfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch`` is about to be imported it wraps torch's own loader so
    that `register` runs once ``import torch`` has completed, then steps out of the import path."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec("torch")   # the rest of sys.meta_path, without us
        except Exception:  # noqa: BLE001 - let the import system find (or not find) torch itself
            return None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _LoaderThenRegister(spec.loader)
        return spec


class _LoaderThenRegister(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            register()
        except Exception as e:  # noqa: BLE001 - never break `import torch` over our ops
            log.warning("hipskinny: could not register torch.ops.hipskinny: %s", e)

    def __getattr__(self, name: str) -> Any:   # everything else (is_package, get_code, ...) as torch's loader
        return getattr(self.loader, name)


def install() -> None:
    """Register now if torch is imported, else once it is (called by ``import hipskinny``)."""
    if "torch" in sys.modules:
        try:
            register()
        except Exception as e:  # noqa: BLE001 - a broken torch must not break importing hipskinny
            log.warning("hipskinny: could not register torch.ops.hipskinny: %s", e)
        return
    with _lock:
        if not any(isinstance(f, _RegisterAfterTorch) for f in sys.meta_path):
            sys.meta_path.insert(0, _RegisterAfterTorch())
