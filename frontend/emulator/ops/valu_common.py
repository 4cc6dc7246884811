"""Shared machinery of the VALU semantics: operand readers, destination writers,
DPP / DPP8 / SDWA source handling, VOP3 op_sel / abs / neg / clamp / omod.

Everything here runs at decode time except the small closures it returns.
Readers return one numpy value per lane: ``uint32`` raw bits for 16/32-bit
operands (a 16-bit operand in bits 15:0), ``uint64`` for 64-bit operands. The
typed views (`to_typed`) turn those into float32/int32/float16/... arrays for the
arithmetic, `to_raw` turns results back.

Reusable pieces for other ops modules: `read_operand` / `raw_reader` (operand ->
per-lane raw bits), `mask_reader` / `mask_writer` (per-lane bool <-> SGPR mask,
wave-size aware), `vgpr_writer` (32/64-bit and 16-bit-half writes with the
per-generation high-half rule), `parse_mods` (modifier parsing that rejects
anything unknown), `Dpp` (source-lane maps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import EmulatorError
from ..listing import Inst
from ..state import EXEC_LO, NULL, VCC_LO, Operand, Wave, const_bits, lane_mask, parse_operand
from .core import DecodeContext, lane_constant

Reader = Callable[[Wave], np.ndarray]
Compute = Callable[[Wave], tuple[Any, np.ndarray]]      # -> (result, lanes to write)
Write = Callable[[Wave, Any, np.ndarray], None]

FLOAT_TYPES = frozenset({"f16", "bf16", "f32", "f64"})
WIDTH = {"f16": 16, "bf16": 16, "u16": 16, "i16": 16, "b16": 16,
         "f32": 32, "u32": 32, "i32": 32, "b32": 32,
         "f64": 64, "u64": 64, "i64": 64, "b64": 64}
SIGN = {16: 0x8000, 32: 0x80000000, 64: 0x8000000000000000}
_NP = {"f16": np.float16, "u16": np.uint16, "i16": np.int16, "b16": np.uint16,
       "f32": np.float32, "u32": np.uint32, "i32": np.int32, "b32": np.uint32,
       "f64": np.float64, "u64": np.uint64, "i64": np.int64, "b64": np.uint64}
_U = {16: np.uint16, 32: np.uint32, 64: np.uint64}


def fail(inst: Inst | str, msg: str) -> EmulatorError:
    text = inst.text if isinstance(inst, Inst) else inst
    return EmulatorError(f"{text!r}: {msg}")


# ---------------------------------------------------------------------------
# typed views

def to_typed(raw: np.ndarray, typ: str) -> np.ndarray:
    """Raw per-lane bits (uint32 / uint64) to the arithmetic dtype of `typ`."""
    w = WIDTH[typ]
    if typ == "bf16":
        return ((raw.astype(np.uint32) & 0xFFFF) << 16).view(np.float32)
    if w == 16:
        return raw.astype(np.uint16).view(_NP[typ])
    return np.asarray(raw, _U[w]).view(_NP[typ])


def to_raw(val: Any, typ: str) -> np.ndarray:
    """A typed result back to raw bits (uint32 for 16/32-bit, uint64 for 64-bit)."""
    w = WIDTH[typ]
    if typ == "bf16":
        raise TypeError("bf16 results are produced as raw bits (type b16)")
    a = np.asarray(val, _NP[typ]).view(_U[w])
    return a.astype(np.uint32) if w == 16 else a


# ---------------------------------------------------------------------------
# modifiers

@dataclass
class Mods:
    """Trailing modifiers of one instruction, parsed and checked."""

    dpp: dict[str, Any] = field(default_factory=dict)
    sdwa: dict[str, str] = field(default_factory=dict)
    op_sel: tuple[int, ...] | None = None
    op_sel_hi: tuple[int, ...] | None = None
    neg_lo: tuple[int, ...] | None = None
    neg_hi: tuple[int, ...] | None = None
    clamp: bool = False
    omod: float = 1.0
    other: dict[str, str] = field(default_factory=dict)   # accepted op-specific ones (bitop3, byte_sel)


_DPP_KEYS = {"quad_perm", "row_shl", "row_shr", "row_ror", "row_mirror", "row_half_mirror", "row_bcast",
             "wave_shl", "wave_shr", "wave_rol", "wave_ror", "row_share", "row_xmask", "row_mask", "bank_mask",
             "bound_ctrl", "fi", "dpp8"}
_SDWA_KEYS = {"dst_sel", "dst_unused", "src0_sel", "src1_sel"}


def _bits_list(v: str) -> tuple[int, ...]:
    if not (v.startswith("[") and v.endswith("]")):
        raise ValueError(v)
    return tuple(int(x, 0) for x in v[1:-1].split(","))


def parse_mods(inst: Inst, mods: tuple[str, ...], *, allow: frozenset[str] = frozenset()) -> Mods:
    """Parse modifiers; anything not understood (or not in `allow` for op-specific keys) raises."""
    out = Mods()
    for m in mods:
        key, _, val = m.partition(":")
        try:
            if key in _DPP_KEYS:
                out.dpp[key] = val
            elif key in _SDWA_KEYS:
                ok = val in ("UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE") if key == "dst_unused" else val in _SEL
                if not ok:
                    raise fail(inst, f"unknown SDWA selector {m!r}")
                out.sdwa[key] = val
            elif key in ("op_sel", "op_sel_hi", "neg_lo", "neg_hi"):
                setattr(out, key, _bits_list(val))
            elif m == "clamp":
                out.clamp = True
            elif key == "mul" and val in ("2", "4"):
                out.omod = float(val)
            elif key == "div" and val == "2":
                out.omod = 0.5
            elif key in allow:
                out.other[key] = val
            else:
                raise fail(inst, f"modifier {m!r} is not implemented")
        except ValueError:
            raise fail(inst, f"cannot parse modifier {m!r}") from None
    return out


# ---------------------------------------------------------------------------
# DPP

def _rows(n: int) -> np.ndarray:
    return np.arange(n) // 16


class Dpp:
    """Source-lane map of one DPP16 or DPP8 control (decoded once)."""

    def __init__(self, inst: Inst, d: dict[str, Any], ctx: DecodeContext) -> None:
        n = ctx.wave_size
        lane = np.arange(n)
        pos = lane % 16
        self.dpp8 = "dpp8" in d
        self.fi = d.get("fi", "0") == "1"
        # llvm-22 prints bound_ctrl:1 when the bit is set; older tools printed the same bit as bound_ctrl:0
        if d.get("bound_ctrl", "1") != "1":
            raise fail(inst, f"ambiguous bound_ctrl:{d['bound_ctrl']} (old SP3 spelling?)")
        self.bound_ctrl = "bound_ctrl" in d
        # gfx10+ treats an inactive source lane like an invalid one unless FI; gfx9 reads it
        self.check_inactive = ctx.gfx >= 10 and not self.fi
        ctrls = [k for k in d if k not in ("row_mask", "bank_mask", "bound_ctrl", "fi")]
        if len(ctrls) != 1:
            raise fail(inst, f"expected exactly one DPP control, got {ctrls}")
        k = ctrls[0]
        v = d[k]
        src = lane.copy()
        gfx9_only = {"row_bcast", "wave_shl", "wave_shr", "wave_rol", "wave_ror"}
        gfx10_only = {"row_share", "row_xmask", "dpp8"}
        if (k in gfx9_only and ctx.gfx != 9) or (k in gfx10_only and ctx.gfx < 10):
            raise fail(inst, f"DPP control {k} does not exist on {ctx.arch}")
        if k == "dpp8":
            sel = _bits_list(v)
            if len(sel) != 8 or any(not 0 <= s < 8 for s in sel):
                raise fail(inst, f"bad dpp8 selector {v}")
            src = (lane & ~7) | np.array(sel)[lane % 8]
        elif k == "quad_perm":
            sel = _bits_list(v)
            if len(sel) != 4 or any(not 0 <= s < 4 for s in sel):
                raise fail(inst, f"bad quad_perm {v}")
            src = (lane & ~3) | np.array(sel)[lane % 4]
        elif k in ("row_shl", "row_shr", "row_ror"):
            s = int(v, 0)
            if not 1 <= s <= 15:
                raise fail(inst, f"bad {k} amount {v}")
            if k == "row_shl":
                src = np.where(pos + s < 16, lane + s, -1)
            elif k == "row_shr":
                src = np.where(pos - s >= 0, lane - s, -1)
            else:                         # rotate right: lane i reads lane (i - s) mod 16 of its row
                src = (lane & ~15) | ((pos - s) % 16)
        elif k == "row_mirror":
            src = (lane & ~15) | (15 - pos)
        elif k == "row_half_mirror":
            src = (lane & ~7) | (7 - lane % 8)
        elif k == "row_bcast":
            row = _rows(n)
            if v == "15":
                src = np.where(row >= 1, row * 16 - 1, -1)
            elif v == "31":
                src = np.where(row >= 2, 31, -1)
            else:
                raise fail(inst, f"bad row_bcast:{v}")
            if n != 64:
                raise fail(inst, "row_bcast needs wave64")
        elif k in ("wave_shl", "wave_shr", "wave_rol", "wave_ror"):
            if v != "1":
                raise fail(inst, f"bad {k}:{v}")
            if k == "wave_shl":
                src = np.where(lane + 1 < n, lane + 1, -1)
            elif k == "wave_shr":
                src = np.where(lane >= 1, lane - 1, -1)
            elif k == "wave_rol":
                src = (lane + 1) % n
            else:
                src = (lane - 1) % n
        elif k == "row_share":
            s = int(v, 0)
            src = (lane & ~15) | s
        elif k == "row_xmask":
            s = int(v, 0)
            src = (lane & ~15) | (pos ^ s)
        else:
            raise fail(inst, f"DPP control {k} is not implemented")
        self.valid = src >= 0
        self.src = np.where(self.valid, src, 0)
        if self.dpp8:
            if "row_mask" in d or "bank_mask" in d or "bound_ctrl" in d:
                raise fail(inst, "dpp8 takes no row/bank mask or bound_ctrl")
            self.enabled = np.ones(n, bool)
        else:
            row_mask = int(d.get("row_mask", "0xf"), 0)
            bank_mask = int(d.get("bank_mask", "0xf"), 0)
            self.enabled = (((row_mask >> _rows(n)) & 1) != 0) & (((bank_mask >> (pos // 4)) & 1) != 0)
        # With every lane active (exe all ones) the masks below are constants, computed once:
        # the value of an invalid source lane where it reads 0, and the lanes written.
        self.keep = np.where(self.valid, np.uint32(0xFFFFFFFF), np.uint32(0))
        self.zero_invalid = self.dpp8 or self.bound_ctrl
        if self.zero_invalid:
            full_lanes = self.enabled
        else:
            full_lanes = self.enabled & self.valid
        full_lanes.flags.writeable = False
        self.full_lanes = None if full_lanes.all() else full_lanes     # None: all lanes (the wave's full mask)

    def write_mask(self, w: Wave) -> np.ndarray:
        """Lanes the instruction writes: active, row/bank enabled, and (without bound_ctrl) a valid source."""
        exe = w.mask
        if exe is w.full:
            return w.full if self.full_lanes is None else self.full_lanes
        if self.dpp8:
            return exe
        if self.bound_ctrl:
            return exe & self.enabled
        valid = self.valid & exe[self.src] if self.check_inactive else self.valid
        return exe & self.enabled & valid

    def values(self, w: Wave, row: np.ndarray) -> np.ndarray:
        """src0 (a uint32 VGPR row) as seen by each lane."""
        if w.mask is w.full:        # no source lane is inactive: only invalid ones may read 0
            vals = row.take(self.src)
            return vals & self.keep if self.zero_invalid else vals
        return self.fetch(w, row)[0]

    def fetch(self, w: Wave, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(src0 values as seen by each lane, lanes that may be written)."""
        vals = row[self.src]
        valid = self.valid
        exe = w.exec_mask()
        if self.check_inactive:
            valid = valid & exe[self.src]
        if self.dpp8:
            return np.where(valid, vals, 0).astype(row.dtype), exe
        if self.bound_ctrl:
            return np.where(valid, vals, 0).astype(row.dtype), exe & self.enabled
        return vals, exe & self.enabled & valid


