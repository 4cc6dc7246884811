"""Instruction semantics: the registry from mnemonic to handler factory, and what factories share.

A factory is called once per decoded instruction with the `Inst` (listing.py) and
the program's `DecodeContext`, and returns a handler ``fn(wave) -> None`` that
executes the instruction on one wave. Factories do all parsing (operands,
modifiers, constants) so handlers only touch registers and memory. Branch
handlers set ``wave.pc`` (an instruction index); others leave it (the executor
has already advanced it).

Each mnemonic is registered with a class used for the per-launch instruction
counts: salu, smem, valu, trans (VALU transcendental), vmem_load, vmem_store,
vmem_atomic, lds, matrix, branch, barrier, other (waits, nops, hints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..listing import Inst
from ..state import Wave

Handler = Callable[[Wave], None]
Factory = Callable[[Inst, "DecodeContext"], Handler]

CLASSES = ("salu", "smem", "valu", "trans", "vmem_load", "vmem_store", "vmem_atomic", "lds", "matrix",
           "branch", "barrier", "other")

OPS: dict[str, tuple[Factory, str]] = {}


def register(*names: str, cls: str) -> Callable[[Factory], Factory]:
    assert cls in CLASSES, cls

    def deco(factory: Factory) -> Factory:
        for name in names:
            if name in OPS:
                raise ValueError(f"{name} registered twice")
            OPS[name] = (factory, cls)
        return factory

    return deco


_SUFFIXES = ("_e32", "_e64", "_dpp", "_sdwa")


def base_mnemonic(mnemonic: str) -> str:
    for suf in _SUFFIXES:
        if mnemonic.endswith(suf):
            return mnemonic[: -len(suf)]
    return mnemonic


def lookup(mnemonic: str) -> tuple[Factory, str] | None:
    return OPS.get(mnemonic) or OPS.get(base_mnemonic(mnemonic))


@dataclass
class DecodeContext:
    arch: str                      # "gfx942"
    gfx: int                       # 9, 11 or 12
    wave_size: int                 # 64 or 32
    fp8: str | None                # "fnuz", "ocp" or None
    index_of: Any                  # instruction address -> index (`listing.AddressIndex`: [addr], get)
    extra: dict[str, Any] = field(default_factory=dict)
    cohort: bool = False           # handlers for lockstep cohorts (any number of waves) rather than one wave

    def branch_target(self, inst: Inst, simm16: int) -> int:
        """Index of PC + 4 + 4 * simm16 (the immediate is printed unsigned)."""
        off = simm16 - 0x10000 if simm16 >= 0x8000 else simm16
        addr = inst.addr + 4 + 4 * off
        try:
            return self.index_of[addr]
        except KeyError:
            raise KeyError(f"branch at 0x{inst.addr:x} targets 0x{addr:x}, which is not an instruction") from None


# Lane constants of cohort handlers, shared by value: the same few immediates (0, 1, 1.0, masks) appear
# in thousands of decoded instructions, each of which held its own copy of up to 4096 lanes.
_LANE_CONSTANTS: dict[tuple, np.ndarray] = {}
_LANE_CONSTANTS_LIMIT = 4096          # entries; emptied past it (handlers keep the arrays they hold)


def _lane_array(period: np.ndarray, n: int) -> np.ndarray:
    """A read-only array repeating ``period`` along its last axis to ``n`` lanes (shared by value)."""
    key = (period.dtype.str, period.shape, period.tobytes(), n)
    arr = _LANE_CONSTANTS.get(key)
    if arr is None:
        if period.shape[-1] == 1:
            arr = np.repeat(period, n, axis=-1)
        else:
            arr = np.tile(period, (1,) * (period.ndim - 1) + (-(-n // period.shape[-1]),))[..., :n]
        arr.flags.writeable = False
        if len(_LANE_CONSTANTS) >= _LANE_CONSTANTS_LIMIT:
            _LANE_CONSTANTS.clear()
        _LANE_CONSTANTS[key] = arr
    return arr


def lane_constant(period: np.ndarray, ctx: DecodeContext) -> Callable[[Any], np.ndarray]:
    """A reader of a read-only per-lane array repeating ``period`` along its last axis (one value,
    or one per lane of a wave). For one wave it is made once; a cohort handler serves cohorts of
    any size, so it reads ``w.n`` lanes of a copy sized to the next power of two, shared with every
    handler of the same constant."""
    if not ctx.cohort:
        one = _lane_array(period, ctx.wave_size)
        return lambda w: one
    grown = [_lane_array(period, 0)]

    def read(w: Any) -> np.ndarray:
        arr = grown[0]
        if arr.shape[-1] < w.n:
            arr = grown[0] = _lane_array(period, 1 << (w.n - 1).bit_length())
        return arr[..., :w.n]
    return read
