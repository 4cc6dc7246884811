"""Vector ALU semantics (VOP1/VOP2/VOP3/VOP3P/VOPC/VOPD, DPP, SDWA, true16).

The work is split by family; importing this module registers all of them:

* valu_vop    – the generic decoder for lane-wise ops (operand layouts, encodings)
* valu_arith  – f32/f16/f64 arithmetic, integer and bit ops, compares, division, transcendentals
* valu_cvt    – conversions incl. bf16 and target-dependent fp8 (FNUZ / OCP)
* valu_pk     – packed v_pk_*, v_fma_mix*, dot products
* valu_lane   – readlane/readfirstlane/writelane, permlane*, mbcnt, gfx12 pseudo-scalar ops
* valu_dual   – VOPD pairs
* valu_common – readers/writers/DPP/SDWA helpers shared by all of them (and usable by other modules)
"""

from __future__ import annotations

from . import valu_arith, valu_cvt, valu_dual, valu_lane, valu_pk  # noqa: F401