# ---------------------------------------------------------------------------
# SDWA

_SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
        "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


def sdwa_extract(raw: np.ndarray, sel: str, sext: bool) -> np.ndarray:
    shift, bits = _SEL[sel]
    if bits == 32:
        return raw
    v = (raw >> shift) & ((1 << bits) - 1)
    if sext:
        v = ((v ^ (1 << (bits - 1))) - (1 << (bits - 1))).astype(np.uint32)   # two's-complement wrap
    return v.astype(np.uint32)


def sdwa_place(old: np.ndarray, val: np.ndarray, sel: str, unused: str) -> np.ndarray:
    shift, bits = _SEL[sel]
    if bits == 32:
        return val
    m = (1 << bits) - 1
    field_ = (val & m) << shift
    if unused == "UNUSED_PAD":
        return field_.astype(np.uint32)
    if unused == "UNUSED_PRESERVE":
        return ((old & ~np.uint32(m << shift)) | field_).astype(np.uint32)
    if unused == "UNUSED_SEXT":
        top = shift + bits
        neg = ((val >> (bits - 1)) & 1) != 0
        upper = np.uint32((0xFFFFFFFF << top) & 0xFFFFFFFF) if top < 32 else np.uint32(0)
        return np.where(neg, field_ | upper, field_).astype(np.uint32)
    raise ValueError(unused)


