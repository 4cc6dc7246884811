"""LDS (ds_*) loads, stores, atomics, and the LDS-crossbar lane shuffles.

LDS addresses are 32-bit byte offsets into the workgroup's allocation. Hardware
returns 0 for reads past the allocation and drops such writes; the emulator
faults instead, because a decode kernel that does it has a bug. In strict mode a
read of LDS bytes no lane has written faults too.

The LDS bytes counted (the model's LDS roof) are bank bytes: an access narrower than a
dword (u8/u16 reads, b8/b16 writes) takes its bank for a cycle as a dword does, so it
counts 4 bytes a lane (an assumption: the banks are 4 bytes wide, and AMD's guides give
no narrower rate).
"""

from __future__ import annotations

import numpy as np

from ...errors import EmulatorError, EmulatorFault
from ..listing import Inst
from ..memory import aligned
from ..state import Wave, parse_operand
from .core import DecodeContext, Handler, register
from .vmem import data_file, place_loaded, store_bytes, vgpr_only


def _mods(inst: Inst) -> dict[str, int]:
    out = {}
    for m in inst.modifiers:
        k, _, v = m.partition(":")
        if v and k in ("offset", "offset0", "offset1"):
            out[k] = int(v, 0)
    return out


def _lds_rows(w: Wave, addrs: np.ndarray, size: int, mask: np.ndarray, full: bool) -> np.ndarray:
    """The byte offset of each active lane's access (rows of `Workgroup.lds_window`), checked."""
    g = w.group
    a = np.asarray(addrs, np.int64)
    if not full:
        a = a[mask]
    limit = g.lds_size - size
    if limit < 0 or np.count_nonzero(a.view(np.uint64) > np.uint64(limit)):     # negative offsets wrap high
        lane = int(np.flatnonzero(mask)[np.argmax((a < 0) | (a + size > g.lds_size))])
        raise EmulatorFault(f"lane {lane} accessed {size} LDS bytes at offset {int(addrs[lane])}, outside the "
                            f"workgroup's {g.lds_size} bytes of LDS")
    base = g.lane_base                  # a cohort of several workgroups: each lane's own workgroup's LDS
    if base is not None:
        a = a + (base if full else base[mask])
    return a


def _read(w: Wave, addrs: np.ndarray, size: int, mask: np.ndarray) -> np.ndarray:
    full = mask is w.full
    active = w.n if full else int(np.count_nonzero(mask))
    if not active:
        return np.zeros((w.n, size), np.uint8)
    rows = _lds_rows(w, addrs, size, mask, full)
    g = w.group
    if g.lds_written is not None:
        written = g.lds_written[rows[:, None] + np.arange(size)]
        if not written.all():
            lane = int(np.flatnonzero(mask)[np.flatnonzero(~written.all(axis=1))[0]])
            raise EmulatorFault(f"strict LDS: lane {lane} read uninitialized LDS at offset {int(addrs[lane])}")
    at = aligned(rows, size)
    vals = g.lds_blocks(size).take(at, axis=0) if at is not None else g.lds_window(size)[rows]
    if full:
        out = vals
    else:
        out = np.zeros((w.n, size), np.uint8)
        out[mask] = vals
    g.stats.bytes_loaded["lds"] += max(size, 4) * active
    return out


def _write(w: Wave, addrs: np.ndarray, data: np.ndarray, mask: np.ndarray) -> None:
    full = mask is w.full
    active = w.n if full else int(np.count_nonzero(mask))
    if active:
        size = data.shape[1]
        rows = _lds_rows(w, addrs, size, mask, full)
        g = w.group
        at = aligned(rows, size)
        if at is not None:
            g.lds_blocks(size)[at] = data if full else data[mask]     # later lanes win on overlap
        else:
            g.lds_window(size)[rows] = data if full else data[mask]
        if g.lds_written is not None:
            g.lds_written[rows[:, None] + np.arange(size)] = True
        g.stats.bytes_stored["lds"] += max(size, 4) * active


_LOAD = {"ds_read_b32": (4, "full"), "ds_load_b32": (4, "full"), "ds_read_b64": (8, "full"),
         "ds_load_b64": (8, "full"), "ds_read_b96": (12, "full"), "ds_load_b96": (12, "full"),
         "ds_read_b128": (16, "full"), "ds_load_b128": (16, "full"), "ds_read_u8": (1, "u"),
         "ds_load_u8": (1, "u"), "ds_read_i8": (1, "s"), "ds_load_i8": (1, "s"), "ds_read_u16": (2, "u"),
         "ds_load_u16": (2, "u"), "ds_read_i16": (2, "s"), "ds_load_i16": (2, "s"),
         "ds_read_u16_d16": (2, "lo"), "ds_load_u16_d16": (2, "lo"), "ds_read_u16_d16_hi": (2, "hi"),
         "ds_load_u16_d16_hi": (2, "hi"), "ds_read_u8_d16": (1, "lo_u8"), "ds_load_u8_d16": (1, "lo_u8"),
         "ds_read_u8_d16_hi": (1, "hi_u8"), "ds_load_u8_d16_hi": (1, "hi_u8"), "ds_read_i8_d16": (1, "lo_i8"),
         "ds_load_i8_d16": (1, "lo_i8"), "ds_read_i8_d16_hi": (1, "hi_i8"), "ds_load_i8_d16_hi": (1, "hi_i8")}
