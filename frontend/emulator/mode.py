"""The float MODE a wave starts with, taken from its kernel descriptor (COMPUTE_PGM_RSRC1).

The emulator implements the MODE clang gives HIP kernels: round to nearest even and
denormals kept for f32 and f16/f64, IEEE = 1 and DX10_CLAMP = 1 where those bits exist
(gfx9, gfx11). FP16_OVFL is honoured either way. A descriptor asking for anything else is
refused at launch rather than run with the wrong arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codeobject import Kernel
from ..errors import EmulatorError
from .descriptor import descriptor_of

_ROUND = {0: "round to nearest even", 1: "round toward +inf", 2: "round toward -inf", 3: "round toward zero"}
_DENORM = {0: "flush source and result denormals", 1: "flush result denormals", 2: "flush source denormals",
           3: "keep denormals"}


@dataclass(frozen=True)
class FloatMode:
    """The MODE bits that change how the emulator decodes instructions."""

    fp16_ovfl: bool = False      # overflowing f16 (and fp8) results of finite sources saturate to +-max


def float_mode(kernel: Kernel, arch: str, gfx: int) -> FloatMode:
    """The MODE `kernel` runs with; EmulatorError if the descriptor asks for one not implemented."""
    kd = descriptor_of(kernel, arch)
    fields = [("FLOAT_ROUND_MODE_32", kd.float_round_mode_32, 0, _ROUND),
              ("FLOAT_ROUND_MODE_16_64", kd.float_round_mode_16_64, 0, _ROUND),
              ("FLOAT_DENORM_MODE_32", kd.float_denorm_mode_32, 3, _DENORM),
              ("FLOAT_DENORM_MODE_16_64", kd.float_denorm_mode_16_64, 3, _DENORM)]
    if gfx < 12:                 # gfx12 reuses these bits for other purposes
        onoff = {0: "off", 1: "on"}
        fields += [("ENABLE_IEEE_MODE", int(kd.enable_ieee_mode), 1, onoff),
                   ("ENABLE_DX10_CLAMP", int(kd.enable_dx10_clamp), 1, onoff)]
    for field, value, supported, names in fields:
        if value != supported:
            raise EmulatorError(f"kernel {kernel.name} ({arch}): its descriptor sets {field} = {value} "
                                f"({names[value]}); the emulator implements only {field} = {supported} "
                                f"({names[supported]}), as clang sets it for HIP kernels")
    return FloatMode(fp16_ovfl=kd.fp16_overflow)