# ---------------------------------------------------------------------------
# operand readers

def strip_sext(tok: str) -> tuple[str, bool]:
    if tok.startswith("sext(") and tok.endswith(")"):
        return tok[5:-1], True
    return tok, False


def const_array(op: Operand, width: int, typ: str = "") -> np.ndarray:
    """The value a constant operand supplies, as raw bits in a one-element array (typed by the
    operand's width/type); readers repeat it per lane with `lane_constant` (read-only, which also
    tells an op that this source is one value in every lane)."""
    if typ == "bf16" and isinstance(op.value, float):
        raise EmulatorError(f"float inline constant {op.text} for a bf16 operand is not implemented")
    if width == 64 and isinstance(op.value, int) and not -16 <= op.value <= 64:
        lit = op.value & 0xFFFFFFFF
        if typ == "f64":   # a 32-bit literal for an f64 operand supplies the high word (low word 0)
            return np.array([lit << 32], np.uint64)
        # 64-bit integer operands: the hardware zero-extends the literal for unsigned ones and
        # sign-extends it for signed ones (LLVM folds a literal into a 64-bit operand only where
        # the two agree, or by the operand's signedness: llvm/llvm-project#70274 and later)
        if typ == "i64":
            return np.array([lit - (1 << 32) if lit >> 31 else lit], np.int64).view(np.uint64)
        if typ in ("u64", "b64"):
            return np.array([lit], np.uint64)
        raise EmulatorError(f"32-bit literal {op.text} for a 64-bit operand of type {typ or '?'} is not implemented")
    return np.array([const_bits(op, width)], np.uint64 if width == 64 else np.uint32)


