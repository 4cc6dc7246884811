"""The instructions of a code object, as the emulator reads them: a compact instruction table
that build_scripts makes from ``llvm-objdump -d`` and ships next to each code object
(``<family>.itab``), checked against the binary.

A listing line looks like::

    \tv_add_f32_dpp v1, v1, v1 row_shr:1 row_mask:0xf ...   // 000000003578: 7E0402FA AF094201
    \ts_cbranch_execz 49                                      // 00000000335C: BF880031 <k+0x124>

The text before ``//`` is the instruction, the hex after the address its encoding
(little-endian dwords). The table keeps what the emulator needs of it: each distinct encoding
once with its text (the disassembler prints the same bytes the same way: branch offsets are
relative), each instruction's size, where runs of instructions start, and the function labels.
An xz stream of 0.5 MB replaces a 4 MB gzip'ed listing. An instruction's text is found by its
bytes *in the binary*, so the emulator never decodes text that does not describe the machine code
it runs: bytes the table does not know are refused when first read.
"""

from __future__ import annotations

import gzip
import json
import lzma
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


TABLE_MAGIC = b"hipskinny instruction table 1\n"


def read_listing(data: bytes) -> str:
    """An ``llvm-objdump -d`` listing's text from its bytes (gzip'ed or not)."""
    return gzip.decompress(data).decode("utf-8") if data[:2] == b"\x1f\x8b" else data.decode("utf-8")


