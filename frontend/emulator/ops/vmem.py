"""Global, flat and buffer memory: loads, stores and atomics, bounds-checked per lane."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import EmulatorError
from ..listing import Inst
from ..state import NULL, Operand, Wave, parse_operand
from .core import DecodeContext, Handler, register
from .salu import sreader

_U64 = np.uint64


def _offset(inst: Inst) -> int:
    for m in inst.modifiers:
        if m.startswith("offset:"):
            return int(m.split(":", 1)[1], 0)
    return 0


def address_reader(vaddr: Operand, saddr: Operand, offset: int) -> Callable[[Wave], np.ndarray]:
    """Per-lane 64-bit addresses: the VGPR pair with `off`, else SGPR pair + zext(VGPR)."""
    if vaddr.kind != "v":
        raise EmulatorError(f"address operand {vaddr.text!r} is not a VGPR")
    v = vaddr.index
    if saddr.kind == "off" or (saddr.kind == "s" and saddr.index == NULL):
        if vaddr.count != 2:
            raise EmulatorError("a global address without an SGPR base needs a VGPR pair")

        off = _U64(offset & 0xFFFFFFFFFFFFFFFF)

        def full(w: Wave) -> np.ndarray:
            out = np.empty(w.n, _U64)
            words = out.view(np.uint32)
            words[0::2] = w.v[v]
            words[1::2] = w.v[v + 1]
            return out + off if offset else out
        return full
    base = sreader(saddr, 64)

    def based(w: Wave) -> np.ndarray:
        return w.v[v].astype(_U64) + _U64((base(w) + offset) & 0xFFFFFFFFFFFFFFFF)
    return based


_LOADS = {  # name: (bytes, how the result lands in the destination)
    "dword": (4, "full"), "b32": (4, "full"), "dwordx2": (8, "full"), "b64": (8, "full"),
    "dwordx3": (12, "full"), "b96": (12, "full"), "dwordx4": (16, "full"), "b128": (16, "full"),
    "ubyte": (1, "u"), "u8": (1, "u"), "sbyte": (1, "s"), "i8": (1, "s"),
    "ushort": (2, "u"), "u16": (2, "u"), "sshort": (2, "s"), "i16": (2, "s"),
    "short_d16": (2, "lo"), "d16_b16": (2, "lo"), "short_d16_hi": (2, "hi"), "d16_hi_b16": (2, "hi"),
    "ubyte_d16": (1, "lo_u8"), "d16_u8": (1, "lo_u8"), "ubyte_d16_hi": (1, "hi_u8"), "d16_hi_u8": (1, "hi_u8"),
    "sbyte_d16": (1, "lo_i8"), "d16_i8": (1, "lo_i8"), "sbyte_d16_hi": (1, "hi_i8"), "d16_hi_i8": (1, "hi_i8"),
}
_STORES = {
    "dword": (4, "full"), "b32": (4, "full"), "dwordx2": (8, "full"), "b64": (8, "full"),
    "dwordx3": (12, "full"), "b96": (12, "full"), "dwordx4": (16, "full"), "b128": (16, "full"),
    "byte": (1, "lo"), "b8": (1, "lo"), "short": (2, "lo"), "b16": (2, "lo"),
    "byte_d16_hi": (1, "hi"), "d16_hi_b8": (1, "hi"), "short_d16_hi": (2, "hi"), "d16_hi_b16": (2, "hi"),
}


def data_file(op: Operand, ctx: DecodeContext) -> str:
    """The register file of a memory instruction's data operand: "v", or "a" -- AGPRs, which gfx90a
    and later load into and store from directly (the instruction's acc bit; the compiler puts loads
    there when the accumulators leave it no VGPRs)."""
    if op.kind == "a" and ctx.gfx == 9:
        return "a"
    if op.kind != "v":
        raise EmulatorError(f"data operand {op.text!r} is not a VGPR{' or AGPR' if ctx.gfx == 9 else ''}")
    return "v"


def vgpr_only(op: Operand) -> int:
    """A data operand of an instruction modeled on VGPRs only (atomics, lane shuffles): its index."""
    if op.kind != "v":
        raise EmulatorError(f"data operand {op.text!r}: only VGPRs are modeled for this instruction")
    return op.index


def place_loaded(w: Wave, dst: int, raw: np.ndarray, how: str, mask: np.ndarray, file_: str = "v") -> None:
    """Write (lanes, nbytes) loaded bytes into registers of `file_` (`data_file`) starting at `dst`."""
    regs = w.a if file_ == "a" else w.v
    if how == "full":
        words = raw.view(np.uint32)
        if mask is w.full:
            regs[dst:dst + words.shape[1]] = words.T
            return
        for j in range(words.shape[1]):
            np.copyto(regs[dst + j], words[:, j], where=mask)
        return
    size = raw.shape[1]
    val = raw.view(np.uint16)[:, 0] if size == 2 else raw[:, 0]
    val = val.astype(np.uint32)
    if how in ("s", "lo_i8", "hi_i8"):
        bits = 8 * size
        val = np.where(val >> (bits - 1), val | np.uint32((0xFFFFFFFF << bits) & 0xFFFFFFFF), val)
    old = regs[dst]
    if how in ("lo", "lo_u8", "lo_i8"):
        val = (old & np.uint32(0xFFFF0000)) | (val & np.uint32(0xFFFF))
    elif how in ("hi", "hi_u8", "hi_i8"):
        val = (old & np.uint32(0xFFFF)) | ((val & np.uint32(0xFFFF)) << np.uint32(16))
    np.copyto(regs[dst], val, where=mask)


def store_bytes(w: Wave, src: int, size: int, how: str, file_: str = "v") -> np.ndarray:
    """(lanes, size) bytes to store from registers of `file_` (`data_file`) starting at `src`."""
    regs = w.a if file_ == "a" else w.v
    if how == "full":
        return np.ascontiguousarray(regs[src:src + size // 4].T).view(np.uint8).reshape(w.n, size)
    val = regs[src] >> np.uint32(16) if how == "hi" else regs[src]
    return np.ascontiguousarray(val).view(np.uint8).reshape(w.n, 4)[:, :size]


def _global_load(size: int, how: str):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        dst, addr = ops[0].index, address_reader(ops[1], ops[2] if len(ops) > 2 else Operand("off"), _offset(inst))
        file_ = data_file(ops[0], ctx)

        def run(w: Wave) -> None:
            mask = w.mask
            mem, addrs = w.group.mem, addr(w)
            raw = mem.load(addrs, size, mask, mask is w.full)
            if mem.tracer is not None:
                mem.tracer(w, addrs, size, mask, False)
            place_loaded(w, dst, raw, how, mask, file_)
            w.group.stats.bytes_loaded["global"] += size * w.exec.bit_count()
        return run
    return factory


def _global_store(size: int, how: str):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        addr, src = address_reader(ops[0], ops[2] if len(ops) > 2 else Operand("off"), _offset(inst)), ops[1].index
        file_ = data_file(ops[1], ctx)

        def run(w: Wave) -> None:
            mask = w.mask
            mem, addrs = w.group.mem, addr(w)
            mem.store(addrs, store_bytes(w, src, size, how, file_), mask, mask is w.full)
            if mem.tracer is not None:
                mem.tracer(w, addrs, size, mask, True)
            w.group.stats.bytes_stored["global"] += size * w.exec.bit_count()
        return run
    return factory


for _suffix, (_size, _how) in _LOADS.items():
    for _prefix in ("global_load_", "flat_load_"):
        register(_prefix + _suffix, cls="vmem_load")(_global_load(_size, _how))
for _suffix, (_size, _how) in _STORES.items():
    for _prefix in ("global_store_", "flat_store_"):
        register(_prefix + _suffix, cls="vmem_store")(_global_store(_size, _how))


# --- atomics ---------------------------------------------------------------------------
def _smax(o: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.where(o.view(np.int32) >= v.view(np.int32), o, v)


def _smin(o: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.where(o.view(np.int32) <= v.view(np.int32), o, v)


def _inc(o: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.where(o >= v, np.uint32(0), o + np.uint32(1))


def _dec(o: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.where((o == 0) | (o > v), v, o - np.uint32(1))


# new = fn(old, value) over uint32 arrays: all lanes at once when they hit distinct dwords, else
# one lane after another (float32 adds round as numpy's float32 add does).
_ATOMIC32: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "add_u32": np.add, "sub": np.subtract, "sub_u32": np.subtract,
    "swap": lambda o, v: v, "swap_b32": lambda o, v: v,
    "and": np.bitwise_and, "and_b32": np.bitwise_and, "or": np.bitwise_or, "or_b32": np.bitwise_or,
    "xor": np.bitwise_xor, "xor_b32": np.bitwise_xor,
    "umax": np.maximum, "max_u32": np.maximum, "umin": np.minimum, "min_u32": np.minimum,
    "smax": _smax, "max_i32": _smax, "smin": _smin, "min_i32": _smin,
    "inc": _inc, "inc_u32": _inc, "dec": _dec, "dec_u32": _dec,
    "add_f32": lambda o, v: (o.view(np.float32) + v.view(np.float32)).view(np.uint32),
}


def _returns(inst: Inst) -> bool:
    return any(m in ("sc0", "glc", "th:TH_ATOMIC_RETURN") or m.startswith("th:TH_ATOMIC_RETURN")
               for m in inst.modifiers)


def _atomic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None):
    """fn(old, value) -> new over uint32 arrays; None means compare-and-swap (data pair = {new, compare})."""
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        ret = _returns(inst)
        if ret:
            dst, ops = vgpr_only(ops[0]), ops[1:]
        addr = address_reader(ops[0], ops[2] if len(ops) > 2 else Operand("off"), _offset(inst))
        data = vgpr_only(ops[1])

        def new(w: Wave, olds: np.ndarray, lanes: slice) -> np.ndarray:
            vals = w.v[data, lanes]
            if fn is None:
                return np.where(olds == w.v[data + 1, lanes], vals, olds)
            return fn(olds, vals)

        def run(w: Wave) -> None:
            mask = w.exec_mask()
            if not mask.any():
                return
            addrs = addr(w)
            mem = w.group.mem
            raw = mem.load(addrs, 4, mask)                 # bounds check of every active lane
            if mem.tracer is not None:
                mem.tracer(w, addrs, 4, mask, True, ret)   # read-modify-write: a dirty line
            active = addrs[mask]
            if not np.count_nonzero(active % 4) and len(np.unique(active)) == len(active):
                # distinct dwords: lane order changes nothing, so all lanes at once
                olds = np.ascontiguousarray(raw).view(np.uint32).reshape(w.n)
                news = np.ascontiguousarray(new(w, olds, slice(None)), np.uint32)
                mem.store(addrs, news.view(np.uint8).reshape(w.n, 4), mask)
            else:
                olds = np.zeros(w.n, np.uint32)
                for lane in np.flatnonzero(mask):          # lanes serialised in lane order
                    cell = mem.view(int(addrs[lane]), 4).view(np.uint32)
                    olds[lane] = cell[0]
                    cell[:] = new(w, cell.copy(), slice(lane, lane + 1))
            if ret:
                np.copyto(w.v[dst], olds, where=mask)
            count = int(mask.sum())
            w.group.stats.bytes_loaded["global"] += 4 * count
            w.group.stats.bytes_stored["global"] += 4 * count
        return run
    return factory


for _suffix, _fn in _ATOMIC32.items():
    for _prefix in ("global_atomic_", "flat_atomic_"):
        register(_prefix + _suffix, cls="vmem_atomic")(_atomic(_fn))
for _prefix in ("global_atomic_", "flat_atomic_"):
    register(_prefix + "cmpswap", _prefix + "cmpswap_b32", cls="vmem_atomic")(_atomic(None))


# --- raw buffer loads/stores (offen or not; no idxen) ----------------------------------------
# The descriptor (V#) is base (48 bits), stride (must be 0: raw), num_records (bytes). A lane's
# byte address is base + its VGPR (offen) + SGPR soffset + the instruction's offset; an access
# wholly at or past num_records is out of range: loads return zero, stores are dropped (AMD's ISA
# guides, "Range checking"; what CK's padding relies on). Whether soffset counts in that check is
# not settled by the sources at hand: LLVM's intrinsic definitions (IntrinsicsAMDGPU.td, the raw
# buffer loads) call it "excluded from bounds checking", Triton's Gluon docs for AMD buffer
# descriptors count it. So an access that one reading puts in range and the other out is refused;
# the kernels keep the two readings equal (rows past the end are past it by their VGPR offset
# alone). An access straddling num_records is refused too: it is checked in dword pieces whose
# rule differs across generations, and the kernels never need it. On gfx9 a V# with DATA_FORMAT 0
# (invalid) is refused (CK sets 32: dword 3 = 0x00020000), as is one with ADD_TID_ENABLE (not
# modeled). gfx11/gfx12 are refused altogether: their range check follows the descriptor's
# OOB_SELECT, which is not modeled, and no kernel issues buffer instructions there.
def _buffer(size: int, how: str, store: bool):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        data, voff, rsrc, soff = ops[0].index, ops[1], ops[2], sreader(ops[3], 32)
        file_ = data_file(ops[0], ctx)
        offen = "offen" in inst.modifiers
        if "idxen" in inst.modifiers:
            raise EmulatorError("buffer idxen addressing is not implemented")
        imm = _offset(inst)
        r = rsrc.index
        gfx9 = ctx.gfx == 9

        def run(w: Wave) -> None:
            if not gfx9:
                raise EmulatorError(f"{inst.mnemonic}: buffer instructions on {ctx.arch} are not modeled (their range "
                                    "check follows the descriptor's OOB_SELECT)")
            mask = w.exec_mask()
            word1, word3 = int(w.s[r + 1]), int(w.s[r + 3])
            if word1 >> 16 & 0x3FFF:
                raise EmulatorError(f"{inst.mnemonic}: buffer stride {word1 >> 16 & 0x3FFF} (only raw buffers, "
                                    "stride 0, are modeled)")
            if not word3 >> 15 & 0xF or word3 >> 23 & 1:
                raise EmulatorError(f"{inst.mnemonic}: gfx9 buffer descriptor word 3 0x{word3:08x} (DATA_FORMAT 0 or "
                                    "ADD_TID_ENABLE) is not modeled")
            base = int(w.s[r]) | ((word1 & 0xFFFF) << 32)
            num_records = int(w.s[r + 2])
            own = (w.v[voff.index].astype(np.int64) if offen else np.zeros(w.n, np.int64)) + imm
            off = own + soff(w)
            inside = mask & (off >= 0) & (off + size <= num_records)
            for at in (off, own):
                straddle = mask & (at < num_records) & (at + size > num_records)
                if straddle.any():
                    lane = int(np.flatnonzero(straddle)[0])
                    first = int(at[lane])
                    raise EmulatorError(f"{inst.mnemonic}: lane {lane} accesses bytes {first}..{first + size - 1} of a "
                                        f"buffer of {num_records}: partly out of range is not modeled")
            differ = inside != (mask & (own >= 0) & (own + size <= num_records))
            if differ.any():
                lane = int(np.flatnonzero(differ)[0])
                raise EmulatorError(f"{inst.mnemonic}: lane {lane}'s access at {int(off[lane])} (VGPR and instruction "
                                    f"offset {int(own[lane])}) of a buffer of {num_records} is in range by one reading "
                                    "of the range check and out by the other (whether the SGPR offset counts): not "
                                    "modeled")
            addrs = (off + base).astype(np.uint64)
            if w.group.mem.tracer is not None:
                w.group.mem.tracer(w, addrs, size, inside, store)
            if store:
                w.group.mem.store(addrs, store_bytes(w, data, size, how, file_), inside)
                w.group.stats.bytes_stored["global"] += size * int(inside.sum())
            else:
                raw = w.group.mem.load(addrs, size, inside)
                place_loaded(w, data, raw, how, mask, file_)
                w.group.stats.bytes_loaded["global"] += size * int(inside.sum())
        return run
    return factory


for _suffix, (_size, _how) in _LOADS.items():
    if "d16" not in _suffix:
        register("buffer_load_" + _suffix, cls="vmem_load")(_buffer(_size, _how, False))
for _suffix in ("dword", "b32", "dwordx2", "b64", "dwordx4", "b128"):
    register("buffer_store_" + _suffix, cls="vmem_store")(_buffer(_LOADS[_suffix][0], "full", True))
