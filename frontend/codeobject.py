"""Reader for AMDGPU HSA code objects (``.hsaco``), with only `struct` and `msgpack`.

`CodeObject.parse(data)` (or `read_code_object(path_or_bytes)`) returns the target
(from ``e_flags``), the code object version, the PT_LOAD segments, the symbols and,
per kernel, the msgpack metadata (arguments, register/LDS/spill counts) and the
64-byte kernel descriptor's bytes (the emulator decodes them: `emulator.descriptor`). Field meanings follow
``shared/reference/code_objects.md``; section numbers below refer to it.

Anything malformed raises `CodeObjectError` naming the file and what was wrong.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from .arch import ARCHS
from .errors import CodeObjectError

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ET_DYN = 3
PT_LOAD = 1
PT_NOTE = 4
SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_DYNSYM = 11
NT_AMDGPU_METADATA = 32
KERNEL_DESCRIPTOR_SIZE = 64

# EI_ABIVERSION -> code object version (v2/v3 are no longer emitted).
_CODE_OBJECT_VERSIONS = {2: 4, 3: 5, 4: 6}
# EF_AMDGPU_MACH -> processor; the arch table is the single source of the numbers.
_MACH_TO_ARCH = {info.elf_mach: name for name, info in ARCHS.items()}
_FEATURE_STATES = ("unsupported", "any", "off", "on")   # XNACK / SRAMECC 2-bit fields
_SYMBOL_TYPES = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 10: "GNU_IFUNC"}
_SYMBOL_BINDS = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_NHDR = struct.Struct("<III")
_ENTRY_OFFSET = struct.Struct("<q")


def _bits(value: int, lo: int, width: int = 1) -> int:
    return (value >> lo) & ((1 << width) - 1)


@dataclass(frozen=True)
class Segment:
    """One program header. An emulator maps each PT_LOAD at ``base + vaddr``."""

    type: int
    flags: int           # PF_X = 1, PF_W = 2, PF_R = 4
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int

    @property
    def readable(self) -> bool:
        return bool(self.flags & 4)

    @property
    def writable(self) -> bool:
        return bool(self.flags & 2)

    @property
    def executable(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int           # virtual address (or the value of an ABS symbol)
    size: int
    type: str            # "FUNC", "OBJECT", "NOTYPE", ... or "TYPE<n>"
    binding: str         # "GLOBAL", "LOCAL", "WEAK", ... or "BIND<n>"
    section: int         # st_shndx (0xfff1 = ABS)


@dataclass(frozen=True)
class KernelArg:
    """One entry of the metadata ``.args`` list (explicit or hidden)."""

    offset: int
    size: int
    value_kind: str                 # "global_buffer", "by_value", "hidden_block_count_x", ...
    address_space: str | None = None
    actual_access: str | None = None
    name: str | None = None
    type_name: str | None = None

    @property
    def is_hidden(self) -> bool:
        return self.value_kind.startswith("hidden_")

    @property
    def param(self) -> str | None:
        """The parameter's name in the kernel source (clang names a pointer it passes coerced
        ``<name>.coerce``); None when the metadata has no names (built without
        -fno-discard-value-names, or hand-written)."""
        if self.name is None:
            return None
        return self.name[:-len(".coerce")] if self.name.endswith(".coerce") else self.name


@dataclass(frozen=True)
class Kernel:
    """One kernel: its metadata map (§2) and its descriptor (§3)."""

    name: str
    symbol: str                     # descriptor symbol, "<name>.kd"
    args: tuple[KernelArg, ...]     # in metadata order, explicit then hidden
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int   # static LDS bytes
    private_segment_fixed_size: int
    wavefront_size: int
    sgpr_count: int
    vgpr_count: int                 # unified arch + AGPR total on gfx90a+
    agpr_count: int
    sgpr_spill_count: int
    vgpr_spill_count: int
    max_flat_workgroup_size: int
    uniform_work_group_size: bool
    uses_dynamic_stack: bool
    workgroup_processor_mode: bool
    reqd_workgroup_size: tuple[int, int, int] | None
    descriptor_address: int         # vaddr of the 64-byte descriptor (what AQL kernel_object holds)
    descriptor_bytes: bytes = field(repr=False)   # decoded by the emulator (`emulator.descriptor`)
    function_address: int | None = None   # value of the FUNC symbol, if the object has one

    @property
    def explicit_args(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if not a.is_hidden)

    @property
    def hidden_args(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if a.is_hidden)

    @property
    def entry(self) -> int:
        """Virtual address of the first instruction: the descriptor's address plus its signed
        kernel_code_entry_byte_offset (bytes 16..23)."""
        return self.descriptor_address + _ENTRY_OFFSET.unpack_from(self.descriptor_bytes, 16)[0]


@dataclass(frozen=True)
class CodeObject:
    arch: str                       # "gfx942", from EF_AMDGPU_MACH
    xnack: str                      # "unsupported" | "any" | "off" | "on"
    sramecc: str
    generic_version: int            # e_flags bits 31:24 (v6, generic targets only)
    e_flags: int
    abi_version: int                # EI_ABIVERSION byte
    code_object_version: int        # 4, 5 or 6
    target: str                     # amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx942"
    metadata_version: tuple[int, ...]
    segments: tuple[Segment, ...]   # all program headers
    symbols: tuple[Symbol, ...]
    kernels: tuple[Kernel, ...]
    data: bytes = field(repr=False, compare=False)

    @property
    def load_segments(self) -> tuple[Segment, ...]:
        return tuple(s for s in self.segments if s.type == PT_LOAD)

    @property
    def image_size(self) -> int:
        """Bytes an emulator needs to map every PT_LOAD at base + vaddr."""
        return max((s.vaddr + s.memsz for s in self.load_segments), default=0)

    def segment_bytes(self, segment: Segment) -> bytes:
        """The segment's memory image: file bytes, zero-filled up to memsz."""
        return self.data[segment.offset:segment.offset + segment.filesz].ljust(segment.memsz, b"\0")

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        names = ", ".join(k.name for k in self.kernels) or "none"
        raise CodeObjectError(f"{self.arch} code object has no kernel {name!r}; it has: {names}")

    def symbol(self, name: str) -> Symbol:
        for s in self.symbols:
            if s.name == name:
                return s
        raise CodeObjectError(f"{self.arch} code object has no symbol {name!r}")

    @classmethod
    def parse(cls, data: bytes, source: str = "code object") -> CodeObject:
        """Parse a linked ``.hsaco``; `source` names the file in error messages. A code object is
        immutable, so one parse per distinct image serves every device that loads it (the large
        ones take a tenth of a second)."""
        data = bytes(data)
        key = hashlib.sha256(data).digest()
        found = _PARSED.get(key)
        if found is not None:
            return found
        try:
            code = _Parser(data, source).parse()
        except CodeObjectError:
            raise
        except (struct.error, IndexError, ValueError, TypeError, KeyError) as exc:
            # Explicit checks cover the known cases; this keeps a missed one a clear error.
            raise CodeObjectError(f"{source}: malformed code object ({type(exc).__name__}: {exc})") from exc
        with _PARSED_LOCK:
            if len(_PARSED) >= 32:
                _PARSED.pop(next(iter(_PARSED)))
            _PARSED[key] = code
        return code


