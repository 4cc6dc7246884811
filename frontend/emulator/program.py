"""A code object decoded once: instructions, their handlers, and where kernels start."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import threading

from ..arch import ArchInfo
from ..codeobject import CodeObject, Kernel
from ..errors import EmulatorError
from .listing import Inst, Listing, parse_listing
from .mode import FloatMode, float_mode
from .ops import CLASSES, DecodeContext, Handler, load_all, lookup
from .state import Wave

_PARSED: dict[tuple[bytes, bytes], tuple[Listing, dict[str, int]]] = {}
_PARSED_LOCK = threading.Lock()


def _parsed(text: str, code: CodeObject) -> tuple[Listing, dict[str, int]]:
    """`parse_listing`, once per (listing, code object) in the process: every device of an arch
    loads the same code objects, and parsing a large listing takes seconds. The result is shared
    read-only (instructions are frozen; callers do not mutate the list or the labels)."""
    key = (hashlib.sha256(text.encode()).digest(), hashlib.sha256(code.data).digest())
    with _PARSED_LOCK:
        found = _PARSED.get(key)
    if found is None:
        found = parse_listing(text, code)
        with _PARSED_LOCK:
            found = _PARSED.setdefault(key, found)
    return found


class Program:
    """`image_base`: where the code object's vaddr 0 is in emulated memory (needed by the PC-reading
    and PC-writing instructions; may also be set later in ``ctx.extra["image_base"]``)."""

    def __init__(self, code: CodeObject, listing_text: str, arch: ArchInfo, image_base: int | None = None) -> None:
        load_all()
        self.code = code
        self.arch = arch
        self.insts, labels = _parsed(listing_text, code)
        self.index_of = dict(zip(self.insts.addrs, range(len(self.insts)), strict=True))
        self._label_addrs = sorted((addr, name) for name, addr in labels.items())
        gfx = int(arch.name[3:-2]) if arch.name.startswith("gfx1") else 9
        self.ctx = DecodeContext(arch.name, gfx, arch.wave_size, arch.fp8_format, self.index_of)
        if image_base is not None:
            self.ctx.extra["image_base"] = image_base
        self.handlers = self._decode_all(self.ctx)
        self._class_of: dict[str, int] = {}
        # MODE bits that change semantics are decode-time constants: one handler list per MODE.
        self._by_mode: dict[FloatMode, list[Handler]] = {}

    def handlers_for(self, kernel: Kernel) -> list[Handler]:
        """The handlers to run `kernel` with its descriptor's MODE (EmulatorError if not supported)."""
        mode = float_mode(kernel, self.arch.name, self.ctx.gfx)
        if mode == FloatMode():
            return self.handlers
        found = self._by_mode.get(mode)
        if found is None:
            ctx = dataclasses.replace(self.ctx, extra={**self.ctx.extra, **dataclasses.asdict(mode)})
            found = self._by_mode[mode] = self._decode_all(ctx)
        return found

    def _decode_all(self, ctx: DecodeContext) -> list[Handler]:
        """A placeholder per instruction, replaced by its handler when it first executes: a code
        object holds hundreds of kernels of which a run uses a few, and decoding all of them cost
        seconds and hundreds of MB per device. The placeholder decodes the instruction the wave is
        at (the dispatcher has already advanced ``pc`` past it), stores the handler and runs it."""
        handlers: list[Handler] = []

        def decode_here(w: Wave) -> None:
            i = w.pc - 1
            fn = handlers[i] = self._decode(self.insts[i], ctx)[0]
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

    def _decode(self, inst: Inst, ctx: DecodeContext) -> tuple[Handler, str]:
        found = lookup(inst.mnemonic)
        if found is None:
            return self._failing(inst, f"instruction {inst.mnemonic!r} is not implemented by the emulator"), "other"
        factory, cls = found
        try:
            return factory(inst, ctx), cls
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