def raw_reader(op: Operand, width: int, ctx: DecodeContext, *, hi: bool = False,
               dpp: Dpp | None = None, sdwa_sel: str | None = None, sext: bool = False,
               typ: str = "") -> Reader:
    """Per-lane raw bits of one source operand (no float modifiers).

    `hi` selects bits 31:16 of a 16-bit operand (op_sel / ``.h``); a ``.l``/``.h``
    half of a 32-bit operand reads that half zero-extended (gfx11 true16).
    """
    half = op.half is not None
    if op.half == "h":
        hi = True
    if op.kind == "a" and ctx.gfx != 9:
        raise EmulatorError(f"AGPR operand {op.text} outside gfx9")
    if op.kind == "v" or op.kind == "a":
        i = op.index
        if width == 64:
            if op.count != 2 or half or dpp or sdwa_sel:
                raise EmulatorError(f"64-bit operand {op.text} must be a plain register pair")
            if op.kind == "a":
                return lambda w: w.a[i].astype(np.uint64) | (w.a[i + 1].astype(np.uint64) << np.uint64(32))
            return lambda w: w.v[i].astype(np.uint64) | (w.v[i + 1].astype(np.uint64) << np.uint64(32))
        if op.count != 1:
            raise EmulatorError(f"operand {op.text} is a register tuple where one register is expected")
        file_ = "a" if op.kind == "a" else "v"

        def base(w: Wave) -> np.ndarray:
            return getattr(w, file_)[i]
    elif op.kind == "s":
        i, cnt = op.index, op.count
        if width == 64:
            if cnt != 2 and i != NULL:
                raise EmulatorError(f"64-bit operand {op.text} must be an SGPR pair")
            return lambda w: np.full(w.n, w.sget(i, 2), np.uint64)
        if cnt != 1:
            raise EmulatorError(f"operand {op.text} is an SGPR tuple where one register is expected")

        bcast = lane_constant(np.array([i]), ctx)      # take() broadcasts one SGPR faster than np.full

        def base(w: Wave) -> np.ndarray:
            return w.s.take(bcast(w))
    elif op.kind == "const":
        if hi and width == 16:
            raise EmulatorError(f"high half of constant {op.text} selected (generation-dependent, not "
                                "implemented)")
        arr = const_array(op, width if not half else 16, typ)
        if sdwa_sel:
            arr = sdwa_extract(arr, sdwa_sel, sext)
        return lane_constant(arr, ctx)
    elif op.kind == "scc":
        def base(w: Wave) -> np.ndarray:
            return np.full(w.n, w.scc, np.uint32)
    else:
        raise EmulatorError(f"operand {op.text} ({op.kind}) is not supported as a VALU source")
    if dpp is not None and op.kind != "v":
        raise EmulatorError(f"DPP source {op.text} must be a VGPR")
    if sdwa_sel is not None and sdwa_sel != "DWORD" or sext:
        sel = sdwa_sel or "DWORD"

        def get(w: Wave) -> np.ndarray:
            return sdwa_extract(base(w), sel, sext)
        return get
    if width == 16 or half:
        if hi:
            return lambda w: base(w) >> 16
        return lambda w: base(w) & 0xFFFF
    return base