_STORE = {"ds_write_b32": (4, "full"), "ds_store_b32": (4, "full"), "ds_write_b64": (8, "full"),
          "ds_store_b64": (8, "full"), "ds_write_b96": (12, "full"), "ds_store_b96": (12, "full"),
          "ds_write_b128": (16, "full"), "ds_store_b128": (16, "full"), "ds_write_b8": (1, "lo"),
          "ds_store_b8": (1, "lo"), "ds_write_b16": (2, "lo"), "ds_store_b16": (2, "lo"),
          "ds_write_b8_d16_hi": (1, "hi"), "ds_store_b8_d16_hi": (1, "hi"), "ds_write_b16_d16_hi": (2, "hi"),
          "ds_store_b16_d16_hi": (2, "hi")}


def _load(size: int, how: str):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        dst, a, off = ops[0].index, ops[1].index, _mods(inst).get("offset", 0)
        file_ = data_file(ops[0], ctx)

        def run(w: Wave) -> None:
            mask = w.exec_mask()
            place_loaded(w, dst, _read(w, w.v[a].astype(np.int64) + off, size, mask), how, mask, file_)
        return run
    return factory


def _store(size: int, how: str):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        a, src, off = ops[0].index, ops[1].index, _mods(inst).get("offset", 0)
        file_ = data_file(ops[1], ctx)

        def run(w: Wave) -> None:
            mask = w.exec_mask()
            _write(w, w.v[a].astype(np.int64) + off, store_bytes(w, src, size, how, file_), mask)
        return run
    return factory


for _name, (_size, _how) in _LOAD.items():
    register(_name, cls="lds")(_load(_size, _how))
for _name, (_size, _how) in _STORE.items():
    register(_name, cls="lds")(_store(_size, _how))


def _two(size: int, scale: int, store: bool):
    """read2/write2 (and the stride64 forms): two elements at a + scale*offset0 and a + scale*offset1."""
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        m = _mods(inst)
        o0, o1 = m.get("offset0", 0) * scale, m.get("offset1", 0) * scale
        words = size // 4
        if store:
            a, d0, d1 = ops[0].index, ops[1].index, ops[2].index
            f0, f1 = data_file(ops[1], ctx), data_file(ops[2], ctx)

            def run_store(w: Wave) -> None:
                mask = w.exec_mask()
                base = w.v[a].astype(np.int64)
                _write(w, base + o0, store_bytes(w, d0, size, "full", f0), mask)
                _write(w, base + o1, store_bytes(w, d1, size, "full", f1), mask)
            return run_store
        dst, a = ops[0].index, ops[1].index
        file_ = data_file(ops[0], ctx)

        def run_load(w: Wave) -> None:
            mask = w.exec_mask()
            base = w.v[a].astype(np.int64)
            first, second = _read(w, base + o0, size, mask), _read(w, base + o1, size, mask)
            place_loaded(w, dst, first, "full", mask, file_)
            place_loaded(w, dst + words, second, "full", mask, file_)
        return run_load
    return factory


for _names, _size, _scale, _st in (
        (("ds_read2_b32", "ds_load_2addr_b32"), 4, 4, False),
        (("ds_read2st64_b32", "ds_load_2addr_stride64_b32"), 4, 256, False),
        (("ds_read2_b64", "ds_load_2addr_b64"), 8, 8, False),
        (("ds_read2st64_b64", "ds_load_2addr_stride64_b64"), 8, 512, False),
        (("ds_write2_b32", "ds_store_2addr_b32"), 4, 4, True),
        (("ds_write2st64_b32", "ds_store_2addr_stride64_b32"), 4, 256, True),
        (("ds_write2_b64", "ds_store_2addr_b64"), 8, 8, True),
        (("ds_write2st64_b64", "ds_store_2addr_stride64_b64"), 8, 512, True)):
    register(*_names, cls="lds")(_two(_size, _scale, _st))


# --- atomics -------------------------------------------------------------------------------
def _f32_add(a: np.uint32, b: np.uint32) -> np.uint32:
    return np.array([a, b], np.uint32).view(np.float32).sum(dtype=np.float32).view(np.uint32)