_PARSED: dict[bytes, CodeObject] = {}      # sha256 of the image -> its parse (see CodeObject.parse)
_PARSED_LOCK = threading.Lock()


def read_code_object(source: str | Path | bytes) -> CodeObject:
    """`CodeObject.parse` of a file path or of the bytes themselves."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return CodeObject.parse(bytes(source))
    path = Path(source)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CodeObjectError(f"cannot read code object {path}: {exc}") from exc
    return CodeObject.parse(data, str(path))


def target_processor(target: str) -> str:
    """``"amdgcn-amd-amdhsa--gfx942:xnack+"`` -> ``"gfx942"``."""
    return target.rpartition("--")[2].split(":", 1)[0]


class _Parser:
    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.source = source

    def fail(self, message: str) -> CodeObjectError:
        return CodeObjectError(f"{self.source}: {message}")

    def unpack(self, st: struct.Struct, offset: int, what: str) -> tuple[Any, ...]:
        if offset < 0 or offset + st.size > len(self.data):
            raise self.fail(f"truncated: {what} at offset {offset} needs {st.size} bytes, "
                            f"the file has {len(self.data)}")
        return st.unpack_from(self.data, offset)

    def slice(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise self.fail(f"truncated: {what} spans bytes {offset}..{offset + size}, "
                            f"the file has {len(self.data)}")
        return self.data[offset:offset + size]

    def parse(self) -> CodeObject:
        if len(self.data) < 4 or self.data[:4] != b"\x7fELF":
            raise self.fail("not an ELF file (bad magic); a clang offload bundle must be unbundled first")
        (ident, e_type, e_machine, _ver, _entry, e_phoff, e_shoff, e_flags, _ehsize, e_phentsize,
         e_phnum, e_shentsize, e_shnum, e_shstrndx) = self.unpack(_EHDR, 0, "ELF header")
        if ident[4] != 2 or ident[5] != 1:
            raise self.fail(f"not a 64-bit little-endian ELF (class {ident[4]}, data {ident[5]})")
        if e_machine != EM_AMDGPU:
            raise self.fail(f"e_machine is {e_machine}, not {EM_AMDGPU} (EM_AMDGPU): not an AMD GPU code object")
        if ident[7] != ELFOSABI_AMDGPU_HSA:
            raise self.fail(f"OS ABI is {ident[7]}, not {ELFOSABI_AMDGPU_HSA} (AMDGPU HSA)")
        abi_version = ident[8]
        if abi_version not in _CODE_OBJECT_VERSIONS:
            raise self.fail(f"unsupported code object ABI version {abi_version} (expected 2, 3 or 4: v4..v6)")
        if e_type != ET_DYN:
            raise self.fail(f"ELF type is {e_type}, not {ET_DYN} (ET_DYN): not a linked code object")
        mach = e_flags & 0xFF
        arch = _MACH_TO_ARCH.get(mach)
        if arch is None:
            raise self.fail(f"EF_AMDGPU_MACH 0x{mach:03x} is not one of the shipped archs "
                            f"({', '.join(f'{n} 0x{m:03x}' for m, n in _MACH_TO_ARCH.items())})")

        segments = self.segments(e_phoff, e_phnum, e_phentsize)
        sections = self.sections(e_shoff, e_shnum, e_shentsize)
        symbols = self.symbols(sections)
        metadata = self.metadata(segments, sections)
        target = _expect(metadata, "amdhsa.target", str, self.source)
        if target_processor(target) != arch:
            raise self.fail(f"amdhsa.target {target!r} disagrees with e_flags ({arch})")
        version = metadata.get("amdhsa.version", [])
        if not isinstance(version, list) or not all(isinstance(v, int) for v in version):
            raise self.fail(f"amdhsa.version is {version!r}, expected a list of ints")
        kernel_maps = metadata.get("amdhsa.kernels", [])
        if not isinstance(kernel_maps, list):
            raise self.fail("amdhsa.kernels is not a list")
        by_name = {s.name: s for s in symbols}
        kernels = tuple(self.kernel(k, arch, segments, by_name) for k in kernel_maps)
        return CodeObject(
            arch=arch,
            xnack=_FEATURE_STATES[_bits(e_flags, 8, 2)],
            sramecc=_FEATURE_STATES[_bits(e_flags, 10, 2)],
            generic_version=_bits(e_flags, 24, 8),
            e_flags=e_flags,
            abi_version=abi_version,
            code_object_version=_CODE_OBJECT_VERSIONS[abi_version],
            target=target,
            metadata_version=tuple(version),
            segments=segments,
            symbols=symbols,
            kernels=kernels,
            data=self.data,
        )

    def segments(self, phoff: int, phnum: int, phentsize: int) -> tuple[Segment, ...]:
        if phnum and phentsize < _PHDR.size:
            raise self.fail(f"program header entry size {phentsize} < {_PHDR.size}")
        out = []
        for i in range(phnum):
            p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, p_align = self.unpack(
                _PHDR, phoff + i * phentsize, f"program header {i}")
            if p_type in (PT_LOAD, PT_NOTE):
                self.slice(p_offset, p_filesz, f"segment {i}")   # bounds check only
            out.append(Segment(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz, p_align))
        return tuple(out)

    def sections(self, shoff: int, shnum: int, shentsize: int) -> list[tuple[int, ...]]:
        if shnum and shentsize < _SHDR.size:
            raise self.fail(f"section header entry size {shentsize} < {_SHDR.size}")
        return [self.unpack(_SHDR, shoff + i * shentsize, f"section header {i}") for i in range(shnum)]

    def symbols(self, sections: list[tuple[int, ...]]) -> tuple[Symbol, ...]:
        # .symtab is a superset of .dynsym; a stripped object still has .dynsym.
        for wanted in (SHT_SYMTAB, SHT_DYNSYM):
            for sh in sections:
                if sh[1] == wanted:
                    return self.symbol_table(sh, sections)
        return ()

    def symbol_table(self, sh: tuple[int, ...], sections: list[tuple[int, ...]]) -> tuple[Symbol, ...]:
        _name, _type, _flags, _addr, offset, size, link, _info, _align, entsize = sh
        if link >= len(sections):
            raise self.fail(f"symbol table links to missing string table {link}")
        strtab = self.slice(sections[link][4], sections[link][5], "symbol string table")
        entsize = entsize or _SYM.size
        if entsize < _SYM.size:
            raise self.fail(f"symbol entry size {entsize} < {_SYM.size}")
        out = []
        for i in range(size // entsize):
            st_name, st_info, _other, st_shndx, st_value, st_size = self.unpack(
                _SYM, offset + i * entsize, f"symbol {i}")
            if i == 0:
                continue   # the null symbol
            out.append(Symbol(
                name=self.cstring(strtab, st_name, "symbol name"),
                value=st_value,
                size=st_size,
                type=_SYMBOL_TYPES.get(st_info & 0xF, f"TYPE{st_info & 0xF}"),
                binding=_SYMBOL_BINDS.get(st_info >> 4, f"BIND{st_info >> 4}"),
                section=st_shndx,
            ))
        return tuple(out)

    def cstring(self, table: bytes, offset: int, what: str) -> str:
        end = table.find(b"\0", offset)
        if offset >= len(table) or end < 0:
            raise self.fail(f"{what} at string offset {offset} is outside its string table")
        return table[offset:end].decode("utf-8", "replace")

    def metadata(self, segments: tuple[Segment, ...], sections: list[tuple[int, ...]]) -> dict[str, Any]:
        areas = [(s.offset, s.filesz, 8 if s.align == 8 else 4) for s in segments if s.type == PT_NOTE]
        if not areas:
            areas = [(sh[4], sh[5], 8 if sh[8] == 8 else 4) for sh in sections if sh[1] == SHT_NOTE]
        for offset, size, align in areas:
            desc = self.find_note(offset, size, align)
            if desc is not None:
                return self.decode_metadata(desc)
        raise self.fail("no NT_AMDGPU_METADATA note (name 'AMDGPU', type 32)")

    def find_note(self, offset: int, size: int, align: int) -> bytes | None:
        area = self.slice(offset, size, "note area")
        pos = 0
        while pos + _NHDR.size <= len(area):
            namesz, descsz, ntype = _NHDR.unpack_from(area, pos)
            name_at = pos + _NHDR.size
            desc_at = name_at + _align(namesz, align)
            end = desc_at + _align(descsz, align)
            if desc_at + descsz > len(area):
                raise self.fail(f"truncated note record at offset {offset + pos}")
            name = area[name_at:name_at + namesz].rstrip(b"\0")
            if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                return area[desc_at:desc_at + descsz]
            pos = end
        return None

    def decode_metadata(self, desc: bytes) -> dict[str, Any]:
        # raw=True accepts both msgpack str and bin; _text() then decodes every string.
        try:
            obj = msgpack.unpackb(desc, raw=True, strict_map_key=False, use_list=True)
        except (msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError,
                msgpack.exceptions.StackError, ValueError) as exc:
            raise self.fail(f"metadata note is not valid msgpack: {exc}") from exc
        obj = _text(obj, self.source)
        if not isinstance(obj, dict):
            raise self.fail(f"metadata note is a {type(obj).__name__}, expected a map")
        return obj

    def read_vaddr(self, segments: tuple[Segment, ...], vaddr: int, size: int, what: str) -> bytes:
        for s in segments:
            if s.type == PT_LOAD and s.vaddr <= vaddr and vaddr + size <= s.vaddr + s.filesz:
                return self.slice(s.offset + vaddr - s.vaddr, size, what)
        raise self.fail(f"{what} at 0x{vaddr:x} (+{size}) is not inside a loaded segment")

    def kernel(self, meta: Any, arch: str, segments: tuple[Segment, ...],
               symbols: dict[str, Symbol]) -> Kernel:
        if not isinstance(meta, dict):
            raise self.fail("an amdhsa.kernels entry is not a map")
        src = self.source
        name = _expect(meta, ".name", str, src)
        where = f"{src}: kernel {name}"
        symbol = _expect(meta, ".symbol", str, where)
        kd_sym = symbols.get(symbol)
        if kd_sym is None:
            raise self.fail(f"kernel {name}: descriptor symbol {symbol!r} is missing from the symbol table")
        raw = self.read_vaddr(segments, kd_sym.value, KERNEL_DESCRIPTOR_SIZE, f"kernel descriptor {symbol}")
        func = symbols.get(symbol[:-3]) if symbol.endswith(".kd") else None
        args_meta = meta.get(".args", [])
        if not isinstance(args_meta, list):
            raise self.fail(f"kernel {name}: .args is not a list")
        args = tuple(self.arg(a, f"{where} argument {i}") for i, a in enumerate(args_meta))
        reqd = meta.get(".reqd_workgroup_size")
        if reqd is not None and not (isinstance(reqd, list) and len(reqd) == 3
                                     and all(isinstance(v, int) for v in reqd)):
            raise self.fail(f"kernel {name}: .reqd_workgroup_size is {reqd!r}")
        return Kernel(
            name=name,
            symbol=symbol,
            args=args,
            kernarg_segment_size=_expect(meta, ".kernarg_segment_size", int, where),
            kernarg_segment_align=_expect(meta, ".kernarg_segment_align", int, where),
            group_segment_fixed_size=_expect(meta, ".group_segment_fixed_size", int, where),
            private_segment_fixed_size=_expect(meta, ".private_segment_fixed_size", int, where),
            wavefront_size=_expect(meta, ".wavefront_size", int, where),
            sgpr_count=_expect(meta, ".sgpr_count", int, where),
            vgpr_count=_expect(meta, ".vgpr_count", int, where),
            agpr_count=_expect(meta, ".agpr_count", int, where, 0),
            sgpr_spill_count=_expect(meta, ".sgpr_spill_count", int, where, 0),
            vgpr_spill_count=_expect(meta, ".vgpr_spill_count", int, where, 0),
            max_flat_workgroup_size=_expect(meta, ".max_flat_workgroup_size", int, where),
            uniform_work_group_size=bool(_expect(meta, ".uniform_work_group_size", int, where, 0)),
            uses_dynamic_stack=bool(_expect(meta, ".uses_dynamic_stack", int, where, 0)),
            workgroup_processor_mode=bool(_expect(meta, ".workgroup_processor_mode", int, where, 0)),
            reqd_workgroup_size=tuple(reqd) if reqd is not None else None,  # type: ignore[arg-type]
            descriptor_address=kd_sym.value,
            descriptor_bytes=raw,
            function_address=func.value if func is not None and func.type == "FUNC" else None,
        )

    def arg(self, meta: Any, where: str) -> KernelArg:
        if not isinstance(meta, dict):
            raise self.fail(f"{where} is not a map")
        where = f"{self.source}: {where}"
        return KernelArg(
            offset=_expect(meta, ".offset", int, where),
            size=_expect(meta, ".size", int, where),
            value_kind=_expect(meta, ".value_kind", str, where),
            address_space=_expect(meta, ".address_space", str, where, None),
            actual_access=_expect(meta, ".actual_access", str, where, None),
            name=_expect(meta, ".name", str, where, None),
            type_name=_expect(meta, ".type_name", str, where, None),
        )


_MISSING: Any = object()


def _expect(meta: dict[str, Any], key: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    """meta[key] checked to be `kind` (bools count as ints: flags come both ways)."""
    if key not in meta:
        if default is _MISSING:
            raise CodeObjectError(f"{where}: metadata key {key} is missing")
        return default
    value = meta[key]
    if kind is int and isinstance(value, bool):
        return int(value)
    if not isinstance(value, kind):
        raise CodeObjectError(f"{where}: metadata key {key} is {value!r}, expected {kind.__name__}")
    return value


def _text(obj: Any, source: str) -> Any:
    """Decode every msgpack str/bin (read as bytes) to str, recursively."""
    if isinstance(obj, bytes):
        try:
            return obj.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodeObjectError(f"{source}: metadata string {obj[:40]!r} is not UTF-8") from exc
    if isinstance(obj, list):
        return [_text(v, source) for v in obj]
    if isinstance(obj, dict):
        return {_text(k, source): _text(v, source) for k, v in obj.items()}
    return obj


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a
