"""A code object decoded once: instructions, their handlers, and where kernels start."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import re
import threading
import weakref

from ..arch import ArchInfo
from ..codeobject import CodeObject, Kernel
from ..errors import EmulatorError
from .listing import AddressIndex, Inst, Listing, as_table, read_table
from .mode import FloatMode, float_mode
from .ops import CLASSES, DecodeContext, Handler, load_all, lookup
from .ops.salu import nop_factory, vm_wait_counts, wait_factory
from .ops.valu_common import split_pair
from .state import EXEC_HI, EXEC_LO, NULL, VCC_HI, VCC_LO, Wave, parse_operand

# What a lockstep cohort may execute as one: lane-wise vector, LDS and memory instructions,
# including those that read or write lane masks in SGPRs (compares, carries, cndmask, also in a
# VOPD half: each member's own mask, see `_mask_operands`; div_fmas reads VCC as one; cmpx writes
# each member's EXEC), and permlane16/x16 (they move data inside rows of 16 lanes, never across a
# wave). Out: anything that names EXEC, moves data across a wave (DPP, readlane, permlane64,
# swizzle, permute, mbcnt), uses M0 (LDS-direct loads, movrel, interp, addtid), or whose effect
# depends on the order of waves (atomics, GWS, append/consume).
_LOCKSTEP_CLASSES = frozenset({"valu", "trans", "lds", "vmem_load", "vmem_store", "matrix"})
_NOT_LANE_WISE = re.compile(r"\b(?!v_permlanex?16_b32\b)\w*lane|mbcnt|permute|swizzle|addtid|gws|append|consume|"
                            r"atomic|lds|movrel|interp|dpp|\bexec|\bscc|\bm0\b|\bttmp|quad_perm|row_|wave_|bank_mask")


def _mask_operands(mnemonic: str, count: int) -> frozenset[int]:
    """Positions of the operands a lane-wise instruction reads or writes as lane masks."""
    if "cmp" in mnemonic:                 # a destination mask and two sources (gfx10+ cmpx: no destination)
        return frozenset({0}) if count == 3 else frozenset()
    if "cndmask" in mnemonic:
        return frozenset({count - 1})
    if "addc" in mnemonic or "subb" in mnemonic or "_co_ci" in mnemonic:
        return frozenset({1, count - 1})
    if ("_co_" in mnemonic or mnemonic.endswith("_co") or "mad_u64" in mnemonic or "mad_i64" in mnemonic
            or "div_scale" in mnemonic):
        return frozenset({1})
    return frozenset()


# Scalar instructions besides SALU a cohort runs once (see `cohort_plan`).
_SCALAR_OK = frozenset({("branch", m) for m in ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz",
                                                "s_cbranch_vccnz", "s_cbranch_execz", "s_cbranch_execnz",
                                                "s_endpgm")}
                       | {("barrier", "s_barrier"), ("barrier", "s_barrier_signal")})
# SALU ops whose first operand is read too (compares, the K forms that update it, conditional moves).
_READS_FIRST_OPERAND = ("s_cmp", "s_bitcmp", "s_addk", "s_mulk", "s_cmov")
LANEWISE, SCALAR, NOOP = 0, 1, 2
_UNKNOWN = object()
# A plan depends on the instruction's text only; code objects repeat the same texts in many kernels.
_PLANS_BY_TEXT: dict[str, tuple | None] = {}
# Classes whose handlers depend on the instruction's text and the decode context only, never on its
# address (branches, s_getpc and the like do): one handler serves every copy of a text, in every
# program of the arch (every device loads the same code objects; handlers keep no per-call state).
_SHAREABLE = frozenset({"valu", "trans", "vmem_load", "vmem_store", "lds", "matrix"})
# (Both caches below keep an entry while a program uses it: a process that stops emulating an arch,
# or a test worker done with one, gets the memory back.)
_SHARED: weakref.WeakValueDictionary[tuple, Handler] = weakref.WeakValueDictionary()


class _Parsed:
    __slots__ = ("insts", "labels", "index_of", "__weakref__")

    def __init__(self, insts: Listing, labels: dict[str, int]) -> None:
        self.insts, self.labels, self.index_of = insts, labels, AddressIndex(insts.addrs)


_PARSED: weakref.WeakValueDictionary[tuple[bytes, bytes], _Parsed] = weakref.WeakValueDictionary()
_PARSED_LOCK = threading.Lock()


def _parsed(table: bytes, code: CodeObject) -> _Parsed:
    """`read_table` and the index of each instruction address, once per (table, code object) in
    the process while a program holds it: devices of an arch load the same code objects. The result
    is shared read-only (instructions are frozen; callers mutate neither the list, the labels nor
    the index)."""
    key = (hashlib.sha256(table).digest(), hashlib.sha256(code.data).digest())
    with _PARSED_LOCK:
        found = _PARSED.get(key)
    if found is None:
        found = _Parsed(*read_table(table, code))
        with _PARSED_LOCK:
            found = _PARSED.setdefault(key, found)
    return found


class Program:
    """`listing`: the code object's instruction table, or its listing (see `listing.as_table`).
    `image_base`: where the code object's vaddr 0 is in emulated memory (needed by the PC-reading
    and PC-writing instructions; may also be set later in ``ctx.extra["image_base"]``)."""

    def __init__(self, code: CodeObject, listing: bytes | str, arch: ArchInfo, image_base: int | None = None) -> None:
        load_all()
        self.code = code
        self.arch = arch
        self._parsed = parsed = _parsed(as_table(listing), code)     # (kept alive by the program)
        self.insts, labels, self.index_of = parsed.insts, parsed.labels, parsed.index_of
        self._label_addrs = sorted((addr, name) for name, addr in labels.items())
        self.ctx = DecodeContext(arch.name, arch.generation, arch.wave_size, arch.fp8_format, self.index_of)
        if image_base is not None:
            self.ctx.extra["image_base"] = image_base
        self.handlers = self._decode_all(self.ctx)
        self._class_of: dict[str, int] = {}
        self._cohort_plans: list = [_UNKNOWN] * len(self.insts)
        self._lockstep: dict[FloatMode, LockstepCode] = {}
        # MODE bits that change semantics are decode-time constants: one handler list per MODE.
        self._by_mode: dict[FloatMode, list[Handler]] = {}

    def handlers_for(self, kernel: Kernel) -> list[Handler]:
        """The handlers to run `kernel` with its descriptor's MODE (EmulatorError if not supported)."""
        mode = float_mode(kernel, self.arch.name, self.ctx.gfx)
        if mode == FloatMode():
            return self.handlers
        found = self._by_mode.get(mode)
        if found is None:
            found = self._by_mode[mode] = self._decode_all(self._context(mode))
        return found

    def _context(self, mode: FloatMode, cohort: bool = False) -> DecodeContext:
        """The decode context for a kernel's float `mode` (one wave, or lockstep cohorts)."""
        extra = self.ctx.extra if mode == FloatMode() else {**self.ctx.extra, **dataclasses.asdict(mode)}
        return dataclasses.replace(self.ctx, extra=extra, cohort=cohort)

    def cohort_plan(self, i: int) -> tuple | None:
        """How a lockstep cohort executes instruction ``i``:

        - ``(LANEWISE, sgprs)``: once on the cohort, if the waves agree on the SGPRs it reads;
        - ``(SCALAR, sgprs, writes)``: a scalar instruction (ALU, branch, barrier, end) that reads
          `sgprs`, SCC and EXEC only: once on the first wave if the waves agree on those, its
          results (`writes`, SCC, EXEC, PC, status) then copied to the others;
        - ``(NOOP,)``: nothing to do (waits, hints); ``(NOOP, counts)`` for a vector-memory wait,
          reported to ``Memory.waiter`` when one is set;
        - None: each wave executes it alone.
        """
        found = self._cohort_plans[i]
        if found is _UNKNOWN:
            inst = self.insts[i]
            found = _PLANS_BY_TEXT.get(inst.text, _UNKNOWN)
            if found is _UNKNOWN:
                found = _PLANS_BY_TEXT[inst.text] = self._cohort_plan(inst, i)
            self._cohort_plans[i] = found
        return found

    def _cohort_plan(self, inst: Inst, i: int) -> tuple | None:
        cls = CLASSES[self.class_of(i)]
        if cls in _LOCKSTEP_CLASSES:
            if _NOT_LANE_WISE.search(inst.text.lower()):
                return None
            masks = _mask_operands(inst.mnemonic, len(inst.operands))
            operands = inst.operands
            if "::" in inst.text:                      # a VOPD pair: the operands of both halves
                operands = tuple(t for _, ops, _ in split_pair(inst.text.split("//")[0]) for t in ops)
            per_op = self._sgpr_operands(operands, lanewise=True, masks=masks)
            if per_op is None:
                return None
            return (LANEWISE, tuple(r for pos, regs in enumerate(per_op) if pos not in masks for r in regs))
        found = lookup(inst.mnemonic)
        if found is None:
            return None
        if found[0] is nop_factory:
            return (NOOP,)
        if found[0] is wait_factory:
            counts = vm_wait_counts(inst)
            return (NOOP, counts) if counts else (NOOP,)
        if (cls, inst.mnemonic) not in _SCALAR_OK and cls != "salu":
            return None
        if cls == "branch" or cls == "barrier":
            reads = (VCC_LO, VCC_HI) if "vcc" in inst.mnemonic else ()
            return (SCALAR, reads, ())
        per_op = self._sgpr_operands(inst.operands, lanewise=False)
        if per_op is None:
            return None
        keep = lambda regs: tuple(r for r in regs if r not in (EXEC_LO, EXEC_HI, NULL))  # noqa: E731 (EXEC: whole)
        writes = keep(r for regs in per_op for r in regs)
        if inst.mnemonic.startswith(_READS_FIRST_OPERAND):
            return (SCALAR, writes, writes)
        return (SCALAR, keep(r for regs in per_op[1:] for r in regs), writes)    # operand 0: written only

    @staticmethod
    def _sgpr_operands(operands: tuple[str, ...], lanewise: bool, masks: frozenset[int] = frozenset()
                       ) -> list[tuple[int, ...]] | None:
        """The SGPRs each operand names, or None if an operand rules out cohort execution (for a
        lane-wise instruction, any special register except VCC or NULL as a mask operand)."""
        out: list[tuple[int, ...]] = []
        for pos, tok in enumerate(operands):
            try:
                op = parse_operand(tok[5:-1] if tok.startswith("sext(") and tok.endswith(")") else tok)
            except EmulatorError:
                return None
            if op.kind == "s":
                if lanewise and op.index >= VCC_LO and not (
                        pos in masks and op.index in (VCC_LO, NULL)):
                    return None
                out.append(tuple(range(op.index, op.index + op.count)))
            elif op.kind in (("v", "a", "const", "off") if lanewise else ("const", "scc", "aperture")):
                out.append(())
            else:
                return None
        return out

    def lockstep_code(self, kernel: Kernel) -> LockstepCode:
        """`kernel`'s instructions decoded (when first needed) for lockstep cohorts."""
        mode = float_mode(kernel, self.arch.name, self.ctx.gfx)
        found = self._lockstep.get(mode)
        if found is None:
            found = self._lockstep[mode] = LockstepCode(self, self._context(mode, cohort=True),
                                                        [None] * len(self.insts))
        return found

    def _decode_all(self, ctx: DecodeContext) -> list[Handler]:
        """A placeholder per instruction, replaced by its handler when it first executes: a code
        object holds hundreds of kernels of which a run uses a few, and decoding all of them cost
        seconds and hundreds of MB per device. The placeholder decodes the instruction the wave is
        at (the dispatcher has already advanced ``pc`` past it), stores the handler and runs it."""
        handlers: list[Handler] = []

        def decode_here(w: Wave) -> None:
            i = w.pc - 1
            fn = handlers[i] = self.decode(self.insts[i], ctx)[0]
            fn(w)

        handlers.extend([decode_here] * len(self.insts))
        return handlers

    def class_of(self, i: int) -> int:
        """Instruction ``i``'s class, as an index into `CLASSES` (for launch statistics)."""
        mnemonic = self.insts[i].mnemonic
        found = self._class_of.get(mnemonic)
        if found is None:
            op = lookup(mnemonic)
            found = self._class_of[mnemonic] = CLASSES.index(op[1] if op is not None else "other")
        return found

    def decode(self, inst: Inst, ctx: DecodeContext) -> tuple[Handler, str]:
        found = lookup(inst.mnemonic)
        if found is None:
            return self._failing(inst, f"instruction {inst.mnemonic!r} is not implemented by the emulator"), "other"
        factory, cls = found
        key = None
        if cls in _SHAREABLE:
            key = (ctx.arch, inst.text, ctx.cohort,
                   tuple(sorted((k, v) for k, v in ctx.extra.items() if k != "image_base")))
            shared = _SHARED.get(key)
            if shared is not None:
                return shared, cls
        try:
            handler = factory(inst, ctx)
            if key is not None:
                try:
                    _SHARED[key] = handler
                except TypeError:       # a handler that cannot be referred to weakly is not shared
                    pass
            return handler, cls
        except (EmulatorError, KeyError, ValueError) as e:
            # Decode problems surface when (and only if) the instruction executes.
            return self._failing(inst, f"cannot emulate {inst.text!r}: {e}"), cls

    def _failing(self, inst: Inst, message: str) -> Handler:
        where = self.where(inst.addr)

        def fail(w: Wave) -> None:
            raise EmulatorError(f"{message} ({self.arch.name}, {where})")

        return fail

    def where(self, addr: int) -> str:
        """``kernel <name> pc 0x<addr> (+0x<offset>)`` for messages."""
        i = bisect.bisect_right(self._label_addrs, (addr, "\uffff")) - 1
        if i < 0:
            return f"pc 0x{addr:x}"
        base, name = self._label_addrs[i]
        return f"kernel {name} pc 0x{addr:x} (+0x{addr - base:x})"

    def entry_index(self, entry_addr: int) -> int:
        try:
            return self.index_of[entry_addr]
        except KeyError:
            raise EmulatorError(f"kernel entry 0x{entry_addr:x} is not an instruction of the listing") from None


@dataclasses.dataclass
class LockstepCode:
    """Handlers for lockstep cohorts (of any number of waves), decoded per instruction when first run."""

    program: Program
    ctx: DecodeContext
    handlers: list[Handler | None]

    def handler(self, i: int) -> Handler:
        h = self.handlers[i]
        if h is None:
            h = self.handlers[i] = self.program.decode(self.program.insts[i], self.ctx)[0]
        return h
