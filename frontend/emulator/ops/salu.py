"""Scalar ALU, scalar memory, branches, barriers, waits and hints."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from ...errors import EmulatorError, EmulatorFault
from ..listing import Inst
from ..state import AT_BARRIER, DONE, EXEC_LO, NULL, VCC_HI, VCC_LO, Operand, Wave, const_bits, parse_operand
from .core import DecodeContext, Handler, register

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
_APERTURES = {"src_shared_base": 0x1000000000000, "src_private_base": 0x2000000000000,
              "src_shared_limit": 0x1FFFFFFFFFFFF, "src_private_limit": 0x2FFFFFFFFFFFF}


def sreader(op: Operand, width: int) -> Callable[[Wave], int]:
    """A reader of a scalar source operand as an unsigned int of `width` bits."""
    if op.kind == "s":
        i = op.index
        if i == NULL:
            return lambda w: 0
        if width == 64:
            if not i & 1:
                k = i >> 1
                return lambda w: int(w.s64[k])
            return lambda w: int(w.s[i]) | (int(w.s[i + 1]) << 32)
        return lambda w: int(w.s[i])
    if op.kind == "const":
        v = const_bits(op, width)
        return lambda w: v
    if op.kind == "scc":
        return lambda w: w.scc
    if op.kind == "aperture":
        v = _APERTURES[op.value] >> (32 if width == 32 else 0) & (M32 if width == 32 else M64)
        return lambda w: v
    raise EmulatorError(f"operand {op.text!r} cannot be a scalar source")


def swriter(op: Operand, width: int) -> Callable[[Wave, int], None]:
    if op.kind != "s":
        raise EmulatorError(f"operand {op.text!r} cannot be a scalar destination")
    i = op.index
    if i == NULL:
        return lambda w, v: None
    count = 2 if width == 64 else 1
    if i + count > EXEC_LO:                 # EXEC (or a pair ending in it): keep its mask in step
        return lambda w, v: w.sset(i, v, count)
    if width == 64:
        if not i & 1:
            k = i >> 1

            def write_pair(w: Wave, v: int) -> None:
                w.s64[k] = v & M64
            return write_pair

        def write64(w: Wave, v: int) -> None:
            w.s[i] = v & M32
            w.s[i + 1] = (v >> 32) & M32
        return write64

    def write32(w: Wave, v: int) -> None:
        w.s[i] = v & M32
    return write32


def _ops(inst: Inst) -> list[Operand]:
    return [parse_operand(t) for t in inst.operands]


def _sext(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


# --- two-source ALU ops: fn(a, b, scc) -> (result, new scc or None) -----------------
def _alu(fn: Callable[[int, int, int], tuple[int, int | None]], width: int, b_width: int):
    """Handler factory of a `width`-bit op whose second source is `b_width` bits wide."""
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = _ops(inst)
        d = swriter(ops[0], width)
        a = sreader(ops[1], width)
        b = sreader(ops[2], b_width)

        def run(w: Wave) -> None:
            r, scc = fn(a(w), b(w), w.scc)
            d(w, r)
            if scc is not None:
                w.scc = scc
        return run
    return factory


def _nz(r: int) -> tuple[int, int]:
    return r, int(r != 0)


def _add_i32(a: int, b: int, _: int) -> tuple[int, int]:
    r = (a + b) & M32
    return r, int((a >> 31) == (b >> 31) and (r >> 31) != (a >> 31))


def _sub_i32(a: int, b: int, _: int) -> tuple[int, int]:
    r = (a - b) & M32
    return r, int((a >> 31) != (b >> 31) and (r >> 31) != (a >> 31))


def _bfe(signed: bool, width: int):
    def fn(a: int, b: int, _: int) -> tuple[int, int]:
        off, wid = b & (width - 1), (b >> 16) & 0x7F
        r = (a >> off) & ((1 << wid) - 1) if wid else 0
        if signed and wid and (r >> (wid - 1)) & 1:
            r -= 1 << wid
        r &= (1 << width) - 1
        return r, int(r != 0)
    return fn


def _logic(width: int) -> dict[str, Callable[[int, int, int], tuple[int, int | None]]]:
    """The bitwise, shift, select and bit-field ops both widths have (``_b32``/``_b64`` names; the
    gfx11+ spellings ``and_not1``/``or_not1`` are aliases of ``andn2``/``orn2``). SCC = result != 0."""
    m, sh, b, i = (1 << width) - 1, width - 1, f"b{width}", f"i{width}"
    andn2 = lambda a, x, c: _nz(a & ~x & m)   # noqa: E731
    orn2 = lambda a, x, c: _nz((a | ~x) & m)  # noqa: E731
    return {
        f"s_and_{b}": lambda a, x, c: _nz(a & x), f"s_or_{b}": lambda a, x, c: _nz(a | x),
        f"s_xor_{b}": lambda a, x, c: _nz(a ^ x),
        f"s_andn2_{b}": andn2, f"s_and_not1_{b}": andn2, f"s_orn2_{b}": orn2, f"s_or_not1_{b}": orn2,
        f"s_nand_{b}": lambda a, x, c: _nz(~(a & x) & m), f"s_nor_{b}": lambda a, x, c: _nz(~(a | x) & m),
        f"s_xnor_{b}": lambda a, x, c: _nz(~(a ^ x) & m),
        f"s_lshl_{b}": lambda a, x, c: _nz((a << (x & sh)) & m),
        f"s_lshr_{b}": lambda a, x, c: _nz(a >> (x & sh)),
        f"s_ashr_{i}": lambda a, x, c: _nz((_sext(a, width) >> (x & sh)) & m),
        f"s_cselect_{b}": lambda a, x, c: (a if c else x, None),
        f"s_bfe_u{width}": _bfe(False, width), f"s_bfe_{i}": _bfe(True, width),
    }


def _lshl_add(n: int) -> Callable[[int, int, int], tuple[int, int]]:
    return lambda a, b, c: (((a << n) + b) & M32, ((a << n) + b) >> 32)


_ADD_U32 = lambda a, b, c: ((a + b) & M32, (a + b) >> 32)            # noqa: E731
_ADDC_U32 = lambda a, b, c: ((a + b + c) & M32, (a + b + c) >> 32)   # noqa: E731
_SUB_U32 = lambda a, b, c: ((a - b) & M32, int(b > a))                # noqa: E731
_SUBB_U32 = lambda a, b, c: ((a - b - c) & M32, int(b + c > a))       # noqa: E731

# gfx9 names first, then the gfx11+ spellings of the same operations.
_ALU = {32: {
    "s_add_u32": _ADD_U32, "s_add_co_u32": _ADD_U32, "s_addc_u32": _ADDC_U32, "s_add_co_ci_u32": _ADDC_U32,
    "s_sub_u32": _SUB_U32, "s_sub_co_u32": _SUB_U32, "s_subb_u32": _SUBB_U32, "s_sub_co_ci_u32": _SUBB_U32,
    "s_add_i32": _add_i32, "s_add_co_i32": _add_i32,
    "s_sub_i32": _sub_i32, "s_sub_co_i32": _sub_i32,
    "s_mul_i32": lambda a, b, c: ((a * b) & M32, None),
    "s_mul_hi_u32": lambda a, b, c: ((a * b) >> 32, None),
    "s_mul_hi_i32": lambda a, b, c: (((_sext(a, 32) * _sext(b, 32)) >> 32) & M32, None),
    **{f"s_lshl{n}_add_u32": _lshl_add(n) for n in (1, 2, 3, 4)},
    "s_min_i32": lambda a, b, c: (a, 1) if _sext(a, 32) < _sext(b, 32) else (b, 0),
    "s_min_u32": lambda a, b, c: (a, 1) if a < b else (b, 0),
    "s_max_i32": lambda a, b, c: (a, 1) if _sext(a, 32) >= _sext(b, 32) else (b, 0),
    "s_max_u32": lambda a, b, c: (a, 1) if a >= b else (b, 0),
    "s_pack_ll_b32_b16": lambda a, b, c: ((a & 0xFFFF) | ((b & 0xFFFF) << 16), None),
    "s_pack_lh_b32_b16": lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), None),
    "s_pack_hh_b32_b16": lambda a, b, c: ((a >> 16) | (b & 0xFFFF0000), None),
    **_logic(32),
}, 64: {
    "s_add_nc_u64": lambda a, b, c: ((a + b) & M64, None),
    "s_sub_nc_u64": lambda a, b, c: ((a - b) & M64, None),
    "s_mul_u64": lambda a, b, c: ((a * b) & M64, None),
    **_logic(64),
}}
# Shift amounts and bit-field offset/width are 32-bit operands even in the 64-bit forms.
_SHIFTS = ("s_lshl_b", "s_lshr_b", "s_ashr_i", "s_bfe_u", "s_bfe_i")

for _w, _table in _ALU.items():
    for _name, _fn in _table.items():
        register(_name, cls="salu")(_alu(_fn, _w, 32 if _name.startswith(_SHIFTS) else _w))


def _popcount(v: int) -> int:
    return bin(v).count("1")


def _cls(v: int) -> int:
    """Leading bits equal to bit 31 (s_flbit_i32 / s_cls_i32); -1 when all bits are equal."""
    if v in (0, M32):
        return M32
    sign = v >> 31
    n = 0
    for bit in range(31, -1, -1):
        if (v >> bit) & 1 != sign:
            return n
        n += 1
    return M32


def _clz(v: int, width: int) -> int:
    return M32 if v == 0 else width - v.bit_length()


def _ctz(v: int) -> int:
    return M32 if v == 0 else (v & -v).bit_length() - 1


def _unary_ops(width: int) -> dict[str, tuple[int, int, Callable[[int], tuple[int, int | None]]]]:
    """The unary ops both widths have (``_b32``/``_b64`` source; the gfx11+ spelling ``ctz`` is an
    alias of ``ff1``): name -> (dst width, src width, fn)."""
    m, b = (1 << width) - 1, f"b{width}"
    ctz = (32, width, lambda a: (_ctz(a), None))
    return {
        f"s_mov_{b}": (width, width, lambda a: (a, None)),
        f"s_not_{b}": (width, width, lambda a: _nz(~a & m)),
        f"s_bcnt1_i32_{b}": (32, width, lambda a: _nz(_popcount(a))),
        f"s_ff1_i32_{b}": ctz, f"s_ctz_i32_{b}": ctz,
    }


_UNARY = {   # name: (dst width, src width, fn(a) -> (result, scc or None))
    **_unary_ops(32), **_unary_ops(64),
    "s_brev_b32": (32, 32, lambda a: (int(f"{a:032b}"[::-1], 2), None)),
    "s_flbit_i32": (32, 32, lambda a: (_cls(a), None)), "s_cls_i32": (32, 32, lambda a: (_cls(a), None)),
    "s_flbit_i32_b32": (32, 32, lambda a: (_clz(a, 32), None)),
    "s_clz_i32_u32": (32, 32, lambda a: (_clz(a, 32), None)),
    "s_sext_i32_i8": (32, 32, lambda a: (_sext(a, 8) & M32, None)),
    "s_sext_i32_i16": (32, 32, lambda a: (_sext(a, 16) & M32, None)),
    "s_abs_i32": (32, 32, lambda a: _nz(abs(_sext(a, 32)) & M32)),
}


def _unary(dw: int, sw: int, fn):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = _ops(inst)
        d, a = swriter(ops[0], dw), sreader(ops[1], sw)

        def run(w: Wave) -> None:
            r, scc = fn(a(w))
            d(w, r)
            if scc is not None:
                w.scc = scc
        return run
    return factory


for _name, (_dw, _sw, _fn) in _UNARY.items():
    register(_name, cls="salu")(_unary(_dw, _sw, _fn))


@register("s_movk_i32", cls="salu")
def _movk(inst: Inst, ctx: DecodeContext) -> Handler:
    ops = _ops(inst)
    d, v = swriter(ops[0], 32), _sext(const_bits(ops[1], 32), 16) & M32
    return lambda w: d(w, v)


@register("s_addk_i32", "s_addk_co_i32", cls="salu")
def _addk(inst: Inst, ctx: DecodeContext) -> Handler:
    ops = _ops(inst)
    d, a, k = swriter(ops[0], 32), sreader(ops[0], 32), _sext(const_bits(ops[1], 32), 16) & M32

    def run(w: Wave) -> None:
        r, w.scc = _add_i32(a(w), k, 0)
        d(w, r)
    return run


@register("s_mulk_i32", cls="salu")
def _mulk(inst: Inst, ctx: DecodeContext) -> Handler:
    ops = _ops(inst)
    d, a, k = swriter(ops[0], 32), sreader(ops[0], 32), _sext(const_bits(ops[1], 32), 16) & M32
    return lambda w: d(w, (a(w) * k) & M32)


# --- compares ------------------------------------------------------------------------
_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _cmp(width: int, signed: bool, rel, k: bool = False):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = _ops(inst)
        a = sreader(ops[0], width)
        if k:
            kv = const_bits(ops[1], 32) & 0xFFFF
            kv = _sext(kv, 16) if signed else kv
            b = lambda w: kv  # noqa: E731
        else:
            b = sreader(ops[1], width)
        conv = (lambda v: _sext(v, width)) if signed else (lambda v: v)

        def run(w: Wave) -> None:
            w.scc = int(rel(conv(a(w)), b(w) if k else conv(b(w))))
        return run
    return factory


for _rel, _fn in _CMP.items():
    register(f"s_cmp_{_rel}_i32", cls="salu")(_cmp(32, True, _fn))
    register(f"s_cmp_{_rel}_u32", cls="salu")(_cmp(32, False, _fn))
    register(f"s_cmpk_{_rel}_i32", cls="salu")(_cmp(32, True, _fn, k=True))
    register(f"s_cmpk_{_rel}_u32", cls="salu")(_cmp(32, False, _fn, k=True))
for _rel in ("eq", "lg"):
    register(f"s_cmp_{_rel}_u64", cls="salu")(_cmp(64, False, _CMP[_rel]))


def _bitcmp(width: int, want: int):
    """s_bitcmp{0,1}_b{32,64}: SCC = (bit S1 mod width of S0) == want; S1 is 32-bit for both."""
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = _ops(inst)
        a, b = sreader(ops[0], width), sreader(ops[1], 32)

        def run(w: Wave) -> None:
            w.scc = int((a(w) >> (b(w) & (width - 1))) & 1 == want)
        return run
    return factory


for _w in (32, 64):
    for _want in (0, 1):
        register(f"s_bitcmp{_want}_b{_w}", cls="salu")(_bitcmp(_w, _want))


# --- SALU float (gfx1151, gfx1201) ----------------------------------------------------
def _f32(v: int) -> np.float32:
    return np.uint32(v).view(np.float32)


def _bits(f: np.float32) -> int:
    return int(np.float32(f).view(np.uint32))


def _fpick(larger: bool) -> Callable[[np.float32, np.float32], np.float32]:
    """s_max_f32 (`larger`) / s_min_f32: a NaN operand loses to the other, +0 counts as above -0."""
    def fn(a: np.float32, b: np.float32) -> np.float32:
        if np.isnan(a):
            return b
        if np.isnan(b):
            return a
        if a == b == 0:
            return a if np.signbit(a) != larger else b
        return max(a, b) if larger else min(a, b)
    return fn


_FBIN = {"s_add_f32": lambda a, b: a + b, "s_sub_f32": lambda a, b: a - b, "s_mul_f32": lambda a, b: a * b,
         "s_max_f32": _fpick(True), "s_min_f32": _fpick(False)}

for _name, _fn in _FBIN.items():
    def _ffac(inst: Inst, ctx: DecodeContext, fn=_fn) -> Handler:
        ops = _ops(inst)
        d, a, b = swriter(ops[0], 32), sreader(ops[1], 32), sreader(ops[2], 32)

        def run(w: Wave) -> None:      # (run_launch silences numpy's float warnings for the whole launch)
            d(w, _bits(np.float32(fn(_f32(a(w)), _f32(b(w))))))
        return run
    register(_name, cls="salu")(_ffac)

_FCMP = {"lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b,
         "gt": lambda a, b: a > b, "lg": lambda a, b: a < b or a > b, "ge": lambda a, b: a >= b,
         "o": lambda a, b: not (np.isnan(a) or np.isnan(b)), "u": lambda a, b: bool(np.isnan(a) or np.isnan(b)),
         "nge": lambda a, b: not a >= b, "nlg": lambda a, b: not (a < b or a > b), "ngt": lambda a, b: not a > b,
         "nle": lambda a, b: not a <= b, "neq": lambda a, b: not a == b, "nlt": lambda a, b: not a < b}
for _rel, _fn in _FCMP.items():
    def _fcfac(inst: Inst, ctx: DecodeContext, fn=_fn) -> Handler:
        ops = _ops(inst)
        a, b = sreader(ops[0], 32), sreader(ops[1], 32)

        def run(w: Wave) -> None:
            w.scc = int(bool(fn(_f32(a(w)), _f32(b(w)))))
        return run
    register(f"s_cmp_{_rel}_f32", cls="salu")(_fcfac)


@register("s_cvt_f32_i32", "s_cvt_f32_u32", "s_cvt_u32_f32", "s_cvt_i32_f32", cls="salu")
def _scvt(inst: Inst, ctx: DecodeContext) -> Handler:
    ops = _ops(inst)
    d, a = swriter(ops[0], 32), sreader(ops[1], 32)
    name = inst.mnemonic
    if name == "s_cvt_f32_i32":
        return lambda w: d(w, _bits(np.float32(_sext(a(w), 32))))
    if name == "s_cvt_f32_u32":
        return lambda w: d(w, _bits(np.float32(a(w))))
    lo, hi = (0, M32) if name == "s_cvt_u32_f32" else (-(2**31), 2**31 - 1)

    def run(w: Wave) -> None:
        f = _f32(a(w))
        v = 0 if np.isnan(f) else int(max(lo, min(hi, np.trunc(np.float64(f)))))
        d(w, v & M32)
    return run


# --- EXEC manipulation ------------------------------------------------------------------
_SAVEEXEC = {
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
    "andn1": lambda s, e: ~s & e, "andn2": lambda s, e: s & ~e, "and_not0": lambda s, e: ~s & e,
    "and_not1": lambda s, e: s & ~e, "orn1": lambda s, e: ~s | e, "orn2": lambda s, e: s | ~e,
    "or_not0": lambda s, e: ~s | e, "or_not1": lambda s, e: s | ~e, "nand": lambda s, e: ~(s & e),
    "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
}
for _op_name, _fn in _SAVEEXEC.items():
    for _w in (32, 64):
        def _sefac(inst: Inst, ctx: DecodeContext, fn=_fn, width=_w) -> Handler:
            ops = _ops(inst)
            d, a = swriter(ops[0], width), sreader(ops[1], width)
            mask = (1 << width) - 1

            def run(w: Wave) -> None:
                old = w.exec
                new = fn(a(w), old) & mask
                d(w, old)
                w.set_exec(new)
                w.scc = int(new != 0)
            return run
        register(f"s_{_op_name}_saveexec_b{_w}", cls="salu")(_sefac)


def _image_base(ctx: DecodeContext) -> int:
    """Where the code object's vaddr 0 lives in emulated memory (PC values are absolute)."""
    try:
        return ctx.extra["image_base"]
    except KeyError:
        raise EmulatorError("the program was decoded without its load address (Program(image_base=...))") from None