def _s(v: int) -> int:
    return v - (1 << 32) if v >> 31 else v


_DS_ATOMIC = {
    "add_u32": lambda o, v: (o + v) & 0xFFFFFFFF, "sub_u32": lambda o, v: (o - v) & 0xFFFFFFFF,
    "and_b32": lambda o, v: o & v, "or_b32": lambda o, v: o | v, "xor_b32": lambda o, v: o ^ v,
    "max_u32": max, "min_u32": min, "max_i32": lambda o, v: o if _s(o) >= _s(v) else v,
    "min_i32": lambda o, v: o if _s(o) <= _s(v) else v,
    "add_f32": lambda o, v: int(_f32_add(np.uint32(o), np.uint32(v))),
    "wrxchg_rtn_b32": lambda o, v: v, "storexchg_rtn_b32": lambda o, v: v,
}


def _ds_atomic(fn, ret: bool):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        if ret:
            dst, ops = vgpr_only(ops[0]), ops[1:]
        a, data, off = ops[0].index, vgpr_only(ops[1]), _mods(inst).get("offset", 0)

        def run(w: Wave) -> None:
            mask = w.exec_mask()
            addrs = w.v[a].astype(np.int64) + off
            _read(w, addrs, 4, mask)                               # checks every lane first
            cells = w.group.lds.view(np.uint32)
            olds = np.zeros(w.n, np.uint32)
            for lane in np.flatnonzero(mask):
                i = int(addrs[lane]) // 4
                olds[lane] = cells[i]
                cells[i] = fn(int(cells[i]), int(w.v[data, lane]))
            if ret:
                np.copyto(w.v[dst], olds, where=mask)
            w.group.stats.bytes_stored["lds"] += 4 * int(mask.sum())
        return run
    return factory


for _op, _fn in _DS_ATOMIC.items():
    if _op.endswith("_rtn_b32"):
        register(f"ds_{_op}", cls="lds")(_ds_atomic(_fn, True))
        continue
    register(f"ds_{_op}", cls="lds")(_ds_atomic(_fn, False))
    base, _, ty = _op.rpartition("_")
    register(f"ds_{base}_rtn_{ty}", cls="lds")(_ds_atomic(_fn, True))


# --- lane shuffles through the LDS crossbar ---------------------------------------------------
def _raw_offset(inst: Inst) -> int:
    # DS encodings keep offset0/offset1 in the low 16 bits of the first dword on all five archs.
    return int.from_bytes(inst.encoding[:2], "little")


@register("ds_swizzle_b32", cls="lds")
def _swizzle(inst: Inst, ctx: DecodeContext) -> Handler:
    ops = [parse_operand(t) for t in inst.operands]
    dst, src = vgpr_only(ops[0]), vgpr_only(ops[1])
    pattern = _raw_offset(inst)
    n = ctx.wave_size
    lanes = np.arange(n)
    if pattern >= 0xE000:
        raise EmulatorError(f"ds_swizzle mode 0x{pattern:04x} (gfx10+ FFT/rotate modes) is not implemented")
    if pattern & 0x8000:                     # quad permute: 2-bit selector per lane of each quad
        sel = np.array([(pattern >> (2 * j)) & 3 for j in range(4)])
        source = (lanes & ~3) | sel[lanes & 3]
    else:                                    # bit-mask mode inside each 32-lane half
        and_m, or_m, xor_m = pattern & 0x1F, (pattern >> 5) & 0x1F, (pattern >> 10) & 0x1F
        source = (lanes & ~31) | ((((lanes & 31) & and_m) | or_m) ^ xor_m)

    def run(w: Wave) -> None:
        mask = w.exec_mask()
        vals = np.where(mask[source], w.v[src][source], np.uint32(0))   # inactive sources read 0
        np.copyto(w.v[dst], vals, where=mask)
    return run


def _permute(push: bool):
    def factory(inst: Inst, ctx: DecodeContext) -> Handler:
        ops = [parse_operand(t) for t in inst.operands]
        dst, a, src = vgpr_only(ops[0]), ops[1].index, vgpr_only(ops[2])
        off = _mods(inst).get("offset", 0)
        n = ctx.wave_size

        def run(w: Wave) -> None:
            mask = w.exec_mask()
            slot = ((w.v[a].astype(np.int64) + off) >> 2) % n
            if push:
                out = np.zeros(n, np.uint32)
                for lane in np.flatnonzero(mask):          # highest lane wins on collisions
                    out[slot[lane]] = w.v[src, lane]
            else:
                out = np.where(mask[slot], w.v[src][slot], np.uint32(0))
            np.copyto(w.v[dst], out, where=mask)
        return run
    return factory


register("ds_bpermute_b32", cls="lds")(_permute(False))
register("ds_permute_b32", cls="lds")(_permute(True))