def apply_fmods(raw: np.ndarray, width: int, absm: bool, neg: bool) -> np.ndarray:
    """abs then neg on the sign bit (exact, NaN-preserving)."""
    s = SIGN[width]
    if absm:
        raw = raw & (~np.uint64(s) if width == 64 else np.uint32(~s & 0xFFFFFFFF))
    if neg:
        raw = raw ^ (np.uint64(s) if width == 64 else np.uint32(s))
    return raw


def read_operand(tok: str, typ: str, ctx: DecodeContext, *, hi: bool = False, dpp: Dpp | None = None,
                 sdwa_sel: str | None = None, bitmods: bool = False) -> tuple[Reader, Operand]:
    """A reader returning raw bits of operand `tok` of type `typ` with its abs/neg applied.

    Float modifiers are legal on float types only (and on `bitmods` ops such as
    v_cndmask_b32, where they act on the sign bit)."""
    tok, sext = strip_sext(tok)
    op = parse_operand(tok)
    width = WIDTH[typ]
    absm, neg = op.abs, op.neg
    if (absm or neg) and typ not in FLOAT_TYPES and not bitmods:
        raise EmulatorError(f"float modifier on non-float operand {op.text}")
    if sext and typ in FLOAT_TYPES:
        raise EmulatorError(f"sext() on float operand {op.text}")
    if op.half is not None and ctx.gfx != 11:
        raise EmulatorError(f"true16 operand {op.text} outside gfx11")
    if op.half == "l" and hi:
        raise EmulatorError(f"operand {op.text} is .l but op_sel selects the high half")
    if hi and width != 16 and op.half is None:
        raise EmulatorError(f"op_sel high half on {width}-bit operand {op.text}")
    r = raw_reader(op, width, ctx, hi=hi, dpp=None, sdwa_sel=sdwa_sel, sext=sext, typ=typ)
    if dpp is not None:
        # DPP permutes the whole 32-bit register; half selection happens afterwards
        if op.kind != "v" or width == 64:
            raise EmulatorError(f"DPP source {op.text} must be a 32-bit VGPR")
        i = op.index
        hi_ = hi or op.half == "h"
        half = width == 16 or op.half is not None

        def r_dpp(w: Wave) -> np.ndarray:
            vals = dpp.values(w, w.v[i])
            if half:
                return (vals >> 16) if hi_ else (vals & 0xFFFF)
            return vals
        r = r_dpp
    if absm or neg:
        base = r
        eff_w = 16 if (op.half is not None and width == 32) else width

        def rm(w: Wave) -> np.ndarray:
            return apply_fmods(base(w), eff_w, absm, neg)
        return rm, op
    return r, op


