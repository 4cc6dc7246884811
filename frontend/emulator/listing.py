"""Instructions from the disassembly listing that build_scripts ships next to each
code object (``llvm-objdump -d`` output, gzip'ed), checked against the binary.

A listing line looks like::

    \tv_add_f32_dpp v1, v1, v1 row_shr:1 row_mask:0xf ...   // 000000003578: 7E0402FA AF094201
    \ts_cbranch_execz 49                                      // 00000000335C: BF880031 <k+0x124>

The text before ``//`` is the instruction, the hex after the address its encoding
(little-endian dwords). Every instruction's bytes are compared with the code
object's when the instruction is first read, so the emulator never decodes text that
does not describe the binary.
"""

from __future__ import annotations

import gzip
import re
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import overload

import numpy as np

from ..codeobject import CodeObject
from ..errors import EmulatorError

_LINES = re.compile(r"^\t(.*?)\s*// ([0-9A-Fa-f]{12,16}): ([0-9A-Fa-f]{8}(?: [0-9A-Fa-f]{8})*)", re.M)
_LABELS = re.compile(r"^(?P<addr>[0-9a-fA-F]{16}) <(?P<name>[^>]+)>:$", re.M)


class Inst:
    """One instruction of the listing. ``operands`` and ``modifiers`` are split from the text the
    first time they are read (a run decodes a few thousand of a listing's hundreds of thousands of
    instructions); ``encoding`` is its bytes."""

    __slots__ = ("addr", "size", "text", "mnemonic", "_operands", "_modifiers", "encoding")

    def __init__(self, addr: int, size: int, text: str, mnemonic: str, operands: tuple[str, ...] | None = None,
                 modifiers: tuple[str, ...] | None = None, encoding: bytes = b"") -> None:
        self.addr = addr              # vaddr of the instruction in the code object
        self.size = size              # bytes
        self.text = text              # as disassembled, without the encoding comment
        self.mnemonic = mnemonic      # first token, e.g. "v_add_f32_dpp"
        self._operands = operands     # comma-separated operands, modifiers removed
        self._modifiers = modifiers   # space-separated trailing tokens (row_shr:1, offset:16, off, nt, ...)
        self.encoding = encoding      # as in the binary

    @property
    def operands(self) -> tuple[str, ...]:
        if self._operands is None:
            self._operands, self._modifiers = split_operands(self.text.partition(" ")[2])
        return self._operands

    @property
    def modifiers(self) -> tuple[str, ...]:
        if self._modifiers is None:
            self._operands, self._modifiers = split_operands(self.text.partition(" ")[2])
        return self._modifiers

    def __repr__(self) -> str:
        return f"Inst(0x{self.addr:x}, {self.text!r})"