@register("s_getpc_b64", cls="salu")
def _getpc(inst: Inst, ctx: DecodeContext) -> Handler:
    d = swriter(parse_operand(inst.operands[0]), 64)
    value = _image_base(ctx) + inst.addr + 4
    return lambda w: d(w, value)


# --- scalar memory --------------------------------------------------------------------
_SLOAD = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx3": 3, "s_load_dwordx4": 4,
          "s_load_dwordx8": 8, "s_load_dwordx16": 16, "s_load_b32": 1, "s_load_b64": 2, "s_load_b96": 3,
          "s_load_b128": 4, "s_load_b256": 8, "s_load_b512": 16}
_SLOAD_SUB = {"s_load_u8": (1, False), "s_load_i8": (1, True), "s_load_u16": (2, False), "s_load_i16": (2, True)}


def _smem_address(inst: Inst) -> tuple[Callable[[Wave], int], int]:
    ops = _ops(inst)
    base = sreader(ops[1], 64)
    imm = 0
    extra: Callable[[Wave], int] = lambda w: 0  # noqa: E731
    if len(ops) > 2:
        if ops[2].kind == "const":
            imm = _sext(const_bits(ops[2], 32), 32) if ops[2].value < 0 else const_bits(ops[2], 32)
        else:
            extra = sreader(ops[2], 32)
    for m in inst.modifiers:
        if m.startswith("offset:"):
            imm += int(m.split(":", 1)[1], 0)

    def address(w: Wave) -> int:
        return (base(w) + imm + extra(w)) & M64
    return address, ops[0].index