# ---------------------------------------------------------------------------
# typed operand access (the fast path of the lane-wise builder)

_ROWS = {"u32": "v", "b32": "v", "f32": "vf", "i32": "vi"}       # Wave views of the VGPR file by type
_WIDE = frozenset({"u64", "b64", "i64", "f64"})


def typed_reader(tok: str, typ: str, ctx: DecodeContext, *, hi: bool = False, dpp: Dpp | None = None,
                 sdwa_sel: str | None = None, bitmods: bool = False) -> Reader:
    """`read_operand` followed by `to_typed`: a reader of the operand as typed per-lane values.

    A plain operand (no modifiers, DPP, SDWA, half or sext) of a 32/64-bit type
    is read straight from the register file (a typed view of the VGPR row, a pair
    of words gathered into one uint64, a broadcast SGPR, a constant typed once);
    anything else goes through the generic reader and conversion."""
    r, op = read_operand(tok, typ, ctx, hi=hi, dpp=dpp, sdwa_sel=sdwa_sel, bitmods=bitmods)
    plain = (not (op.neg or op.abs or hi or dpp or sdwa_sel or strip_sext(tok)[1]) and op.half is None
             and (typ in _ROWS or typ in _WIDE))
    if not plain:
        return lambda w: to_typed(r(w), typ)
    dt = _NP[typ]
    if op.kind == "const":
        return lane_constant(to_typed(const_array(op, WIDTH[typ], typ), typ), ctx)
    rows = _ROWS.get(typ)
    if op.kind == "v" and rows is not None:
        i = op.index
        if rows == "v":
            return lambda w: w.v[i]
        if rows == "vf":
            return lambda w: w.vf[i]
        return lambda w: w.vi[i]
    if op.kind == "v":                        # 64-bit: the register pair as one uint64 per lane
        i = op.index

        def pair(w: Wave) -> np.ndarray:
            out = np.empty(w.n, np.uint64)
            words = out.view(np.uint32)
            words[0::2] = w.v[i]
            words[1::2] = w.v[i + 1]
            return out
        return pair if dt is np.uint64 else lambda w: pair(w).view(dt)
    if op.kind == "s" and typ in _WIDE and op.count == 2 and not op.index & 1:
        bcast = lane_constant(np.array([op.index >> 1]), ctx)
        if dt is np.uint64:
            return lambda w: w.s64.take(bcast(w))
        return lambda w: w.s64.take(bcast(w)).view(dt)
    if op.kind == "s" and typ in _ROWS:
        bcast = lane_constant(np.array([op.index]), ctx)
        view = {"v": "s", "vf": "sf", "vi": "si"}[rows]

        def scalar(w: Wave) -> np.ndarray:
            out = getattr(w, view).take(bcast(w))
            out.flags.writeable = False         # like a constant: one value in every lane
            return out
        return scalar
    return lambda w: to_typed(r(w), typ)


def typed_writer(op: Operand, typ: str, ctx: DecodeContext, *, hi: bool = False, zero_high16: bool = False,
                 sdwa: tuple[str, str] | None = None) -> Callable[[Wave, Any, np.ndarray], None]:
    """`to_raw` followed by `vgpr_writer`: writes a typed result to a VGPR destination in `mask`'s lanes.

    A plain 32/64-bit VGPR destination is written through the typed view (no
    conversion to raw bits), with a plain store when `mask` is all lanes."""
    raw_write = vgpr_writer(op, WIDTH[typ], ctx, hi=hi, zero_high16=zero_high16, sdwa=sdwa)
    if op.kind != "v" or op.half is not None or hi or sdwa is not None or not (typ in _ROWS or typ in _WIDE):
        return lambda w, val, mask: raw_write(w, to_raw(val, typ), mask)
    dt = _NP[typ]
    d = op.index
    if typ in _WIDE:
        def write64(w: Wave, val: Any, mask: np.ndarray) -> None:
            words = np.ascontiguousarray(np.asarray(val, dt)).view(np.uint32)
            if mask is w.full:
                w.v[d] = words[0::2]
                w.v[d + 1] = words[1::2]
            else:
                np.copyto(w.v[d], words[0::2], where=mask)
                np.copyto(w.v[d + 1], words[1::2], where=mask)
        return write64
    rows = _ROWS[typ]

    def write(w: Wave, val: Any, mask: np.ndarray) -> None:
        row = getattr(w, rows)[d]
        if mask is w.full:
            row[...] = np.asarray(val, dt)
        else:
            np.copyto(row, np.asarray(val, dt), where=mask)
    return write


