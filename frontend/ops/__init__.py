"""One module per kernel family: validation, variant choice, launch, numpy reference."""

from __future__ import annotations


def forget_plans() -> None:
    """Clear every op module's plan and bound-call caches: for callers that change a planner
    constant (the benchmarks' sweeps, tests), whose cached plans hold choices made before."""
    import importlib
    import pkgutil

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