def _sload(dwords: int):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        address, dst = _smem_address(inst)
        nbytes = 4 * dwords
        to_exec = dst + dwords > EXEC_LO

        def run(w: Wave) -> None:
            addr = address(w) & ~3          # scalar loads ignore the low two address bits
            data = w.group.mem.view(addr, nbytes)
            w.s[dst:dst + dwords] = data.view(np.uint32)
            if to_exec:
                w.exec_from_sgprs()
            w.group.stats.bytes_loaded["scalar"] += nbytes
        return run
    return factory


for _name, _n in _SLOAD.items():
    register(_name, cls="smem")(_sload(_n))


def _sload_sub(size: int, signed: bool):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        address, dst = _smem_address(inst)

        def run(w: Wave) -> None:
            v = int.from_bytes(w.group.mem.view(address(w), size).tobytes(), "little")
            w.sset(dst, (_sext(v, 8 * size) if signed else v) & M32)
            w.group.stats.bytes_loaded["scalar"] += size
        return run
    return factory


for _name, (_n, _sg) in _SLOAD_SUB.items():
    register(_name, cls="smem")(_sload_sub(_n, _sg))


# --- branches and program control -----------------------------------------------------
def _branch(cond: Callable[[Wave], bool] | None):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        target = ctx.branch_target(inst, int(inst.operands[0], 0))
        if cond is None:
            def jump(w: Wave) -> None:
                w.pc = target
            return jump

        def run(w: Wave) -> None:
            if cond(w):
                w.pc = target
        return run
    return factory


