"""Instructions from the disassembly listing that build_scripts ships next to each
code object (``llvm-objdump -d`` output, gzip'ed), checked against the binary.

A listing line looks like::

    \tv_add_f32_dpp v1, v1, v1 row_shr:1 row_mask:0xf ...   // 000000003578: 7E0402FA AF094201
    \ts_cbranch_execz 49                                      // 00000000335C: BF880031 <k+0x124>

The text before ``//`` is the instruction, the hex after the address its encoding
(little-endian dwords). Every instruction's bytes are compared with the code
object's, so the emulator never runs text that does not describe the binary.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass

from ..codeobject import CodeObject
from ..errors import EmulatorError

_LINE = re.compile(r"^\t(?P<text>.*?)\s*// (?P<addr>[0-9A-Fa-f]{12,16}): (?P<hex>[0-9A-Fa-f]{8}(?: [0-9A-Fa-f]{8})*)")
_LABEL = re.compile(r"^[0-9a-fA-F]{16} <(?P<name>[^>]+)>:$")


@dataclass(frozen=True)
class Inst:
    addr: int                    # vaddr of the instruction in the code object
    size: int                    # bytes
    text: str                    # as disassembled, without the encoding comment
    mnemonic: str                # first token, e.g. "v_add_f32_dpp"
    operands: tuple[str, ...]    # comma-separated operands, modifiers removed
    modifiers: tuple[str, ...]   # space-separated trailing tokens (row_shr:1, offset:16, off, nt, ...)
    encoding: bytes


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


def parse_listing(text: str, code: CodeObject) -> tuple[list[Inst], dict[str, int]]:
    """All instructions (in address order) and each function label's address."""
    insts: list[Inst] = []
    labels: dict[str, int] = {}
    image = _image(code)
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            labels[m.group("name")] = int(line.split(" ", 1)[0], 16)
            continue
        m = _LINE.match(line)
        if not m:
            continue
        addr = int(m.group("addr"), 16)
        encoding = b"".join(int(w, 16).to_bytes(4, "little") for w in m.group("hex").split())
        actual = image.get(addr, len(encoding))
        if actual != encoding:
            raise EmulatorError(f"{code.arch} listing does not match its code object at 0x{addr:x}: listing says "
                                f"{encoding.hex()}, binary has {actual.hex() if actual else 'nothing'}; "
                                "rebuild the code objects (python -m build_scripts)")
        mnemonic, operands, modifiers = parse_instruction(m.group("text"))
        insts.append(Inst(addr, len(encoding), m.group("text").strip(), mnemonic, operands, modifiers, encoding))
    if not insts:
        raise EmulatorError(f"{code.arch} listing holds no instructions")
    return insts, labels


class _image:
    """Byte access to the code object's executable segments by virtual address."""

    def __init__(self, code: CodeObject) -> None:
        self._segs = [(s.vaddr, code.segment_bytes(s)) for s in code.load_segments if s.executable]

    def get(self, addr: int, size: int) -> bytes | None:
        for base, data in self._segs:
            if base <= addr and addr + size <= base + len(data):
                return data[addr - base:addr - base + size]
        return None
