"""VALU ops that look at other lanes or at the lane id: v_readlane/v_readfirstlane/
v_writelane, v_permlane16/x16/64, v_mbcnt, and gfx12's pseudo-scalar
transcendentals (a VALU op with SGPR source and destination)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import EmulatorError
from ..listing import Inst
from ..state import NULL, Operand, Wave, const_bits, parse_operand
from .core import DecodeContext, Handler, register
from .valu_arith import popcount, transcendental
from .valu_common import apply_fmods, fail, float_omod_clamp, parse_mods
from .valu_vop import Spec, vop

U32, U64 = np.uint32, np.uint64


def _scalar_reader(op: Operand, inst: Inst) -> Any:
    """An SGPR / constant read as one Python int (lane selects, permlane selectors)."""
    if op.kind == "const":
        v = const_bits(op, 32)
        return lambda w: v
    if op.kind == "s" and op.count == 1:
        i = op.index
        return lambda w: w.sget(i)
    raise fail(inst, f"operand {op.text} must be an SGPR or a constant")


def _vgpr(op: Operand, inst: Inst) -> int:
    if op.kind != "v" or op.count != 1 or op.half is not None:
        raise fail(inst, f"operand {op.text} must be one 32-bit VGPR")
    return op.index


def _sgpr_dst(op: Operand, inst: Inst) -> int:
    if op.kind != "s" or op.count != 1:
        raise fail(inst, f"destination {op.text} must be one SGPR")
    return op.index


def _plain(inst: Inst, n: int) -> list[Operand]:
    if inst.modifiers:
        raise fail(inst, f"modifiers {inst.modifiers} are not implemented")
    if len(inst.operands) != n:
        raise fail(inst, f"expected {n} operands")
    return [parse_operand(t) for t in inst.operands]


@register("v_readlane_b32", cls="valu")
def _readlane(inst: Inst, ctx: DecodeContext) -> Handler:
    # lane from an SGPR or constant, modulo the wave size; EXEC is ignored
    d, s, lane = _plain(inst, 3)
    di, si, get_lane = _sgpr_dst(d, inst), _vgpr(s, inst), _scalar_reader(lane, inst)
    n = ctx.wave_size

    def h(w: Wave) -> None:
        w.sset(di, int(w.v[si][get_lane(w) % n]))
    return h


@register("v_readfirstlane_b32", cls="valu")
def _readfirstlane(inst: Inst, ctx: DecodeContext) -> Handler:
    # lowest active lane; lane 0 when EXEC is 0
    d, s = _plain(inst, 2)
    di = _sgpr_dst(d, inst)
    if s.kind == "s" or s.kind == "const":        # legal: a uniform source
        get = _scalar_reader(s, inst)
        return lambda w: w.sset(di, get(w))
    si = _vgpr(s, inst)

    def h(w: Wave) -> None:
        e = w.exec_value()
        lane = (e & -e).bit_length() - 1 if e else 0
        w.sset(di, int(w.v[si][lane]))
    return h


@register("v_writelane_b32", cls="valu")
def _writelane(inst: Inst, ctx: DecodeContext) -> Handler:
    # writes one lane regardless of EXEC
    d, s, lane = _plain(inst, 3)
    di, get_val, get_lane = _vgpr(d, inst), _scalar_reader(s, inst), _scalar_reader(lane, inst)
    n = ctx.wave_size

    def h(w: Wave) -> None:
        w.v[di][get_lane(w) % n] = get_val(w) & 0xFFFFFFFF
    return h


def _permlane(cross: bool) -> Any:
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        # lane i of row r reads lane nibble_i({sel_hi, sel_lo}) of row r (permlane16) or r^1 (permlanex16);
        # op_sel:[fi, bound_ctrl]: an inactive source lane reads its stale value with FI, else 0 with
        # bound_ctrl, else the destination keeps its old value (it is also an input)
        m = parse_mods(inst, inst.modifiers)
        if m.dpp or m.sdwa or m.clamp or m.op_sel_hi or m.neg_lo or m.neg_hi or m.omod != 1.0:
            raise fail(inst, "unexpected permlane modifiers")
        if len(inst.operands) != 4:
            raise fail(inst, "expected 4 operands")
        d, s, lo, hi = (parse_operand(t) for t in inst.operands)
        di, si = _vgpr(d, inst), _vgpr(s, inst)
        get_lo, get_hi = _scalar_reader(lo, inst), _scalar_reader(hi, inst)
        sel = m.op_sel or (0, 0)
        if len(sel) != 2:
            raise fail(inst, "op_sel must be [fi,bound_ctrl]")
        fi, bc = bool(sel[0]), bool(sel[1])
        # Rows of 16 lanes never cross a wave, so the same indexing serves a lockstep cohort's lanes
        # (w.n of them: several waves side by side, their selector SGPRs checked equal).
        sources: dict[tuple[int, int], np.ndarray] = {}   # (selector, lanes) -> each lane's source lane

        def h(w: Wave) -> None:
            key = ((get_hi(w) << 32) | get_lo(w), w.n)
            src = sources.get(key)
            if src is None:
                lane = np.arange(w.n)
                row = lane // 16
                shifts = (4 * (lane % 16)).astype(U64)
                src = ((row ^ 1) if cross else row) * 16 + ((U64(key[0]) >> shifts) & U64(0xF)).astype(np.int64)
                if len(sources) < 64:
                    sources[key] = src
            exe = w.exec_mask()
            vals = w.v[si][src]
            ok = exe[src] | fi
            write = exe & (ok | bc)
            vals = np.where(ok, vals, U32(0))
            np.copyto(w.v[di], vals, where=write)
        return h
    return factory


register("v_permlane16_b32", cls="valu")(_permlane(False))
register("v_permlanex16_b32", cls="valu")(_permlane(True))


@register("v_permlane64_b32", cls="valu")
def _permlane64(inst: Inst, ctx: DecodeContext) -> Handler:
    """wave64: swap the two 32-lane halves. wave32: the ISA text says NOP, clang-22 expects a copy of S0
    (isa_notes §5.10) – so wave32 raises unless ctx.extra["permlane64_wave32"] is "nop" or "copy"."""
    d, s = _plain(inst, 2)
    di, si = _vgpr(d, inst), _vgpr(s, inst)
    if ctx.wave_size == 32:
        mode = ctx.extra.get("permlane64_wave32")
        if mode == "nop":
            return lambda w: None
        if mode == "copy":
            return lambda w: np.copyto(w.v[di], w.v[si], where=w.exec_mask())
        text = inst.text

        def refuse(w: Wave) -> None:
            raise EmulatorError(f"{text!r} executed in wave32: the ISA says NOP but the compiler expects a "
                                "copy; set DecodeContext.extra['permlane64_wave32'] to 'nop' or 'copy'")
        return refuse
    src = (np.arange(ctx.wave_size) + 32) % 64

    def h(w: Wave) -> None:
        np.copyto(w.v[di], w.v[si][src], where=w.exec_mask())
    return h


@register("v_swap_b32", cls="valu")
def _swap(inst: Inst, ctx: DecodeContext) -> Handler:
    # both operands are read before either is written
    a, b = _plain(inst, 2)
    ai, bi = _vgpr(a, inst), _vgpr(b, inst)

    def h(w: Wave) -> None:
        m = w.exec_mask()
        va, vb = w.v[ai].copy(), w.v[bi].copy()
        np.copyto(w.v[ai], vb, where=m)
        np.copyto(w.v[bi], va, where=m)
    return h


@register("v_nop", cls="valu")
def _nop(inst: Inst, ctx: DecodeContext) -> Handler:
    if inst.operands or inst.modifiers:
        raise fail(inst, "v_nop takes no operands")
    return lambda w: None


def _mbcnt(hi: bool) -> Any:
    def f(w: Wave, mask: np.ndarray, add: np.ndarray) -> np.ndarray:
        # count the mask bits of lower-numbered lanes within this 32-lane half of the mask
        lane = w.lanes.astype(np.int64)
        k = np.clip(lane - 32, 0, 32) if hi else np.minimum(lane, 32)
        below = ((U64(1) << k.astype(U64)) - U64(1))
        bits = mask.astype(U64) & below
        return (popcount(bits).astype(U64) + add) & U64(0xFFFFFFFF)
    return f


vop("v_mbcnt_lo_u32_b32", Spec("u32", ("b32", "u32"), _mbcnt(False), wave_fn=True))
vop("v_mbcnt_hi_u32_b32", Spec("u32", ("b32", "u32"), _mbcnt(True), wave_fn=True))


# ---------------------------------------------------------------------------
# gfx12 pseudo-scalar transcendentals: SGPR in, SGPR out, independent of EXEC

def _pseudo_scalar(name: str, typ: str) -> Any:
    fn = transcendental(name, typ)

    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        m = parse_mods(inst, inst.modifiers)
        if m.dpp or m.sdwa or m.op_sel or m.op_sel_hi or m.neg_lo or m.neg_hi:
            raise fail(inst, "unexpected modifiers")
        if len(inst.operands) != 2:
            raise fail(inst, "expected 2 operands")
        d, s = (parse_operand(t) for t in inst.operands)
        di = _sgpr_dst(d, inst)
        width = 32 if typ == "f32" else 16
        if s.kind == "const":
            get = _scalar_reader(s, inst)
        elif s.kind == "s" and s.count == 1:
            si = s.index

            def get(w: Wave) -> int:
                return w.sget(si) & ((1 << width) - 1)
        else:
            raise fail(inst, f"source {s.text} must be an SGPR or constant")
        neg, absm, clamp, omod = s.neg, s.abs, m.clamp, m.omod
        dt = np.float32 if typ == "f32" else np.float16
        ut = U32 if typ == "f32" else np.uint16

        def h(w: Wave) -> None:
            with np.errstate(all="ignore"):
                raw = apply_fmods(np.array([get(w)], U32), width, absm, neg)
                x = raw.astype(ut).view(dt)
                r = np.asarray(fn(x), dt)
                if clamp or omod != 1.0:
                    r = float_omod_clamp(r, omod, clamp)
                v = int(r.view(ut)[0])
            if typ == "f16" and di != NULL:
                v |= w.sget(di) & 0xFFFF0000      # 16-bit result keeps the SGPR's high half (gfx12)
            w.sset(di, v)
        return h
    return factory


for _n in ("exp", "log", "rcp", "rsq", "sqrt"):
    register(f"v_s_{_n}_f32", cls="trans")(_pseudo_scalar(_n, "f32"))
    register(f"v_s_{_n}_f16", cls="trans")(_pseudo_scalar(_n, "f16"))