def _vcc(w: Wave) -> int:
    return int(w.s[VCC_LO]) | (int(w.s[VCC_HI]) << 32 if w.n == 64 else 0)


register("s_branch", cls="branch")(_branch(None))
register("s_cbranch_scc0", cls="branch")(_branch(lambda w: w.scc == 0))
register("s_cbranch_scc1", cls="branch")(_branch(lambda w: w.scc != 0))
register("s_cbranch_vccz", cls="branch")(_branch(lambda w: _vcc(w) == 0))
register("s_cbranch_vccnz", cls="branch")(_branch(lambda w: _vcc(w) != 0))
register("s_cbranch_execz", cls="branch")(_branch(lambda w: w.exec == 0))
register("s_cbranch_execnz", cls="branch")(_branch(lambda w: w.exec != 0))


# --- calls and returns: PCs are absolute addresses; a target must start an instruction ----
def _jumper(ctx: DecodeContext) -> Callable[[int], int]:
    """absolute address -> instruction index (EmulatorFault if no instruction starts there)."""
    base, index_of = _image_base(ctx), ctx.index_of

    def index(target: int) -> int:
        i = index_of.get(target - base)
        if i is None:
            raise EmulatorFault(f"jump to 0x{target:x}, which is not the start of an instruction of this code "
                                f"object (loaded at 0x{base:x})")
        return i
    return index


