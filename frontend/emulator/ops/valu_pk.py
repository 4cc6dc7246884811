"""Packed and mixed-precision VALU ops (VOP3P): v_pk_* on 16-bit halves and on f32
register pairs, v_fma_mix*, the dot products (VOP3P forms and the accumulating
VOP2 forms v_dot2c / v_dot2acc / v_dot4c).

VOP3P source selection (isa_notes §5.8): for source i, op_sel[i] picks the half
(or 32-bit word for pk f32) feeding the low result and op_sel_hi[i] (default 1)
the one feeding the high result; neg_lo/neg_hi negate per result half. Inline
constants live in the low half only: selecting the high half of an inline
constant is generation-dependent and raises (the compiler never does it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import EmulatorError
from .. import fp
from ..listing import Inst
from ..state import Operand, Wave, const_bits, parse_operand
from .core import DecodeContext, Handler, lane_constant, register
from .valu_common import (
    FLOAT_TYPES,
    WIDTH,
    Mods,
    fail,
    float_omod_clamp,
    parse_mods,
    to_typed,
    vgpr_writer,
)
from .valu_vop import SPECS, Spec, make_handler, split_encoding, vop

U32, U64, I64 = np.uint32, np.uint64, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64


def _d(x: Any) -> np.ndarray:
    return np.asarray(x).astype(F64)


def _is_inline(op: Operand) -> bool:
    return isinstance(op.value, float) or -16 <= int(op.value) <= 64


def _word_reader(op: Operand, ctx: DecodeContext, elem_width: int, word: int, inst: Inst) \
        -> Callable[[Wave], np.ndarray]:
    """Raw bits of one element (16-bit half or 32-bit word `word`) of a packed source."""
    if op.neg or op.abs:
        raise fail(inst, f"modifier syntax on packed operand {op.text}; expected neg_lo/neg_hi")
    if op.half is not None:
        raise fail(inst, f"true16 operand {op.text} in a packed op")
    if op.kind == "const":
        if _is_inline(op):
            if word:
                raise fail(inst, f"high element of inline constant {op.text} selected (generation-dependent)")
            arr = np.full(1, const_bits(op, elem_width), U32)
        else:                      # a literal supplies the whole 32-bit value
            if elem_width == 32 and word:
                raise fail(inst, f"high word of literal {op.text} selected")
            lit = int(op.value) & 0xFFFFFFFF
            arr = np.full(1, (lit >> (16 * word)) & 0xFFFF if elem_width == 16 else lit, U32)
        return lane_constant(arr, ctx)
    if elem_width == 16:
        if op.count != 1:
            raise fail(inst, f"packed 16-bit operand {op.text} must be one register")
        if op.kind == "v":
            i = op.index
            return (lambda w: w.v[i] >> 16) if word else (lambda w: w.v[i] & 0xFFFF)
        if op.kind == "s":
            i = op.index
            return lambda w: np.full(w.n, (int(w.s[i]) >> (16 * word)) & 0xFFFF, U32)
    else:
        if op.kind == "v":
            if op.count != 2:
                raise fail(inst, f"packed f32 operand {op.text} must be a register pair")
            i = op.index + word
            return lambda w: w.v[i]
        if op.kind == "s":
            if op.count != 2:
                raise fail(inst, f"packed f32 operand {op.text} must be an SGPR pair")
            i = op.index + word
            return lambda w: np.full(w.n, w.s[i], U32)
    raise fail(inst, f"operand {op.text} is not supported here")


def _bits(m: tuple[int, ...] | None, n: int, default: int, inst: Inst, what: str) -> tuple[int, ...]:
    if m is None:
        return (default,) * n
    if len(m) != n:
        raise fail(inst, f"{what} has {len(m)} entries for {n} sources")
    return m


def _flip(raw: np.ndarray, width: int, neg: bool, absm: bool = False) -> np.ndarray:
    s = 0x8000 if width == 16 else 0x80000000
    if absm:
        raw = raw & U32(~s & 0xFFFFFFFF)
    if neg:
        raw = raw ^ U32(s)
    return raw


def _check_vop3p(inst: Inst, m: Mods) -> None:
    if m.dpp or m.sdwa:
        raise fail(inst, "DPP/SDWA on a packed op is not implemented")
    if m.omod != 1.0:
        raise fail(inst, "output modifier on a packed op")


# ---------------------------------------------------------------------------
# v_pk_* on two 16-bit halves or two f32 words

@dataclass(frozen=True)
class Pk:
    elem: str                      # element type of sources and result ("f16", "u16", "i16", "b16", "f32")
    nsrc: int
    fn: Callable[..., np.ndarray]  # typed elements -> typed element result


def _pk_factory(spec: Pk) -> Callable[[Inst, DecodeContext], Handler]:
    width = WIDTH[spec.elem]
    is_float = spec.elem in FLOAT_TYPES

    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        m = parse_mods(inst, inst.modifiers)
        _check_vop3p(inst, m)
        if len(inst.operands) != spec.nsrc + 1:
            raise fail(inst, f"expected a destination and {spec.nsrc} sources")
        dst = parse_operand(inst.operands[0])
        srcs = [parse_operand(t) for t in inst.operands[1:]]
        sel_lo = _bits(m.op_sel, spec.nsrc, 0, inst, "op_sel")
        sel_hi = _bits(m.op_sel_hi, spec.nsrc, 1, inst, "op_sel_hi")
        neg_lo = _bits(m.neg_lo, spec.nsrc, 0, inst, "neg_lo")
        neg_hi = _bits(m.neg_hi, spec.nsrc, 0, inst, "neg_hi")
        if not is_float and (any(neg_lo) or any(neg_hi)):
            raise fail(inst, "neg_lo/neg_hi on an integer packed op")
        if m.clamp and not is_float:
            raise fail(inst, "clamp on an integer packed op is not implemented")
        lo_r = [_word_reader(o, ctx, width, s, inst) for o, s in zip(srcs, sel_lo, strict=True)]
        hi_r = [_word_reader(o, ctx, width, s, inst) for o, s in zip(srcs, sel_hi, strict=True)]
        try:
            dwrite = vgpr_writer(dst, 64 if width == 32 else 32, ctx)
        except EmulatorError as e:
            raise fail(inst, str(e)) from None
        clamp = m.clamp
        fn, elem = spec.fn, spec.elem
        sat = elem == "f16" and bool(ctx.extra.get("fp16_ovfl"))     # MODE.FP16_OVFL

        def half(w: Wave, readers: list[Callable[[Wave], np.ndarray]], negs: tuple[int, ...]) -> np.ndarray:
            args = [to_typed(_flip(r(w), width, bool(ng)), elem) for r, ng in zip(readers, negs, strict=True)]
            res = np.asarray(fn(*args))
            if sat:
                res = fp.saturate_f16(res, *args)
            if clamp:
                res = float_omod_clamp(res, 1.0, True)
            return np.asarray(res, to_typed(np.zeros(1, U32), elem).dtype).view(
                np.uint16 if width == 16 else U32).astype(U64)

        if width == 32 and not clamp:
            # Packed f32 (v_pk_fma_f32, ...): both words of every source in one [2, lanes] array and
            # one call of the element function, the result rows written to the destination pair.
            file_, d = dst.kind, dst.index                # a register pair (vgpr_writer checked it)
            negs = list(zip(neg_lo, neg_hi, strict=True))

            def both(w: Wave, lo: Callable[[Wave], np.ndarray], hi: Callable[[Wave], np.ndarray],
                     neg: tuple[int, int]) -> np.ndarray:
                out = np.empty((2, w.n), U32)
                out[0] = _flip(lo(w), 32, bool(neg[0]))
                out[1] = _flip(hi(w), 32, bool(neg[1]))
                return out.view(np.float32)

            def handler32(w: Wave) -> None:
                args = [both(w, lo, hi, ng) for lo, hi, ng in zip(lo_r, hi_r, negs, strict=True)]
                res = np.asarray(fn(*args), np.float32).view(U32)
                v, mask = getattr(w, file_), w.exec_mask()
                if mask is w.full:
                    v[d:d + 2] = res
                else:
                    np.copyto(v[d:d + 2], res, where=mask)
            return handler32

        def compute(w: Wave) -> tuple[Any, np.ndarray]:
            lo = half(w, lo_r, neg_lo)
            hi = half(w, hi_r, neg_hi)
            return lo | (hi << U64(width)), w.exec_mask()

        def write(w: Wave, out: np.ndarray, mask: np.ndarray) -> None:
            dwrite(w, out if width == 32 else out.astype(U32), mask)

        return make_handler(compute, write)
    return factory


def _f16op(f: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda *a: fp.to_f16(f(*[_d(x) for x in a]))


_PK: dict[str, Pk] = {
    "v_pk_add_f16": Pk("f16", 2, _f16op(lambda a, b: a + b)),
    "v_pk_mul_f16": Pk("f16", 2, _f16op(lambda a, b: a * b)),
    "v_pk_fma_f16": Pk("f16", 3, fp.fma_f16),
    "v_pk_max_f16": Pk("f16", 2, lambda a, b: fp.minmax_ieee(a, b, True)),
    "v_pk_min_f16": Pk("f16", 2, lambda a, b: fp.minmax_ieee(a, b, False)),
    "v_pk_max_num_f16": Pk("f16", 2, lambda a, b: fp.minmax_num(a, b, True)),
    "v_pk_min_num_f16": Pk("f16", 2, lambda a, b: fp.minmax_num(a, b, False)),
    "v_pk_maximum_f16": Pk("f16", 2, lambda a, b: fp.minmax_nan(a, b, True)),
    "v_pk_minimum_f16": Pk("f16", 2, lambda a, b: fp.minmax_nan(a, b, False)),
    "v_pk_add_u16": Pk("u16", 2, lambda a, b: a + b),
    "v_pk_add_i16": Pk("i16", 2, lambda a, b: a + b),
    "v_pk_sub_u16": Pk("u16", 2, lambda a, b: a - b),
    "v_pk_sub_i16": Pk("i16", 2, lambda a, b: a - b),
    "v_pk_mul_lo_u16": Pk("u16", 2, lambda a, b: a * b),
    "v_pk_mad_u16": Pk("u16", 3, lambda a, b, c: a * b + c),
    "v_pk_mad_i16": Pk("i16", 3, lambda a, b, c: a * b + c),
    "v_pk_lshlrev_b16": Pk("u16", 2, lambda a, b: b << (a & 15)),
    "v_pk_lshrrev_b16": Pk("u16", 2, lambda a, b: b >> (a & 15)),
    "v_pk_ashrrev_i16": Pk("i16", 2, lambda a, b: b >> (a & 15)),
    "v_pk_max_u16": Pk("u16", 2, np.maximum),
    "v_pk_max_i16": Pk("i16", 2, np.maximum),
    "v_pk_min_u16": Pk("u16", 2, np.minimum),
    "v_pk_min_i16": Pk("i16", 2, np.minimum),
    "v_pk_add_f32": Pk("f32", 2, lambda a, b: a + b),
    "v_pk_mul_f32": Pk("f32", 2, lambda a, b: a * b),
    "v_pk_fma_f32": Pk("f32", 3, fp.fma_f32),
}

for _name, _spec in _PK.items():
    register(_name, cls="valu")(_pk_factory(_spec))


@register("v_pk_mov_b32", cls="valu")
def _pk_mov(inst: Inst, ctx: DecodeContext) -> Handler:
    """D.lo = word op_sel[0] of S0, D.hi = word op_sel[1] of S1 (gfx9)."""
    m = parse_mods(inst, inst.modifiers)
    _check_vop3p(inst, m)
    if m.op_sel_hi or m.neg_lo or m.neg_hi or m.clamp or len(inst.operands) != 3:
        raise fail(inst, "unexpected v_pk_mov_b32 form")
    sel = _bits(m.op_sel, 2, 0, inst, "op_sel")
    dst = parse_operand(inst.operands[0])
    r0 = _word_reader(parse_operand(inst.operands[1]), ctx, 32, sel[0], inst)
    r1 = _word_reader(parse_operand(inst.operands[2]), ctx, 32, sel[1], inst)
    dwrite = vgpr_writer(dst, 64, ctx)

    def compute(w: Wave) -> tuple[Any, np.ndarray]:
        return r0(w).astype(U64) | (r1(w).astype(U64) << U64(32)), w.exec_mask()

    return make_handler(compute, dwrite)


# ---------------------------------------------------------------------------
# v_fma_mix*: each source f16 (op_sel_hi[i] = 1, half op_sel[i]) or f32; the fma rounds to f32,
# mixlo/mixhi then round that to f16

def _f32_reader(op: Operand, ctx: DecodeContext, inst: Inst) -> Callable[[Wave], np.ndarray]:
    """A whole 32-bit source register / constant (f32 operand of a mix op or dot accumulator)."""
    if op.kind == "const":
        return lane_constant(np.full(1, const_bits(op, 32), U32), ctx)
    if op.count != 1 or op.half is not None:
        raise fail(inst, f"operand {op.text} must be one 32-bit register")
    i = op.index
    if op.kind == "v":
        return lambda w: w.v[i]
    if op.kind == "s":
        return lambda w: np.full(w.n, w.s[i], U32)
    raise fail(inst, f"operand {op.text} is not supported here")


def _mix_factory(result: str) -> Callable[[Inst, DecodeContext], Handler]:
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        m = parse_mods(inst, inst.modifiers)
        _check_vop3p(inst, m)
        if len(inst.operands) != 4:
            raise fail(inst, "expected a destination and 3 sources")
        sel = _bits(m.op_sel, 3, 0, inst, "op_sel")
        # mix ops are not "packed": op_sel_hi defaults to 0 (all sources f32) and marks f16 sources
        is16 = _bits(m.op_sel_hi, 3, 0, inst, "op_sel_hi")
        # NEG_HI is the abs bit for mix ops
        neg_lo = _bits(m.neg_lo, 3, 0, inst, "neg_lo")
        neg_hi = _bits(m.neg_hi, 3, 0, inst, "neg_hi")
        readers = []
        for i, tok in enumerate(inst.operands[1:]):
            op = parse_operand(tok)
            neg, absm = op.neg or bool(neg_lo[i]), op.abs or bool(neg_hi[i])
            bare = Operand(op.kind, op.index, op.count, op.value, text=op.text)
            if is16[i]:
                readers.append((_word_reader(bare, ctx, 16, sel[i], inst), 16, neg, absm))
            else:
                if sel[i]:
                    raise fail(inst, f"op_sel on f32 source {op.text}")
                readers.append((_f32_reader(bare, ctx, inst), 32, neg, absm))
        dst = parse_operand(inst.operands[0])
        try:
            dwrite = vgpr_writer(dst, 32 if result == "f32" else 16, ctx, hi=result == "hi")
        except EmulatorError as e:
            raise fail(inst, str(e)) from None
        clamp = m.clamp
        sat = bool(ctx.extra.get("fp16_ovfl"))     # MODE.FP16_OVFL (f16 results only)

        def source(r: Callable[[Wave], np.ndarray], width: int, neg: bool, absm: bool) -> Callable[[Wave], Any]:
            """A source as float64 lanes (the conversion is exact)."""
            if neg or absm:
                return lambda w: _d(to_typed(_flip(r(w), width, neg, absm), "f16" if width == 16 else "f32"))
            if width == 16:
                return lambda w: r(w).astype(np.uint16).view(F16).astype(F64)
            return lambda w: np.asarray(r(w), U32).view(F32).astype(F64)

        s0, s1, s2 = (source(*spec) for spec in readers)

        def compute(w: Wave) -> tuple[Any, np.ndarray]:
            vals = (s0(w), s1(w), s2(w))
            # the fma is an f32 operation on every arch (RDNA D.f16 = f32_to_f16(fma(S0, S1, S2)), CDNA mad_mix,
            # LLVM's fptrunc(fmuladd.f32)): a round-to-odd f64 casts to the correctly rounded f32
            r32 = fp.quiet(fp.fma_rto(*vals).astype(F32))
            if result == "f32":
                out = float_omod_clamp(r32, 1.0, True) if clamp else r32
                return out.view(U32), w.exec_mask()
            res16 = fp.to_f16(r32)      # second rounding, f32 -> f16
            if sat:
                res16 = fp.saturate_f16(res16, *vals)
            if clamp:
                res16 = float_omod_clamp(res16, 1.0, True)
            return res16.view(np.uint16).astype(U32), w.exec_mask()

        return make_handler(compute, dwrite)
    return factory


register("v_fma_mix_f32", "v_mad_mix_f32", cls="valu")(_mix_factory("f32"))
register("v_fma_mixlo_f16", "v_mad_mixlo_f16", cls="valu")(_mix_factory("lo"))
register("v_fma_mixhi_f16", "v_mad_mixhi_f16", cls="valu")(_mix_factory("hi"))


# ---------------------------------------------------------------------------
# dot products

def dot_f32(products: list[np.ndarray], acc: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    """Exact products and accumulator, one RNE rounding to f32 (gfx11 flushes a denormal result);
    a NaN gives one fixed NaN pattern (isa_notes §5.9)."""
    accd = np.asarray(acc).astype(F64)
    if len(products) == 2:
        # Usually both additions are exact; then sum_rto's result is the plain sum (+0.0 turns -0 into +0),
        # which is finite, so there is no NaN to fix either.
        s1, e1 = fp.two_sum(products[0], products[1])
        s, e2 = fp.two_sum(s1, accd)
        if not (np.count_nonzero(e1) or np.count_nonzero(e2)):
            r = (s + 0.0).astype(F32)
            return fp.flush_denorm(r) if ctx.gfx == 11 else r
    r = fp.sum_rto([*products, accd]).astype(F32)
    nan = np.isnan(r)
    if np.count_nonzero(nan):
        r = np.where(nan, F32(np.nan), r)
    return fp.flush_denorm(r) if ctx.gfx == 11 else r


def _halves_f64(raw: np.ndarray, typ: str) -> np.ndarray:
    """The 16-bit halves of packed registers as float64, interleaved: [lane0.lo, lane0.hi, lane1.lo, ...]."""
    if not (type(raw) is np.ndarray and raw.dtype == U32 and raw.flags.c_contiguous):
        raw = np.ascontiguousarray(raw, U32)
    if typ == "f16":
        return raw.view(F16).astype(F64)
    return (raw.view(np.uint16).astype(U32) << U32(16)).view(F32).astype(F64)   # bf16: top half of an f32


def pair_products(a: np.ndarray, b: np.ndarray, typ: str) -> list[np.ndarray]:
    """[a.lo * b.lo, a.hi * b.hi] of packed f16/bf16 registers, exact in float64."""
    p = _halves_f64(a, typ) * _halves_f64(b, typ)
    return [p[0::2], p[1::2]]


def _dot2c(typ: str) -> Callable[..., Callable[..., np.ndarray]]:
    def make(ctx: DecodeContext, mods: dict[str, str]) -> Callable[..., np.ndarray]:
        def f(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
            return dot_f32(pair_products(a, b, typ), c, ctx)
        return f
    return make


# VOP2 forms accumulate into the destination: D = S0.lo*S1.lo + S0.hi*S1.hi + D.
# Rounding is disputed: dot_f32 rounds the exact sum once (isa_notes §5.9, near AMD's gfx1100/gfx1201
# characterisation); the pseudocode read literally rounds after each add, and public reports say gfx1151
# silicon matches neither. Left as is until measured on hardware.
vop("v_dot2c_f32_f16 v_dot2acc_f32_f16", Spec("f32", ("b32", "b32", "f32"), _dot2c("f16"), acc=True, ctx_fn=True))
vop("v_dot2c_f32_bf16 v_dot2acc_f32_bf16", Spec("f32", ("b32", "b32", "f32"), _dot2c("bf16"), acc=True,
                                                ctx_fn=True))


def _sbytes(x: np.ndarray, signed: bool, bits: int = 8) -> list[np.ndarray]:
    n = 32 // bits
    m = (1 << bits) - 1
    out = []
    for k in range(n):
        v = (x.astype(I64) >> (bits * k)) & m
        if signed:
            v = (v ^ (1 << (bits - 1))) - (1 << (bits - 1))
        out.append(v)
    return out


def _int_dot(bits: int, sa: bool, sb: bool, signed_acc: bool) -> Callable[..., np.ndarray]:
    def f(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        acc = c.astype(I64) if signed_acc else c.astype(U32).astype(I64)
        s = sum((x * y for x, y in zip(_sbytes(a, sa, bits), _sbytes(b, sb, bits), strict=True)), acc)
        return np.asarray(s) & 0xFFFFFFFF
    return f


vop("v_dot4c_i32_i8", Spec("u32", ("b32", "b32", "i32"), _int_dot(8, True, True, True), acc=True))


@dataclass(frozen=True)
class Dot:
    kind: str           # "f16x2", "bf16x2", "f8x4", "int"
    a: str = ""         # element format names for f8: "fp8"/"bf8"
    b: str = ""
    bits: int = 8
    signed: tuple[bool, bool] = (True, True)
    result: str = "f32"


def _dot_factory(spec: Dot) -> Callable[[Inst, DecodeContext], Handler]:
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        m = parse_mods(inst, inst.modifiers)
        _check_vop3p(inst, m)
        if len(inst.operands) != 4:
            raise fail(inst, "expected a destination and 3 sources")
        sel = _bits(m.op_sel, 3, 0, inst, "op_sel")
        sel_hi = _bits(m.op_sel_hi, 3, 1, inst, "op_sel_hi")
        neg_lo = _bits(m.neg_lo, 3, 0, inst, "neg_lo")
        neg_hi = _bits(m.neg_hi, 3, 0, inst, "neg_hi")
        dst = parse_operand(inst.operands[0])
        s = [parse_operand(t) for t in inst.operands[1:]]
        signed = spec.signed
        if spec.kind in ("f16x2", "bf16x2"):
            typ = "f16" if spec.kind == "f16x2" else "bf16"
            el = [[_word_reader(s[i], ctx, 16, sel[i], inst), _word_reader(s[i], ctx, 16, sel_hi[i], inst)]
                  for i in range(2)]
            negs = [[neg_lo[i], neg_hi[i]] for i in range(2)]
            # the usual form (lo*lo + hi*hi, no negation, registers): whole registers, products at once
            packed = ([_f32_reader(s[i], ctx, inst) for i in range(2)]
                      if sel[:2] == (0, 0) and sel_hi[:2] == (1, 1) and not any(neg_lo[:2]) and not any(neg_hi[:2])
                      and all(op.kind in ("v", "s") for op in s[:2]) else None)
        else:
            # 4/8-element dots are not "packed" in the op_sel sense: op_sel_hi carries nothing
            if any(sel):
                raise fail(inst, "op_sel on a 4/8-element dot product is not implemented")
            if spec.kind == "int" and spec.signed == ("iu", "iu"):     # gfx11 iu8/iu4: neg_lo = signedness
                signed = (bool(neg_lo[0]), bool(neg_lo[1]))
                if any(neg_hi) or neg_lo[2]:
                    raise fail(inst, "unexpected neg modifiers on an iu dot product")
            elif any(neg_lo) or any(neg_hi):
                raise fail(inst, "neg_lo/neg_hi on this dot product are not implemented")
            el = [[_f32_reader(s[i], ctx, inst)] for i in range(2)]
            negs = [[0], [0]]
            packed = None
        # accumulator
        if spec.result in ("f32", "i32", "u32"):
            if sel[2] or neg_hi[2] or (spec.kind in ("f16x2", "bf16x2") and not sel_hi[2]):
                raise fail(inst, "op_sel / neg_hi on the 32-bit accumulator is not implemented")
            acc_r = _f32_reader(s[2], ctx, inst)
            acc_w = 32
        else:
            acc_r = _word_reader(s[2], ctx, 16, sel[2], inst)
            acc_w = 16
        acc_neg = bool(neg_lo[2]) if spec.kind != "int" else False
        if s[2].neg or s[2].abs:
            raise fail(inst, "modifier syntax on a dot-product accumulator")
        if spec.result in ("f16", "bf16"):
            # VOP3 (not VOP3P) on gfx11+, with its own op_sel meaning: only the plain form is implemented
            if ctx.gfx == 9 or m.op_sel or m.op_sel_hi or m.neg_lo or m.neg_hi:
                raise fail(inst, "this form of a 16-bit-result dot product is not implemented")
            dwrite = vgpr_writer(dst, 16, ctx)
        else:
            dwrite = vgpr_writer(dst, 32, ctx)
        clamp = m.clamp
        if clamp and spec.kind == "int":
            raise fail(inst, "clamp (saturation) on an integer dot product is not implemented")
        fmts = fp.f8_formats(ctx.fp8) if spec.kind == "f8x4" else None
        sat = spec.result == "f16" and bool(ctx.extra.get("fp16_ovfl"))     # MODE.FP16_OVFL

        def compute(w: Wave) -> tuple[Any, np.ndarray]:
            accv = _flip(acc_r(w), acc_w, acc_neg)
            if packed is not None:
                prods = pair_products(packed[0](w), packed[1](w), typ)
            elif spec.kind in ("f16x2", "bf16x2"):
                a = [_d(to_typed(_flip(r(w), 16, bool(ng)), typ)) for r, ng in zip(el[0], negs[0], strict=True)]
                b = [_d(to_typed(_flip(r(w), 16, bool(ng)), typ)) for r, ng in zip(el[1], negs[1], strict=True)]
                prods = [a[0] * b[0], a[1] * b[1]]
            elif spec.kind == "f8x4":
                assert fmts is not None
                fa = fmts[0] if spec.a == "fp8" else fmts[1]
                fb = fmts[0] if spec.b == "fp8" else fmts[1]
                ra, rb = el[0][0](w), el[1][0](w)
                prods = [_d(fa.decode((ra >> (8 * k)) & 0xFF)) * _d(fb.decode((rb >> (8 * k)) & 0xFF))
                         for k in range(4)]
            else:
                ra, rb = el[0][0](w), el[1][0](w)
                out = _int_dot(spec.bits, signed[0], signed[1], spec.result == "i32")(ra, rb, accv)
                return out.astype(U32), w.exec_mask()
            if spec.result == "f32":
                r = dot_f32(prods, to_typed(accv, "f32"), ctx)
                if clamp:
                    r = float_omod_clamp(r, 1.0, True)
                return r.view(U32), w.exec_mask()
            accd = _d(to_typed(accv, spec.result))
            x = fp.sum_rto([*prods, accd])
            if spec.result == "f16":
                r16 = fp.to_f16(x)
                if sat:
                    r16 = fp.saturate_f16(r16, *prods, accd)
                if clamp:
                    r16 = float_omod_clamp(r16, 1.0, True)
                return r16.view(np.uint16).astype(U32), w.exec_mask()
            return fp.f32_to_bf16_bits(x.astype(F32)), w.exec_mask()

        return make_handler(compute, dwrite)
    return factory


_DOTS: dict[str, Dot] = {
    "v_dot2_f32_f16": Dot("f16x2"),
    "v_dot2_f32_bf16": Dot("bf16x2"),
    "v_dot2_f16_f16": Dot("f16x2", result="f16"),
    "v_dot2_bf16_bf16": Dot("bf16x2", result="bf16"),
    "v_dot4_f32_fp8_fp8": Dot("f8x4", "fp8", "fp8"),
    "v_dot4_f32_fp8_bf8": Dot("f8x4", "fp8", "bf8"),
    "v_dot4_f32_bf8_fp8": Dot("f8x4", "bf8", "fp8"),
    "v_dot4_f32_bf8_bf8": Dot("f8x4", "bf8", "bf8"),
    "v_dot4_i32_i8": Dot("int", bits=8, signed=(True, True), result="i32"),
    "v_dot4_u32_u8": Dot("int", bits=8, signed=(False, False), result="u32"),
    "v_dot8_i32_i4": Dot("int", bits=4, signed=(True, True), result="i32"),
    "v_dot8_u32_u4": Dot("int", bits=4, signed=(False, False), result="u32"),
    "v_dot2_i32_i16": Dot("int", bits=16, signed=(True, True), result="i32"),
    "v_dot2_u32_u16": Dot("int", bits=16, signed=(False, False), result="u32"),
    "v_dot4_i32_iu8": Dot("int", bits=8, signed=("iu", "iu"), result="i32"),   # type: ignore[arg-type]
    "v_dot8_i32_iu4": Dot("int", bits=4, signed=("iu", "iu"), result="i32"),   # type: ignore[arg-type]
}

for _name, _dot in _DOTS.items():
    register(_name, cls="valu")(_dot_factory(_dot))

assert "v_dot2c_f32_f16" in SPECS and split_encoding("v_dot2c_f32_f16_e32")[1] == "e32"
