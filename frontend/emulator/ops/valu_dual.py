"""VOPD dual-issue pairs (gfx11/gfx12): ``v_dual_X ... :: v_dual_Y ...``.

Each half has the semantics of the VOP2 op of the same name. Both halves read all
their sources before either writes (isa_notes §5.0): the compiler relies on it in
both directions, so neither X-then-Y nor Y-then-X sequential execution is safe.
The listing hands us the pair as one instruction whose mnemonic is X's; the text
is split on ``::`` here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..listing import Inst
from ..state import Wave
from .core import DecodeContext, Handler, register
from .valu_common import fail, split_pair
from .valu_vop import build_by_name

# ops that may appear in a VOPD half (X and Y opcode tables of gfx11/gfx12)
VOPD_OPS = ("fmac_f32", "fmaak_f32", "fmamk_f32", "mul_f32", "add_f32", "sub_f32", "subrev_f32",
            "mul_dx9_zero_f32", "mov_b32", "cndmask_b32", "max_f32", "min_f32", "max_num_f32", "min_num_f32",
            "dot2acc_f32_f16", "dot2acc_f32_bf16", "add_nc_u32", "lshlrev_b32", "and_b32")


def _factory(inst: Inst, ctx: DecodeContext) -> Handler:
    if ctx.gfx < 11:
        raise fail(inst, "VOPD exists on gfx11+ only")
    halves = []
    dsts = []
    for mnemonic, operands, modifiers in split_pair(inst.text):
        if not mnemonic.startswith("v_dual_") or mnemonic[len("v_dual_"):] not in VOPD_OPS:
            raise fail(inst, f"{mnemonic} is not a VOPD op")
        name = "v_" + mnemonic[len("v_dual_"):]
        compute, write, _ = build_by_name(name, operands, modifiers, ctx, inst, enc="vopd")
        halves.append((compute, write))
        dsts.append(operands[0] if operands else "")
    if dsts[0] == dsts[1]:
        raise fail(inst, "both VOPD halves write the same register")
    (cx, wx), (cy, wy) = halves

    def h(w: Wave) -> None:
        ox, mx = cx(w)
        oy, my = cy(w)
        # results may be views of source registers (v_dual_mov_b32): copy those before any write
        ox, oy = _detached(ox), _detached(oy)
        wx(w, ox, mx)
        wy(w, oy, my)
    return h


def _detached(x: Any) -> Any:
    """`x`, or a copy when it may share memory with something (a view has a base; a new result has none)."""
    if type(x) is np.ndarray and x.base is None:
        return x
    return np.array(x, copy=True)


register(*(f"v_dual_{op}" for op in VOPD_OPS), cls="valu")(_factory)