@register("s_setpc_b64", cls="branch")
def _setpc(inst: Inst, ctx: DecodeContext) -> Handler:
    src, index = sreader(parse_operand(inst.operands[0]), 64), _jumper(ctx)

    def run(w: Wave) -> None:
        w.pc = index(src(w))
    return run


@register("s_swappc_b64", cls="branch")
def _swappc(inst: Inst, ctx: DecodeContext) -> Handler:
    ops = _ops(inst)
    d, src, index = swriter(ops[0], 64), sreader(ops[1], 64), _jumper(ctx)
    ret = _image_base(ctx) + inst.addr + inst.size

    def run(w: Wave) -> None:
        target = src(w)             # read before the write: the pairs may be the same
        d(w, ret)
        w.pc = index(target)
    return run


@register("s_call_b64", cls="branch")
def _call(inst: Inst, ctx: DecodeContext) -> Handler:
    d = swriter(parse_operand(inst.operands[0]), 64)
    target = ctx.branch_target(inst, int(inst.operands[1], 0))     # PC + 4 + 4 * simm16, like s_branch
    ret = _image_base(ctx) + inst.addr + inst.size

    def run(w: Wave) -> None:
        d(w, ret)
        w.pc = target
    return run


# Messages: only gfx11+'s MSG_DEALLOC_VGPRS (the wave gives its VGPRs back before s_endpgm; nothing
# to model here). Any other message has effects the emulator does not provide.
_SENDMSG = re.compile(r"^sendmsg\((?P<name>[A-Za-z0-9_]+)")