def table_from_listing(text: str) -> bytes:
    """The instruction table of an ``llvm-objdump -d`` listing (reproducible bytes: an xz stream).

    ValueError if the listing prints one encoding two ways (the table could not tell them apart)."""
    labels = [[m.group("name"), int(m.group("addr"), 16)] for m in _LABELS.finditer(text)]
    pool: dict[bytes, int] = {}
    texts: list[str] = []
    sizes = bytearray()
    runs: list[list[int]] = []
    end = -1
    for m in _LINES.finditer(text):
        addr = int(m.group(2), 16)
        encoding = b"".join(int(w, 16).to_bytes(4, "little") for w in m.group(3).split())
        body = m.group(1).strip()
        if addr != end:
            runs.append([addr, 0])
        runs[-1][1] += 1
        end = addr + len(encoding)
        j = pool.setdefault(encoding, len(texts))
        if j == len(texts):
            texts.append(body)
        elif texts[j] != body:
            raise ValueError(f"the listing prints {encoding.hex()} as {texts[j]!r} and as {body!r}")
        sizes.append(len(encoding) // 4)
    header = json.dumps({"labels": labels, "runs": runs, "entries": len(texts)}, separators=(",", ":")).encode()
    payload = b"".join([TABLE_MAGIC, len(header).to_bytes(4, "little"), header, bytes(sizes),
                        bytes(len(e) // 4 for e in pool), *pool, "\n".join(texts).encode()])
    return lzma.compress(payload, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)


def as_table(listing: bytes | str) -> bytes:
    """An instruction table from a table (returned as is) or a listing (text, or its bytes,
    gzip'ed or not)."""
    if isinstance(listing, str):
        return table_from_listing(listing)
    data = bytes(listing)
    return data if data.startswith(_XZ_MAGIC) else table_from_listing(read_listing(data))


_XZ_MAGIC = b"\xfd7zXZ\x00"


def listing_text(table: bytes, code: CodeObject) -> str:
    """The listing lines of a table's instructions as `code` holds them (labels, then
    ``\t<text> // <address>: <dwords>``): for tools and for tests that edit instructions
    (`table_from_listing` reads them back)."""
    listing, labels = read_table(table, code)
    names = {addr: name for name, addr in labels.items()}
    lines = []
    for inst in listing:
        if inst.addr in names:
            lines.append(f"\n{inst.addr:016x} <{names[inst.addr]}>:")
        words = " ".join(f"{int.from_bytes(inst.encoding[k:k + 4], 'little'):08X}"
                         for k in range(0, inst.size, 4))
        lines.append(f"\t{inst.text} // {inst.addr:012X}: {words}")
    return "\n".join(lines) + "\n"


def read_table(data: bytes, code: CodeObject) -> tuple[Listing, dict[str, int]]:
    """All instructions of a table (in address order, as a lazy `Listing`) and each function
    label's address."""
    table = _Table(data)
    listing = Listing(table, _image(code), code.arch)
    if not len(listing):
        raise EmulatorError(f"{code.arch} instruction table holds no instructions")
    return listing, dict((name, addr) for name, addr in table.labels)


def parse_listing(text: str, code: CodeObject) -> tuple[Listing, dict[str, int]]:
    """`read_table` of an ``llvm-objdump -d`` listing's text."""
    return read_table(table_from_listing(text), code)


class _Table:
    """A decoded instruction table: 9 bytes an instruction (its size, its address) plus the
    distinct encodings and texts, each kept once as bytes (a worker holds every arch's code objects)."""

    def __init__(self, data: bytes) -> None:
        try:
            raw = lzma.decompress(data, format=lzma.FORMAT_XZ)
        except lzma.LZMAError as exc:
            raise EmulatorError(f"not a hipskinny instruction table: {exc}") from None
        if not raw.startswith(TABLE_MAGIC):
            raise EmulatorError("not a hipskinny instruction table (wrong magic); rebuild the code objects")
        at = len(TABLE_MAGIC) + 4
        size = int.from_bytes(raw[at - 4:at], "little")
        header = json.loads(raw[at:at + size])
        at += size
        self.labels: list[tuple[str, int]] = [(name, addr) for name, addr in header["labels"]]
        count = sum(n for _, n in header["runs"])
        self.sizes = np.frombuffer(raw, np.uint8, count, at)         # in dwords
        at += count
        entries = header["entries"]
        entry_sizes = np.frombuffer(raw, np.uint8, entries, at).astype(np.int64) * 4
        at += entries
        self._enc_at = np.concatenate(([at], at + np.cumsum(entry_sizes)))
        at = int(self._enc_at[-1])
        self._raw = raw
        ends = np.flatnonzero(np.frombuffer(raw, np.uint8, len(raw) - at, at) == 10) + at
        self._text_at = np.concatenate(([at], ends + 1))
        self._text_end = np.concatenate((ends, [len(raw)]))
        if len(self._text_at) != entries:
            raise EmulatorError("instruction table is damaged: its texts do not match its entries")
        addrs = np.empty(count, np.int64)
        i = 0
        for start, n in header["runs"]:
            step = self.sizes[i:i + n - 1].astype(np.int64) * 4
            addrs[i:i + n] = start + np.concatenate(([0], np.cumsum(step)))
            i += n
        self.addrs = array("q", addrs.tobytes())
        self._entries: dict[bytes, int] | None = None

    def encoding(self, j: int) -> bytes:
        return self._raw[self._enc_at[j]:self._enc_at[j + 1]]

    def text(self, j: int) -> str:
        return self._raw[self._text_at[j]:self._text_end[j]].decode()

    def entry_of(self, encoding: bytes) -> int | None:
        """The entry whose encoding is exactly these bytes, or None."""
        if self._entries is None:
            at = self._enc_at.tolist()
            raw = self._raw
            self._entries = {raw[a:b]: j for j, (a, b) in enumerate(zip(at[:-1], at[1:], strict=True))}
        return self._entries.get(encoding)


class Listing(Sequence[Inst]):
    """The instructions of a table. Each becomes an `Inst` the first time it is read -- a run
    reads a few thousand of a code object's hundreds of thousands -- from the binary's bytes at its
    address: their text is the table's entry for exactly those bytes (EmulatorError if it has
    none). ``addrs`` holds every instruction's address (an ``array('q')``, ascending)."""

    def __init__(self, table: _Table, image: _image, arch: str) -> None:
        self._table = table
        self._insts: list[Inst | None] = [None] * len(table.addrs)
        self._image = image
        self._arch = arch
        self.addrs = table.addrs

    def __len__(self) -> int:
        return len(self.addrs)

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
        """Check every instruction against the binary at once (for tools that read them all; what
        reading each one checks)."""
        for i in range(len(self)):
            self._entry(i)

    def mnemonics(self, lo: int = 0, hi: int | None = None) -> list[str]:
        """The mnemonics of instructions [lo, hi) without making their `Inst`s."""
        text = self._table.text
        return [text(self._entry(i)[0]).partition(" ")[0] for i in range(*slice(lo, hi).indices(len(self)))]

    def _entry(self, i: int) -> tuple[int, bytes]:
        """(table entry, bytes) of instruction ``i``; EmulatorError if the table does not know the
        binary's bytes there."""
        addr, size = self.addrs[i], 4 * int(self._table.sizes[i])
        actual = self._image.get(addr, size)
        j = self._table.entry_of(actual) if actual is not None else None
        if j is None:
            raise EmulatorError(f"{self._arch} instruction table does not match its code object at 0x{addr:x}: "
                                f"it has no entry for the binary's {actual.hex() if actual else 'nothing'} "
                                f"({size} bytes); rebuild the code objects (python -m build_scripts)")
        return j, actual

    def _make(self, i: int) -> Inst:
        j, encoding = self._entry(i)
        body = self._table.text(j)
        return Inst(self.addrs[i], len(encoding), body, body.partition(" ")[0], None, None, encoding)


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