# ---------------------------------------------------------------------------
# masks (VCC / SGPR lane masks)

def implicit_vcc(ctx: DecodeContext) -> Operand:
    return Operand("s", VCC_LO, 2 if ctx.wave_size == 64 else 1, text="vcc" if ctx.wave_size == 64 else "vcc_lo")


def check_mask_operand(op: Operand, ctx: DecodeContext, what: str) -> None:
    want = 2 if ctx.wave_size == 64 else 1
    if op.kind == "s" and op.index == NULL:
        return
    if op.kind != "s" or op.count != want:
        raise EmulatorError(f"{what} {op.text} must be {'an SGPR pair' if want == 2 else 'one SGPR'} "
                            f"in wave{ctx.wave_size}")


def mask_reader(op: Operand, ctx: DecodeContext) -> Callable[[Wave], np.ndarray]:
    """Per-lane bools of a mask operand (SGPR/pair, or a constant)."""
    if op.kind == "const":
        bits = const_bits(op, 64 if ctx.wave_size == 64 else 32)
        lanes = ((np.uint64(bits) >> np.arange(ctx.wave_size, dtype=np.uint64)) & np.uint64(1)).astype(bool)
        return lane_constant(lanes, ctx)
    check_mask_operand(op, ctx, "mask operand")
    i, n = op.index, ctx.wave_size
    if i == NULL:
        return lane_constant(np.zeros(1, bool), ctx)
    if ctx.cohort:                          # a lockstep cohort: each member's own mask
        if n == 64 and i & 1:
            raise EmulatorError(f"mask operand {op.text} is not an aligned SGPR pair")
        count = 2 if n == 64 else 1
        return lambda w: w.read_mask(i, count)
    if n == 32:
        return lambda w: lane_mask(32, int(w.s[i]))
    if not i & 1:
        k = i >> 1
        return lambda w: lane_mask(64, int(w.s64[k]))
    return lambda w: lane_mask(64, int(w.s[i]) | (int(w.s[i + 1]) << 32))


def mask_writer(op: Operand, ctx: DecodeContext) -> Callable[[Wave, np.ndarray], None]:
    """Writes per-lane bools (already 0 for inactive lanes) to an SGPR mask / VCC; `null` discards."""
    check_mask_operand(op, ctx, "mask destination")
    i, cnt = op.index, (2 if ctx.wave_size == 64 else 1)
    if i == NULL:
        return lambda w, lanes: None
    if ctx.cohort:                          # a lockstep cohort: each member's lanes to its own SGPRs
        if i + cnt > EXEC_LO or (cnt == 2 and i & 1):
            raise EmulatorError(f"mask destination {op.text}: a cohort writes only aligned non-EXEC masks")
        return lambda w, lanes: w.write_mask(i, cnt, lanes)
    if i + cnt <= EXEC_LO:                  # (EXEC goes through sset, which keeps its lane mask in step)
        if cnt == 1:
            def write32(w: Wave, lanes: np.ndarray) -> None:
                w.s[i] = w.mask_bits(lanes)
            return write32
        if not i & 1:
            k = i >> 1

            def write64(w: Wave, lanes: np.ndarray) -> None:
                w.s64[k] = w.mask_bits(lanes)
            return write64

    def write(w: Wave, lanes: np.ndarray) -> None:
        w.sset(i, w.mask_bits(lanes), cnt)
    return write


# ---------------------------------------------------------------------------
# destination writers

# 16-bit results that keep bits 31:16 even on gfx9 (isa_notes §5.0)
GFX9_PRESERVE16 = frozenset({"v_fmac_f16", "v_mac_f16", "v_fma_mixlo_f16", "v_mad_mixlo_f16",
                             "v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32", "v_cvt_sr_fp8_f32", "v_cvt_sr_bf8_f32"})


