"""Generic builder for lane-wise VALU ops (VOP1/VOP2/VOP3/VOP3SD/VOPC, with the
_e32/_e64/_dpp/_e64_dpp/_sdwa encodings and VOPD halves).

An op is described by a `Spec`: destination and source types, the per-lane
function, and operand-layout flags (carry out, carry in, accumulator). `build`
turns a Spec plus one instruction's operands/modifiers into a compute/write pair;
keeping the two apart is what lets VOPD read every source of both halves before
either half writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import EmulatorError
from .. import fp
from ..listing import Inst
from ..state import Wave, parse_operand
from .core import DecodeContext, Handler, register
from .valu_common import (
    FLOAT_TYPES,
    GFX9_PRESERVE16,
    WIDTH,
    Compute,
    Dpp,
    Mods,
    Write,
    fail,
    float_omod_clamp,
    implicit_vcc,
    mask_reader,
    mask_writer,
    parse_mods,
    typed_reader,
    typed_writer,
)


@dataclass(frozen=True)
class Spec:
    dst: str | None                      # destination type, None for compares
    srcs: tuple[str, ...]                # source types in printed order (acc source last)
    fn: Callable[..., Any]               # typed sources -> typed result (or (result, carry) with sdst)
    sdst: bool = False                   # printed SGPR carry/flag output after the destination
    cin: str = ""                        # "printed" trailing mask, "optional" (VCC when absent), "vcc" implicit
    acc: bool = False                    # destination is also the last source (fmac, dot2c, ...)
    bitmods: bool = False                # abs/neg allowed on non-float operands (v_cndmask_b32)
    ctx_fn: bool = False                 # fn(ctx, op_mods) returns the per-lane function (arch/modifier-dependent)
    wave_fn: bool = False                # per-lane function gets the Wave first (lane ids)
    int_clamp: Callable[..., Any] | None = None   # variant used with `clamp` on an integer result
    preserve16: bool = False             # 16-bit result keeps bits 31:16 even on gfx9
    cmp: bool = False                    # VOPC: result is a lane mask
    allow: frozenset[str] = frozenset()  # op-specific modifiers (bitop3:, byte_sel:) handed to a ctx_fn


SPECS: dict[str, tuple[Spec, str]] = {}    # base mnemonic -> (spec, class); VOPD halves look up here

_ENCODINGS = (("_e64_dpp", "e64_dpp"), ("_dpp", "dpp"), ("_sdwa", "sdwa"), ("_e32", "e32"), ("_e64", "e64"))


def split_encoding(mnemonic: str) -> tuple[str, str]:
    for suf, enc in _ENCODINGS:
        if mnemonic.endswith(suf):
            return mnemonic[: -len(suf)], enc
    return mnemonic, "plain"


def _check_mods(inst: Inst, enc: str, m: Mods, ctx: DecodeContext) -> None:
    if m.dpp and enc not in ("dpp", "e64_dpp"):
        raise fail(inst, "DPP modifiers without a _dpp encoding")
    if enc in ("dpp", "e64_dpp") and not m.dpp:
        raise fail(inst, "_dpp encoding without a DPP control")
    if m.sdwa and enc != "sdwa":
        raise fail(inst, "SDWA modifiers without the _sdwa encoding")
    if enc == "sdwa" and ctx.gfx != 9:
        raise fail(inst, f"SDWA does not exist on {ctx.arch}")
    if enc in ("e32", "vopd") and (m.op_sel or m.clamp or m.omod != 1.0):
        raise fail(inst, "VOP3 modifiers on a 32-bit encoding")
    if m.op_sel_hi or m.neg_lo or m.neg_hi:
        raise fail(inst, "VOP3P modifiers on a non-packed op")
    if m.op_sel and enc == "sdwa":
        raise fail(inst, "op_sel with SDWA")


@dataclass(frozen=True)
class Lanewise:
    """One decoded lane-wise op: `call(w)` computes the result from the sources, `write(w, out, mask)`
    stores it in the lanes of `mask` (EXEC, or the write mask of a DPP control)."""

    call: Callable[[Wave], Any]
    write: Write
    dpp: Dpp | None = None

    def compute(self, w: Wave) -> tuple[Any, np.ndarray]:
        return self.call(w), (w.mask if self.dpp is None else self.dpp.write_mask(w))

    def handler(self) -> Handler:
        # Float exceptions are the kernel's business: run_launch ignores numpy's warnings for
        # the whole launch (a per-instruction np.errstate cost about a third of the time).
        call, write, dpp = self.call, self.write, self.dpp
        if dpp is None:
            return lambda w: write(w, call(w), w.mask)
        return lambda w: write(w, call(w), dpp.write_mask(w))


def build(spec: Spec, name: str, enc: str, operands: tuple[str, ...], modifiers: tuple[str, ...],
          ctx: DecodeContext, inst: Inst) -> Lanewise:
    """Decode one lane-wise op."""
    m = parse_mods(inst, modifiers, allow=spec.allow)
    _check_mods(inst, enc, m, ctx)
    try:
        fn = spec.fn(ctx, m.other) if spec.ctx_fn else spec.fn
    except (EmulatorError, ValueError) as e:
        raise fail(inst, str(e)) from None
    ops = list(operands)
    if spec.cmp:
        return _build_cmp(spec, fn, name, enc, ops, m, ctx, inst)
    if not ops:
        raise fail(inst, "missing operands")
    dst_tok = ops.pop(0)
    sdst_tok = ops.pop(0) if spec.sdst else None
    nsrc = len(spec.srcs) - (1 if spec.acc else 0)
    cin_tok: str | None = None
    if spec.cin == "printed":
        if len(ops) != nsrc + 1:
            raise fail(inst, f"expected {nsrc} sources and a carry-in mask")
        cin_tok = ops.pop()
    elif spec.cin == "optional" and len(ops) == nsrc + 1:
        cin_tok = ops.pop()
    if len(ops) != nsrc:
        raise fail(inst, f"expected {nsrc} source operands, got {len(ops)}")
    if enc == "e32" and any(t.startswith(("-", "|", "neg(", "abs(")) and not t.lstrip("-")[:1].isdigit()
                            for t in ops):
        raise fail(inst, "source modifiers on a 32-bit encoding")

    op_sel = m.op_sel or ()
    if op_sel and len(op_sel) not in (nsrc, nsrc + 1):
        raise fail(inst, f"op_sel has {len(op_sel)} entries for {nsrc} sources")
    dst_hi = bool(op_sel[nsrc]) if len(op_sel) == nsrc + 1 else False
    dpp = Dpp(inst, m.dpp, ctx) if m.dpp else None
    try:
        getters = []
        for i, (tok, typ) in enumerate(zip(ops, spec.srcs[:nsrc], strict=True)):
            sel = m.sdwa.get(f"src{i}_sel", "DWORD") if enc == "sdwa" and i < 2 else None
            getters.append(typed_reader(tok, typ, ctx, hi=bool(op_sel[i]) if i < len(op_sel) else False,
                                        dpp=dpp if i == 0 else None, sdwa_sel=sel, bitmods=spec.bitmods))
            if enc == "sdwa" and i >= 2:
                raise fail(inst, "SDWA with more than two sources")
        if spec.acc:
            getters.append(typed_reader(dst_tok, spec.srcs[-1], ctx, hi=dst_hi))
        dst_op = parse_operand(dst_tok)
        dtyp = spec.dst
        assert dtyp is not None
        width = WIDTH[dtyp]
        if dst_hi and width != 16:
            raise fail(inst, "op_sel destination bit on a result that is not 16-bit")
        sdwa_dst = (m.sdwa.get("dst_sel", "DWORD"), m.sdwa.get("dst_unused", "UNUSED_PRESERVE")) \
            if enc == "sdwa" else None
        zero16 = (ctx.gfx == 9 and width == 16 and not dst_hi and not spec.preserve16
                  and name not in GFX9_PRESERVE16)
        dwrite = typed_writer(dst_op, dtyp, ctx, hi=dst_hi, zero_high16=zero16, sdwa=sdwa_dst)
        cwrite = mask_writer(parse_operand(sdst_tok), ctx) if sdst_tok is not None else None
        if cin_tok is not None:
            getters.append(mask_reader(parse_operand(cin_tok), ctx))
        elif spec.cin in ("optional", "vcc"):
            getters.append(mask_reader(implicit_vcc(ctx), ctx))
    except EmulatorError as e:
        raise fail(inst, str(e)) from None

    if m.clamp and dtyp not in FLOAT_TYPES:
        if spec.int_clamp is None:
            raise fail(inst, "clamp on this integer op is not implemented")
        fn = spec.int_clamp
    if m.omod != 1.0 and dtyp not in FLOAT_TYPES:
        raise fail(inst, "output modifier on a non-float result")
    if dtyp == "f16" and ctx.extra.get("fp16_ovfl"):
        fn = _saturating_f16(fn, spec.wave_fn)
    fclamp = m.clamp and dtyp in FLOAT_TYPES
    omod = m.omod
    post = (lambda x: float_omod_clamp(x, omod, fclamp)) if (fclamp or omod != 1.0) else None
    if post is not None and omod != 1.0 and dtyp == "f16" and ctx.extra.get("fp16_ovfl"):
        scaled = post
        post = lambda x: fp.saturate_f16(scaled(x), x)  # noqa: E731  (an inf before omod is a true inf)
    call = _caller(fn, getters, spec.wave_fn)
    if cwrite is None and post is None:
        return Lanewise(call, dwrite, dpp)

    def write(w: Wave, out: Any, mask: np.ndarray) -> None:
        if cwrite is not None:
            res, carry = out
            carry = np.asarray(carry, bool)
            cwrite(w, carry if mask is w.full and carry.shape == mask.shape else carry & mask)
        else:
            res = out
        if post is not None:
            res = post(np.asarray(res, np.dtype(_float_dtype(dtyp))))
        dwrite(w, res, mask)

    return Lanewise(call, write, dpp)


def _saturating_f16(fn: Callable[..., Any], wave_fn: bool) -> Callable[..., Any]:
    """`fn` under MODE.FP16_OVFL: overflow of finite sources saturates (fp.saturate_f16)."""
    if wave_fn:
        return lambda w, *srcs: fp.saturate_f16(fn(w, *srcs), *srcs)
    return lambda *srcs: fp.saturate_f16(fn(*srcs), *srcs)


def _caller(fn: Callable[..., Any], getters: list[Callable[[Wave], Any]], wave_fn: bool) -> Callable[[Wave], Any]:
    """w -> fn(*sources) (fn(w, *sources) for `wave_fn`), unrolled for the usual source counts."""
    if wave_fn:
        return lambda w: fn(w, *[g(w) for g in getters])
    if len(getters) == 1:
        (g0,) = getters
        return lambda w: fn(g0(w))
    if len(getters) == 2:
        g0, g1 = getters
        return lambda w: fn(g0(w), g1(w))
    if len(getters) == 3:
        g0, g1, g2 = getters
        return lambda w: fn(g0(w), g1(w), g2(w))
    return lambda w: fn(*[g(w) for g in getters])


def _float_dtype(t: str) -> type:
    return {"f16": np.float16, "f32": np.float32, "f64": np.float64}[t]


# ---------------------------------------------------------------------------
# VOPC

def _build_cmp(spec: Spec, fn: Callable[..., Any], name: str, enc: str, ops: list[str], m: Mods,
               ctx: DecodeContext, inst: Inst) -> Lanewise:
    cmpx = name.startswith("v_cmpx_")
    nsrc = len(spec.srcs)
    if len(ops) == nsrc + 1:
        dst_tok: str | None = ops.pop(0)
    elif len(ops) == nsrc and cmpx and ctx.gfx >= 10:
        dst_tok = None
    else:
        raise fail(inst, f"expected a mask destination and {nsrc} sources")
    if cmpx and ctx.gfx >= 10 and dst_tok is not None:
        raise fail(inst, "gfx10+ v_cmpx has no SGPR destination")
    if enc in ("dpp", "e64_dpp"):
        raise fail(inst, "DPP compares are not implemented")
    if m.clamp or m.omod != 1.0:
        raise fail(inst, "output modifiers on a compare")
    op_sel = m.op_sel or ()
    if op_sel and len(op_sel) not in (nsrc, nsrc + 1):
        raise fail(inst, f"op_sel has {len(op_sel)} entries for {nsrc} sources")
    try:
        getters = []
        for i, (tok, typ) in enumerate(zip(ops, spec.srcs, strict=True)):
            sel = m.sdwa.get(f"src{i}_sel", "DWORD") if enc == "sdwa" else None
            getters.append(typed_reader(tok, typ, ctx, hi=bool(op_sel[i]) if i < len(op_sel) else False,
                                        sdwa_sel=sel))
        dwrite = mask_writer(parse_operand(dst_tok), ctx) if dst_tok is not None else None
    except EmulatorError as e:
        raise fail(inst, str(e)) from None
    lanewise = _caller(fn, getters, False)

    def call(w: Wave) -> np.ndarray:
        return np.asarray(lanewise(w), bool)

    def write(w: Wave, res: np.ndarray, mask: np.ndarray) -> None:
        lanes = res if mask is w.full and res.shape == mask.shape else res & mask
        if dwrite is not None:
            dwrite(w, lanes)
        if cmpx:
            w.set_exec(w.mask_bits(lanes))

    return Lanewise(call, write)


# ---------------------------------------------------------------------------
# registration

def make_handler(compute: Compute, write: Write) -> Handler:
    # (no np.errstate here either: see Lanewise.handler)
    def handler(w: Wave) -> None:
        out, mask = compute(w)
        write(w, out, mask)
    return handler


def vop(names: str | tuple[str, ...], spec: Spec, cls: str = "valu", *, e64_dpp: bool = True) -> None:
    """Register lane-wise ops; each name also answers to its `_e64_dpp` form (VOP3 + DPP, gfx11+)."""
    if isinstance(names, str):
        names = tuple(names.split())

    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        base, enc = split_encoding(inst.mnemonic)
        return build(spec, base, enc, inst.operands, inst.modifiers, ctx, inst).handler()

    all_names: list[str] = []
    for n in names:
        SPECS[n] = (spec, cls)
        all_names.append(n)
        if e64_dpp:
            all_names.append(n + "_e64_dpp")
    register(*all_names, cls=cls)(factory)


def build_by_name(name: str, operands: tuple[str, ...], modifiers: tuple[str, ...], ctx: DecodeContext,
                  inst: Inst, enc: str = "e32") -> tuple[Compute, Write, str]:
    """Build a registered lane-wise op from parts (used for VOPD halves)."""
    try:
        spec, cls = SPECS[name]
    except KeyError:
        raise fail(inst, f"{name} is not implemented") from None
    op = build(spec, name, enc, operands, modifiers, ctx, inst)
    return op.compute, op.write, cls
