"""hipskinny's ops as torch custom ops: ``torch.ops.hipskinny.<op>`` (and ``<op>_out``).

Each op module declares its ops in its ``EXPORTS.torch_ops`` (`declare`: a schema, the Python function behind
it, the output's shape for torch's fake tensors, the op's checks, its autograd formula); this module
registers them with ``torch.library`` once torch is importable, so ``torch.compile(fullgraph=True)``
traces through them and torch's fake tensors infer shapes without running a kernel. ``out=``
variants are separate ops whose schema marks each ``out`` as mutated (``Tensor(a!) out``) and that
return nothing, which torch's functionalization handles without a graph break. Every tensor an
autograd formula may see is a positional argument (torch's autograd looks at those only).

Fake implementations validate as the op does: `fake_operands` views the fake (or meta) tensors as
the operand layer views real ones (shapes, strides, dtypes, device; their example sizes, so no guard
is added on symbolic shapes), and the op's own bind-time checks run on them up to the first step
that needs the device; a broken rule fails through ``torch._check_with`` with the op's own exception
type and message.

Importing hipskinny never imports torch. Registration happens when torch is imported: at once
if torch was imported before hipskinny, else right after ``import torch`` completes (a one-shot
import hook); `register` does it explicitly.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import operands, tensors
from .errors import HipSkinnyError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class TorchOp:
    """One custom op: ``schema`` in torch's schema language (its name is the op's name), ``impl`` the
    Python function torch calls, ``out_shape(*shapes)`` the result shape from the positional
    arguments (tensors by their shapes, other values as they are; a tuple of shapes for ops with
    several results; None for ops that return nothing: ``out=`` variants). ``check(*args, **options)``
    runs the op's own validation on views of fake tensors (`fake_operands`); ``autograd`` is the
    ``(setup_context, backward)`` pair registered with ``torch.library.register_autograd``."""

    schema: str
    impl: Callable[..., Any]
    out_shape: Callable[..., Any] | None = None
    out_dtype: Callable[..., Any] | None = None     # (x, *tensors, **options) -> torch dtype(s); None: x's
    check: Callable[..., Any] | None = None
    autograd: tuple[Callable[..., Any], Callable[..., Any]] | None = None
    results: int = 1

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


def declare(name: str, args: str, impl: Callable[..., Any], out_shape: Callable[..., Any], options: str = "",
            out_dtype: Callable[..., Any] | None = None, *, check: Callable[..., Any] | None = None,
            autograd: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
            outs: tuple[str, ...] = ("out",)) -> tuple[TorchOp, TorchOp]:
    """The functional op ``name(args[, *, options]) -> Tensor`` and its ``name_out`` twin writing into
    ``Tensor(a!) out``; ``impl(*args, out=None, **options)`` is the public Python function (without
    its autograd routing). ``outs``: the names of several results' ``out`` tensors: the functional op
    then returns ``(Tensor, ...)`` and the twin mutates each, passed to ``impl`` as ``out=(...)``.
    ``check`` (the op's validation for fake tensors) takes ``impl``'s arguments; ``autograd``: see
    `TorchOp`."""
    kw = f", *, {options}" if options else ""
    mutated = ", ".join(f"Tensor({chr(ord('a') + i)}!) {o}" for i, o in enumerate(outs))
    returns = "Tensor" if len(outs) == 1 else "(" + ", ".join(["Tensor"] * len(outs)) + ")"

    def with_out(fn: Callable[..., Any]) -> Callable[..., None]:
        def into(*a: Any, **k: Any) -> None:
            inputs, given = a[:-len(outs)], a[-len(outs):]
            fn(*inputs, out=given[0] if len(outs) == 1 else tuple(given), **k)

        return into

    return (TorchOp(f"{name}({args}{kw}) -> {returns}", impl, out_shape, out_dtype, check, autograd, len(outs)),
            TorchOp(f"{name}_out({re.sub('=[^,]*', '', args)}, {mutated}{kw}) -> ()", with_out(impl),
                    check=None if check is None else with_out(check)))


def torch_dtype(name: str) -> Any:
    """``torch.<name>``, importing torch only when called (an op's ``out_dtype``)."""
    import torch

    return getattr(torch, name)


def ops() -> list[TorchOp]:
    from . import ops as op_modules

    found = [op for name in op_modules.op_names() for op in op_modules.exports(name).torch_ops]
    # backward's quantized-weight half (grad_x = grad_y @ W), opaque to torch.compile
    return found + importlib.import_module(f"{__package__}.autograd")._torch_ops()


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
                if op.autograd is not None:
                    setup, backward = op.autograd
                    torch.library.register_autograd(f"hipskinny::{op.name}", backward, setup_context=setup, lib=lib)
        except BaseException:
            lib._destroy()       # all or nothing: a later register() starts from a clean namespace
            raise
        _library = lib


def _fake(op: TorchOp) -> Callable[..., Any]:
    shape_of = op.out_shape

    def fake(x: Any, *rest: Any, **kwargs: Any) -> Any:
        if op.check is not None:
            validate(op.check, (x, *rest), kwargs)
        if shape_of is None:
            return None
        shapes: Sequence[Any] = [tuple(t.shape) if hasattr(t, "shape") else t for t in (x, *rest)]
        dtype = op.out_dtype(x, *rest, **kwargs) if op.out_dtype is not None else x.dtype
        if op.results == 1:
            return x.new_empty(shape_of(*shapes), dtype=dtype)
        return tuple(x.new_empty(s, dtype=d) for s, d in zip(shape_of(*shapes), dtype, strict=True))

    return fake


# ----------------------------------------------------------------------------------------------
# Fake tensors validated by the ops' own rules


class _Validated(Exception):
    """Raised where a bound call first needs the device: every rule before that point held."""


class _FakeOperands(operands.Operands):
    """A call's operands seen through fake (or meta) tensors: the op's bind-time checks run on them as
    on real operands and stop at the first step that needs the device (planning, launching)."""

    @property
    def device(self) -> Any:
        raise _Validated


def fake_operands(op: str, names: Sequence[str], objs: Sequence[Any], outputs: int = 1) -> operands.Operands:
    """`operands.gather` for fake tensors: views holding each tensor's shape, strides (their example
    sizes: checking them adds no guard on symbolic shapes), dtype and device, no address."""
    seen = [None if obj is None else _fake_view(obj, name) for name, obj in zip(names, objs, strict=True)]
    return _FakeOperands(op, dict(zip(names[:-outputs], seen[:-outputs], strict=True)), seen[-outputs],
                         seen[len(seen) - outputs + 1:])


def validate(check: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Run an op's ``check`` on fake tensors: a rule it breaks fails through ``torch._check_with``
    with the op's own exception type and message (what the eager op raises for the same inputs)."""
    import torch

    try:
        check(*args, **kwargs)
    except _Validated:
        return
    except HipSkinnyError as e:
        kind, message = type(e), str(e)
        torch._check_with(kind, False, lambda: message)


def _fake_view(t: Any, name: str) -> tensors.TensorView:
    import torch

    dev = t.device
    if dev.type == "cuda":
        device_type = tensors.DL_ROCM if getattr(torch.version, "hip", None) else tensors.DL_CUDA
        device_id, on_host = dev.index or 0, False
    else:                                    # cpu, meta: host rules
        device_type, device_id, on_host = tensors.DL_CPU, 0, True
    dtype = _numpy_dtypes().get(str(t.dtype).removeprefix("torch."), np.dtype(object))
    return tensors.TensorView(kind="torch", obj=None, on_host=on_host, device_type=device_type,
                              device_id=int(device_id), ptr=0, dtype=dtype,
                              shape=tuple(_hint(d) for d in t.shape), strides=tuple(_hint(d) for d in t.stride()),
                              itemsize=int(t.element_size()), name=name)


def _hint(d: Any) -> int:
    """A size's example value, without guarding on it; a data-dependent size has none to check."""
    if isinstance(d, int):
        return d
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw, has_guarding_hint

    if not has_guarding_hint(d):
        raise _Validated
    return int(guarding_hint_or_throw(d))


_NUMPY_DTYPES: dict[str, np.dtype] = {}


def _numpy_dtypes() -> dict[str, np.dtype]:
    if not _NUMPY_DTYPES:
        _NUMPY_DTYPES.update({dt.name: dt for dt in tensors.supported_dtypes()})
        _NUMPY_DTYPES["bool"] = np.dtype(np.bool_)
    return _NUMPY_DTYPES


class _RegisterAfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch`` is about to be imported it wraps torch's own loader so
    that `register` runs once ``import torch`` has completed, then steps out of the import path. It
    stays until torch is really imported: libraries that only ask whether torch is there
    (``importlib.util.find_spec("torch")``, as transformers does) find torch's spec, wrapped, and
    import nothing."""

    _finding = threading.local()           # a lookup of this thread is asking the rest of sys.meta_path

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or getattr(self._finding, "active", False):
            return None
        self._finding.active = True
        try:
            spec = importlib.util.find_spec("torch")   # the rest of sys.meta_path: this finder steps aside
        except Exception:  # noqa: BLE001 - let the import system find (or not find) torch itself
            return None
        finally:
            self._finding.active = False
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
        with _lock:           # torch is imported: the hook has done its work
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RegisterAfterTorch)]
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