def vgpr_writer(op: Operand, width: int, ctx: DecodeContext, *, hi: bool = False, zero_high16: bool = False,
                sdwa: tuple[str, str] | None = None) -> Callable[[Wave, np.ndarray, np.ndarray], None]:
    """Writer of raw bits to a VGPR destination, only in lanes where `mask` is set.

    16-bit results go to bits 15:0 (or 31:16 when `hi` / ``.h``); `zero_high16`
    (gfx9 rule) clears bits 31:16 instead of keeping them.
    """
    if op.kind not in ("v", "a") or (op.kind == "a" and ctx.gfx != 9):
        raise EmulatorError(f"destination {op.text} must be a VGPR (or a gfx9 AGPR)")
    file_ = op.kind
    d = op.index
    if op.half is not None:
        if ctx.gfx != 11:
            raise EmulatorError(f"true16 destination {op.text} outside gfx11")
        if op.half == "l" and hi:
            raise EmulatorError(f"destination {op.text} is .l but op_sel selects the high half")
        hi = hi or op.half == "h"
        if width != 16:
            raise EmulatorError(f"half destination {op.text} for a {width}-bit result")
    if width == 64:
        if op.count != 2:
            raise EmulatorError(f"64-bit destination {op.text} must be a register pair")

        def w64(w: Wave, val: np.ndarray, mask: np.ndarray) -> None:
            v = getattr(w, file_)
            words = np.ascontiguousarray(np.asarray(val, np.uint64)).view(np.uint32)
            if mask is w.full:
                v[d] = words[0::2]
                v[d + 1] = words[1::2]
            else:
                np.copyto(v[d], words[0::2], where=mask)
                np.copyto(v[d + 1], words[1::2], where=mask)
        return w64
    if op.count != 1:
        raise EmulatorError(f"destination {op.text} is a tuple where one register is expected")
    if sdwa is not None:
        sel, unused = sdwa

        def wsd(w: Wave, val: np.ndarray, mask: np.ndarray) -> None:
            row = getattr(w, file_)[d]
            np.copyto(row, sdwa_place(row, np.asarray(val, np.uint32), sel, unused), where=mask)
        return wsd
    if width == 32:
        def w32(w: Wave, val: np.ndarray, mask: np.ndarray) -> None:
            if mask is w.full:
                getattr(w, file_)[d] = np.asarray(val, np.uint32)
            else:
                np.copyto(getattr(w, file_)[d], np.asarray(val, np.uint32), where=mask)
        return w32
    if hi:
        def w16h(w: Wave, val: np.ndarray, mask: np.ndarray) -> None:
            row = getattr(w, file_)[d]
            np.copyto(row, (row & np.uint32(0xFFFF)) | ((np.asarray(val, np.uint32) & 0xFFFF) << 16), where=mask)
        return w16h
    if zero_high16:
        def w16z(w: Wave, val: np.ndarray, mask: np.ndarray) -> None:
            np.copyto(getattr(w, file_)[d], np.asarray(val, np.uint32) & 0xFFFF, where=mask)
        return w16z

    def w16l(w: Wave, val: np.ndarray, mask: np.ndarray) -> None:
        row = getattr(w, file_)[d]
        np.copyto(row, (row & np.uint32(0xFFFF0000)) | (np.asarray(val, np.uint32) & 0xFFFF), where=mask)
    return w16l


# ---------------------------------------------------------------------------
# output modifiers

def float_omod_clamp(x: np.ndarray, omod: float, clamp: bool) -> np.ndarray:
    """VOP3 output modifier then clamp to [0, 1] (NaN -> 0 with DX10_CLAMP / gfx12)."""
    if omod != 1.0:
        x = (x * x.dtype.type(omod)).astype(x.dtype)
    if clamp:
        zero = x.dtype.type(0)
        x = (np.where(np.isnan(x), zero, np.clip(x, zero, x.dtype.type(1))) + zero).astype(x.dtype)  # +0: -0 -> +0
    return x


def split_pair(text: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """The two halves of a VOPD line ``X ... :: Y ...`` as (mnemonic, operands, modifiers)."""
    from ..listing import parse_instruction
    parts = text.split("::")
    if len(parts) != 2:
        raise EmulatorError(f"{text!r} is not a VOPD pair")
    return [parse_instruction(p) for p in parts]