@register("s_sendmsg", cls="other")
def _sendmsg(inst: Inst, ctx: DecodeContext) -> Handler:
    m = _SENDMSG.match(inst.operands[0]) if inst.operands else None
    name = m.group("name") if m else " ".join(inst.operands)
    if name != "MSG_DEALLOC_VGPRS" or ctx.gfx < 11:
        raise EmulatorError(f"s_sendmsg message {name} is not implemented by the emulator "
                            "(only MSG_DEALLOC_VGPRS on gfx11/gfx12)")
    return nop_factory(inst, ctx)


@register("s_endpgm", cls="branch")
def _endpgm(inst: Inst, ctx: DecodeContext) -> Handler:
    def run(w: Wave) -> None:
        w.state = DONE
    return run


@register("s_barrier", "s_barrier_signal", cls="barrier")
def _barrier(inst: Inst, ctx: DecodeContext) -> Handler:
    # gfx12 splits __syncthreads into signal + wait; the signal is the rendezvous.
    def run(w: Wave) -> None:
        w.state = AT_BARRIER
    return run


@register("s_code_end", cls="other")
def _code_end(inst: Inst, ctx: DecodeContext) -> Handler:
    def run(w: Wave) -> None:
        raise EmulatorFault("executed s_code_end padding: the wave ran past its kernel's end")
    return run


