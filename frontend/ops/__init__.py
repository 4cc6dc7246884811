"""One module per kernel family: validation, variant choice, launch, numpy reference.

A family is registered by existing: ``ops/<name>.py`` publishes ``<name>`` (the op) and
``<name>_reference`` (its numpy reference) as ``hipskinny.<name>``, and declares the rest once, in
its module-level ``EXPORTS`` (`Exports`). The package namespace, torch's custom ops and the
benchmarks discover the modules here (`op_names`, `exports`); nothing keeps a list of them.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

# The performance report's model: a weight matrix [M, K] streamed against N tokens (benchmarks/report.py).
GEMM_REPORT = "gemm"


@dataclass(frozen=True)
class Exports:
    """What an op module declares besides its two public functions.

    ``torch_ops``: its ``torch.ops.hipskinny.*`` ops (`hipskinny.torch_ops.declare`, functional and
    ``out=`` twins). ``code_objects``: the ``kernels/<name>.hip`` sources it launches. ``report``:
    `GEMM_REPORT` when the performance report measures it as a GEMM-shaped op, otherwise why it does
    not (and which benchmark does), which the report prints."""

    torch_ops: tuple[Any, ...]
    code_objects: tuple[str, ...]
    report: str = GEMM_REPORT


def op_names() -> list[str]:
    """The op modules' names, sorted (a directory listing: no module is imported)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def op_module(name: str) -> Any:
    if name not in op_names():
        raise AttributeError(f"hipskinny has no op {name!r}; its ops: {', '.join(op_names())}")
    return importlib.import_module(f"{__name__}.{name}")


def exports(name: str) -> Exports:
    """The `Exports` of op module ``name``."""
    return op_module(name).EXPORTS


def public_names() -> list[str]:
    """Every name the op modules publish at ``hipskinny.*``: ``<op>`` and ``<op>_reference``."""
    return [n for op in op_names() for n in (op, f"{op}_reference")]


def forget_plans() -> None:
    """Clear every op module's plan and bound-call caches: for callers that change a planner
    constant (the benchmarks' sweeps, tests), whose cached plans hold choices made before."""
    from .. import operands
    from ..launch import PlanCache

    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(mod).values():
            # module-level caches, and those an op's object keeps (the quantized ops' `plans`)
            for cache in (value, *getattr(value, "__dict__", {}).values()):
                if isinstance(cache, (PlanCache, operands.CallCache)):
                    cache.clear()
    operands.forget_bound_calls()