def split_operands(rest: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split ``"v1, v2, v3 row_shr:1 bound_ctrl:1"`` into operands and modifiers."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(rest):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(rest[start:i].strip())
            start = i + 1
    parts.append(rest[start:].strip())
    parts = [p for p in parts if p]
    if not parts:
        return (), ()
    tail = _split_spaces(parts[-1])
    return tuple(parts[:-1]) + (tail[0],), tuple(tail[1:])


def _split_spaces(s: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == " " and depth == 0:
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def parse_instruction(text: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    mnemonic, _, rest = text.strip().partition(" ")
    operands, modifiers = split_operands(rest)
    return mnemonic, operands, modifiers


def read_listing(data: bytes) -> str:
    return gzip.decompress(data).decode("utf-8") if data[:2] == b"\x1f\x8b" else data.decode("utf-8")


def parse_listing(text: str, code: CodeObject) -> tuple[Listing, dict[str, int]]:
    """All instructions (in address order, as a lazy `Listing`) and each function label's address."""
    labels = {m.group("name"): int(m.group("addr"), 16) for m in _LABELS.finditer(text)}
    listing = Listing(text, _image(code), code.arch)
    if not len(listing):
        raise EmulatorError(f"{code.arch} listing holds no instructions")
    return listing, labels


class Listing(Sequence[Inst]):
    """The instructions of a listing. Each becomes an `Inst` the first time it is read -- a run
    reads a few thousand of a listing's hundreds of thousands -- and is then compared with the
    binary's bytes (EmulatorError if they differ), so nothing that does not describe the binary is
    ever decoded. ``addrs`` holds every instruction's address (an ``array('q')``, ascending).

    Every device of an arch shares one listing, and a worker holds every arch's: so it keeps the
    text once and 16 bytes an instruction (where its line starts, its address), not the lines split
    into strings (some 400 bytes an instruction: 2 GB for the five archs' code objects)."""

    def __init__(self, text: str, image: _image, arch: str) -> None:
        self._text = text
        starts, addrs = array("q"), array("q")
        for m in _LINES.finditer(text):
            starts.append(m.start())
            addrs.append(int(m.group(2), 16))
        self._starts = starts
        self._insts: list[Inst | None] = [None] * len(starts)
        self._image = image
        self._arch = arch
        self.addrs = addrs

    def __len__(self) -> int:
        return len(self._starts)

    def _row(self, i: int) -> tuple[str, str, str]:
        """Instruction ``i``'s line as (text, address, hex dwords)."""
        m = _LINES.match(self._text, self._starts[i])
        assert m is not None
        return m.group(1), m.group(2), m.group(3)

    def _rows(self, lo: int = 0, hi: int | None = None) -> list[tuple[str, str, str]]:
        return [self._row(i) for i in range(*slice(lo, hi).indices(len(self)))]

    @overload
    def __getitem__(self, i: int) -> Inst: ...

    @overload
    def __getitem__(self, i: slice) -> list[Inst]: ...

    def __getitem__(self, i: int | slice) -> Inst | list[Inst]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        inst = self._insts[i]
        if inst is None:
            inst = self._insts[i] = self._make(i)
        return inst

    def verify(self) -> None:
        """Check the whole listing against the binary at once, run by run of contiguous addresses
        (for tools that read every instruction; what reading each one checks per instruction)."""
        rows = self._rows()
        raw = np.frombuffer(bytes.fromhex(" ".join(w for _, _, w in rows)), ">u4").astype("<u4").tobytes()
        sizes = np.array([len(w) for _, _, w in rows], np.int64) // 9 * 4 + 4
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        addrs = np.array(self.addrs, np.int64)
        ends = np.flatnonzero(addrs[:-1] + sizes[:-1] != addrs[1:]) + 1     # where a run of addresses breaks
        for first, last in zip([0, *ends], [*ends, len(rows)], strict=True):
            base, end = int(offsets[first]), int(offsets[last])
            if self._image.get(int(addrs[first]), end - base) != raw[base:end]:
                for k in range(first, last):
                    self._make(k)               # raises, naming the first instruction that differs

    def mnemonics(self, lo: int = 0, hi: int | None = None) -> list[str]:
        """The mnemonics of instructions [lo, hi) without making their `Inst`s."""
        return [body.partition(" ")[0] for body, _, _ in self._rows(lo, hi)]

    def _make(self, i: int) -> Inst:
        body, _, words = self._row(i)
        addr = self.addrs[i]
        encoding = b"".join(int(w, 16).to_bytes(4, "little") for w in words.split())
        actual = self._image.get(addr, len(encoding))
        if actual != encoding:
            raise EmulatorError(f"{self._arch} listing does not match its code object at 0x{addr:x}: listing says "
                                f"{encoding.hex()}, binary has {actual.hex() if actual else 'nothing'}; "
                                "rebuild the code objects (python -m build_scripts)")
        body = body.strip()
        return Inst(addr, len(encoding), body, body.partition(" ")[0], None, None, encoding)


class AddressIndex:
    """Instruction address -> index in a `Listing`, by bisection of its ascending addresses (a dict
    of them took tens of MB per large code object). Reads as the dict did: ``[addr]`` (KeyError when
    no instruction starts there) and ``get``."""

    __slots__ = ("_addrs",)

    def __init__(self, addrs: Sequence[int]) -> None:
        if len(addrs) > 1 and not (np.diff(np.asarray(addrs, np.int64)) > 0).all():
            raise EmulatorError("listing addresses are not ascending")
        self._addrs = addrs

    def get(self, addr: int, default: int | None = None) -> int | None:
        i = bisect_left(self._addrs, addr)
        return i if i < len(self._addrs) and self._addrs[i] == addr else default

    def __getitem__(self, addr: int) -> int:
        i = self.get(addr)
        if i is None:
            raise KeyError(addr)
        return i


class _image:
    """Byte access to the code object's executable segments by virtual address."""

    def __init__(self, code: CodeObject) -> None:
        self._segs = [(s.vaddr, code.segment_bytes(s)) for s in code.load_segments if s.executable]

    def get(self, addr: int, size: int) -> bytes | None:
        for base, data in self._segs:
            if base <= addr and addr + size <= base + len(data):
                return data[addr - base:addr - base + size]
        return None