def nop_factory(inst: Inst, ctx: DecodeContext) -> Handler:
    """The handler of instructions without architectural effect (a lockstep cohort skips them)."""
    return lambda w: None


_VM_COUNTER = re.compile(r"\bvmcnt\((\d+)\)")


def vm_wait_counts(inst: Inst) -> tuple[tuple[str, int], ...]:
    """The vector-memory counters a wait instruction waits on, as (counter, most left outstanding):
    ``vmcnt`` (gfx9: loads and stores; gfx10/11: loads), ``vscnt`` (gfx10/11 stores), ``loadcnt``
    and ``storecnt`` (gfx12; the combined forms hold it in bits 13:8). Empty if none."""
    m = inst.mnemonic
    if m == "s_waitcnt":
        found = _VM_COUNTER.search(inst.text)
        return (("vmcnt", int(found.group(1))),) if found else ()
    if m in ("s_waitcnt_vmcnt", "s_waitcnt_vscnt", "s_wait_loadcnt", "s_wait_storecnt",
             "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt"):
        value = int(inst.operands[-1], 0)
        if m.endswith("_dscnt"):
            value = (value >> 8) & 0x3F
        counter = {"s_waitcnt_vmcnt": "vmcnt", "s_waitcnt_vscnt": "vscnt"}.get(m, m[len("s_wait_"):].split("_")[0])
        return ((counter, value),)
    return ()


def wait_factory(inst: Inst, ctx: DecodeContext) -> Handler:
    """A wait: no architectural effect (every access completes before the next instruction here),
    but a vector-memory wait reports its counters to ``Memory.waiter`` when one is set (the
    benchmarks' latency model follows each wave's dependent round trips with it)."""
    counts = vm_wait_counts(inst)
    if not counts:
        return lambda w: None

    def run(w: Wave) -> None:
        waiter = w.group.mem.waiter
        if waiter is not None:
            waiter(w, counts)
    return run


register("s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_wait_loadcnt", "s_wait_storecnt",
         "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt", cls="other")(wait_factory)

# Other waits, scheduling hints and cache maintenance have no architectural effect in a
# sequential emulator.
register("s_nop", "s_waitcnt_lgkmcnt", "s_waitcnt_expcnt",
         "s_waitcnt_depctr", "s_wait_alu", "s_wait_dscnt", "s_wait_kmcnt",
         "s_wait_samplecnt", "s_wait_bvhcnt", "s_wait_expcnt",
         "s_wait_idle", "s_barrier_wait", "s_delay_alu", "s_clause", "s_set_inst_prefetch_distance",
         "s_setprio", "s_sleep", "s_inst_prefetch", "s_icache_inv", "s_dcache_inv", "s_dcache_wb",
         "buffer_gl0_inv", "buffer_gl1_inv", "buffer_inv", "buffer_wbl2", "buffer_wbinvl1", "buffer_wbinvl1_vol",
         "global_inv", "global_wb", "global_wbinv", "s_prefetch_inst", "s_prefetch_data",
         cls="other")(nop_factory)
