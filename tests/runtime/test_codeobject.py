"""The code-object reader on the shipped hsaco/ and on a tiny kernel built for every arch."""

from __future__ import annotations

import json
import random
import struct
import sys

import paths
import pytest

from hipskinny.arch import ARCHS
from hipskinny.codeobject import PT_NOTE, CodeObject, read_code_object
from hipskinny.emulator.descriptor import descriptor_of
from hipskinny.errors import CodeObjectError

REPO = paths.REPO
sys.path.insert(0, str(REPO))   # build_scripts is a repo tool, not part of the package

from compilers import NO_COMPILER  # noqa: E402

from build_scripts.cli import compile_all  # noqa: E402
from build_scripts.toolchain import find_toolchain  # noqa: E402

MANIFEST = REPO / "hsaco" / "manifest.json"

# Exercises explicit args of each kind, hidden args (blockDim), static LDS and the
# kernel-name convention; small enough to compile for all five archs in a few seconds.
TINY_HIP = r"""
#include <hip/hip_runtime.h>
#include "tiny/helper.h"

template <int R>
__device__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
  __shared__ float tile[256 * R];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) y[i] = twice(a * tile[blockDim.x - 1 - threadIdx.x]);
}

extern "C" __global__ void __launch_bounds__(256)
tiny_f32_r1(const float* __restrict__ x, float* __restrict__ y, float a, int n) { scale<1>(x, y, a, n); }

extern "C" __global__ void __launch_bounds__(128)
tiny_f32_r2(const float* __restrict__ x, float* __restrict__ y, float a, int n) { scale<2>(x, y, a, n); }
"""
TINY_H = "#pragma once\n__device__ inline float twice(float v) { return 2.0f * v; }\n"


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, bytes]:
    """The tiny family compiled for every arch with the build's own compile function."""
    if NO_COMPILER:
        pytest.skip(f"compiles a tiny kernel family: {NO_COMPILER}")
    root = tmp_path_factory.mktemp("tinyrepo")
    (root / "kernels" / "include" / "tiny").mkdir(parents=True)
    (root / "kernels" / "tiny.hip").write_text(TINY_HIP)
    (root / "kernels" / "include" / "tiny" / "helper.h").write_text(TINY_H)
    tc = find_toolchain(root / "work")
    built, errors = compile_all(tc, root, list(ARCHS), ["tiny"], root / "out", jobs=2)
    assert not errors, errors
    assert built["gfx942/tiny"].entry["sources"].keys() == {"kernels/tiny.hip", "kernels/include/tiny/helper.h"}
    return {arch: built[f"{arch}/tiny"].hsaco.read_bytes() for arch in ARCHS}


def _manifest_entries() -> list[dict]:
    # Fail, not skip, when the committed artifacts are missing: they are part of the tree.
    assert MANIFEST.is_file(), "hsaco/manifest.json is missing: run `python -m build_scripts`"
    return sorted(json.loads(MANIFEST.read_text())["code_objects"].values(), key=lambda e: e["path"])


def check_invariants(co: CodeObject, arch: str) -> None:
    info = ARCHS[arch]
    assert co.arch == arch
    assert co.target == f"amdgcn-amd-amdhsa--{arch}"
    assert co.code_object_version == 6 and co.abi_version == 4
    assert co.metadata_version == (1, 2)
    if info.generation == 9:
        assert (co.xnack, co.sramecc) == ("any", "any")
    else:
        assert (co.xnack, co.sramecc) == ("unsupported", "unsupported")
    assert co.load_segments and any(s.executable for s in co.load_segments)
    assert co.kernels
    for k in co.kernels:
        kd = descriptor_of(k, arch)
        assert k.sgpr_spill_count == 0 and k.vgpr_spill_count == 0, k.name
        assert k.private_segment_fixed_size == 0 and not k.uses_dynamic_stack, k.name
        assert k.group_segment_fixed_size <= info.lds_per_workgroup, k.name
        assert k.symbol == k.name + ".kd"
        func = co.symbol(k.name)
        assert func.type == "FUNC" and k.function_address == func.value
        assert kd.entry == func.value and kd.entry % 256 == 0
        assert co.symbol(k.symbol).size == 64 and kd.address == co.symbol(k.symbol).value
        # The descriptor agrees with the metadata.
        assert kd.group_segment_fixed_size == k.group_segment_fixed_size
        assert kd.private_segment_fixed_size == 0 and not kd.enable_private_segment
        assert kd.kernarg_size == k.kernarg_segment_size
        assert kd.wave_size == k.wavefront_size == info.wave_size
        assert kd.enable_sgpr_kernarg_segment_ptr
        # Architected flat scratch on all five targets: these two must be off.
        assert not kd.enable_sgpr_private_segment_buffer and not kd.enable_sgpr_flat_scratch_init
        assert (kd.float_denorm_mode_32, kd.float_denorm_mode_16_64) == (3, 3)
        assert kd.enable_sgpr_workgroup_id_x
        used = sum(count for _name, _first, count in kd.user_sgpr_layout())
        if arch == "gfx1100":
            assert kd.user_sgpr_count >= used   # padded so system SGPRs end at s15
        else:
            assert kd.user_sgpr_count == used
        if info.generation == 9:
            assert kd.accum_offset is not None and 4 <= kd.accum_offset <= 256
            assert k.vgpr_count >= kd.accum_offset - 3
            assert kd.enable_dx10_clamp and kd.enable_ieee_mode
        else:
            assert kd.accum_offset is None and k.agpr_count == 0
            assert kd.wgp_mode == k.workgroup_processor_mode
        if arch == "gfx1201":
            assert not kd.enable_dx10_clamp and not kd.enable_ieee_mode
        offsets = [a.offset for a in k.args]
        assert offsets == sorted(offsets)
        assert all(a.offset + a.size <= k.kernarg_segment_size for a in k.args)


@pytest.mark.parametrize("entry", _manifest_entries(), ids=lambda e: e["path"])
def test_committed_code_objects(entry):
    path = REPO / "hsaco" / entry["path"]
    co = read_code_object(path)
    arch = path.parent.name
    assert arch == entry["arch"]
    check_invariants(co, arch)
    assert sorted(k.name for k in co.kernels) == [k["name"] for k in entry["kernels"]]
    for k in entry["kernels"]:
        parsed = co.kernel(k["name"])
        assert (parsed.vgpr_count, parsed.sgpr_count, parsed.group_segment_fixed_size) == (
            k["vgpr_count"], k["sgpr_count"], k["group_segment_fixed_size"])


@pytest.mark.parametrize("arch", list(ARCHS))
def test_tiny_kernel(tiny, arch):
    co = CodeObject.parse(tiny[arch], f"{arch}/tiny.hsaco")
    check_invariants(co, arch)
    assert [k.name for k in co.kernels] == ["tiny_f32_r1", "tiny_f32_r2"]
    k1, k2 = co.kernel("tiny_f32_r1"), co.kernel("tiny_f32_r2")
    assert (k1.group_segment_fixed_size, k2.group_segment_fixed_size) == (1024, 2048)
    assert (k1.max_flat_workgroup_size, k2.max_flat_workgroup_size) == (256, 128)
    assert k1.uniform_work_group_size
    explicit = [(a.offset, a.size, a.value_kind, a.address_space, a.actual_access) for a in k1.explicit_args]
    assert explicit == [
        (0, 8, "global_buffer", "global", "read_only"),
        (8, 8, "global_buffer", "global", "write_only"),
        (16, 4, "by_value", None, None),
        (20, 4, "by_value", None, None),
    ]
    # blockDim needs the v5 implicit block, which starts 8-aligned after the explicit args.
    kinds = {a.value_kind: a.offset for a in k1.hidden_args}
    assert kinds["hidden_block_count_x"] == 24 and kinds["hidden_group_size_x"] == 24 + 12
    assert k1.kernarg_segment_size == 24 + 256
    assert all(a.is_hidden for a in k1.hidden_args)
    with pytest.raises(CodeObjectError, match="no kernel 'nope'"):
        co.kernel("nope")


def test_segments_map_the_descriptors(tiny):
    co = CodeObject.parse(tiny["gfx942"])
    image = bytearray(co.image_size)
    for s in co.load_segments:
        image[s.vaddr:s.vaddr + s.memsz] = co.segment_bytes(s)
    for k in co.kernels:
        a = k.descriptor_address
        offset = struct.unpack_from("<q", image, a + 16)[0]
        assert a + offset == k.entry


# --- corrupted input -------------------------------------------------------------------


def test_truncated_files_raise_code_object_error(tiny):
    data = tiny["gfx1100"]
    # Section headers sit at the end, so every proper prefix is truncated somewhere.
    for n in [0, 3, 4, 16, 63, 64, 65, 200, *range(300, len(data), 151), len(data) - 1]:
        with pytest.raises(CodeObjectError):
            CodeObject.parse(data[:n], "cut.hsaco")


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


@pytest.mark.parametrize("offset, fmt, value, message", [
    (18, "<H", 62, "e_machine is 62"),                 # EM_X86_64
    (0, "<B", 0x7E, "not an ELF"),
    (4, "<B", 1, "64-bit little-endian"),              # ELFCLASS32
    (5, "<B", 2, "64-bit little-endian"),              # big endian
    (7, "<B", 0, "OS ABI is 0"),
    (8, "<B", 1, "ABI version 1"),                     # code object v3
    (16, "<H", 1, "not a linked code object"),         # ET_REL
    (48, "<B", 0x3F, "EF_AMDGPU_MACH 0x03f"),          # gfx90a: not shipped
])
def test_bad_header_fields(tiny, offset, fmt, value, message):
    with pytest.raises(CodeObjectError, match=message):
        CodeObject.parse(_patched(tiny["gfx942"], offset, fmt, value), "bad.hsaco")


def test_wrong_target_string_is_detected(tiny):
    # gfx942 code whose e_flags claim gfx950: the metadata target disagrees.
    with pytest.raises(CodeObjectError, match="disagrees"):
        CodeObject.parse(_patched(tiny["gfx942"], 48, "<B", ARCHS["gfx950"].elf_mach))


def test_random_corruption_never_escapes_as_another_error(tiny):
    rng = random.Random(1234)
    data = tiny["gfx1201"]
    for _ in range(300):
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        try:
            CodeObject.parse(bytes(out))
        except CodeObjectError:
            pass


# --- metadata encodings ----------------------------------------------------------------


def _pack_wide(obj) -> bytes:
    """msgpack with every int as int64/uint64 and every string as bin: legal, unusual."""
    if isinstance(obj, bool):
        return b"\xc3" if obj else b"\xc2"
    if isinstance(obj, int):
        return b"\xd3" + struct.pack(">q", obj) if obj < 0 else b"\xcf" + struct.pack(">Q", obj)
    if isinstance(obj, str):
        raw = obj.encode()
        return b"\xc5" + struct.pack(">H", len(raw)) + raw
    if isinstance(obj, list):
        return b"\xdd" + struct.pack(">I", len(obj)) + b"".join(_pack_wide(v) for v in obj)
    if isinstance(obj, dict):
        return b"\xdf" + struct.pack(">I", len(obj)) + b"".join(_pack_wide(k) + _pack_wide(v) for k, v in obj.items())
    raise TypeError(type(obj))


def _with_note(data: bytes, desc: bytes) -> bytes:
    """Append a new AMDGPU metadata note and point the PT_NOTE header at it."""
    note = struct.pack("<III", 7, len(desc), 32) + b"AMDGPU\0\0" + desc + b"\0" * (-len(desc) % 4)
    out = bytearray(data) + note
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", data, at)[0] == PT_NOTE:
            struct.pack_into("<QQQQQ", out, at + 8, len(data), len(data), len(data), len(note), len(note))
    return bytes(out)


def _metadata(data: bytes) -> dict:
    import msgpack

    co = CodeObject.parse(data)
    seg = next(s for s in co.segments if s.type == PT_NOTE)
    raw = data[seg.offset:seg.offset + seg.filesz]
    namesz, descsz, _ = struct.unpack_from("<III", raw)
    start = 12 + (namesz + 3) // 4 * 4
    return msgpack.unpackb(raw[start:start + descsz])


def test_metadata_with_wide_ints_and_bin_strings(tiny):
    data = tiny["gfx942"]
    meta = _metadata(data)
    meta["amdhsa.kernels"][0][".uses_dynamic_stack"] = 0          # int where a bool is usual
    meta["amdhsa.kernels"][0][".uniform_work_group_size"] = True  # bool where an int is usual
    wide = _with_note(data, _pack_wide(meta))
    a, b = CodeObject.parse(data), CodeObject.parse(wide)
    assert a.kernels == b.kernels and a.target == b.target and a.metadata_version == b.metadata_version


@pytest.mark.parametrize("mutate, message", [
    (lambda m: m["amdhsa.kernels"][0].pop(".vgpr_count"), "metadata key .vgpr_count is missing"),
    (lambda m: m["amdhsa.kernels"][0].__setitem__(".sgpr_count", "many"), "expected int"),
    (lambda m: m["amdhsa.kernels"][0].__setitem__(".symbol", "gone.kd"), "'gone.kd' is missing"),
    (lambda m: m["amdhsa.kernels"][0][".args"][0].pop(".offset"), "argument 0: metadata key .offset"),
    (lambda m: m.__setitem__("amdhsa.target", "amdgcn-amd-amdhsa--gfx950"), "disagrees"),
])
def test_bad_metadata(tiny, mutate, message):
    import msgpack

    meta = _metadata(tiny["gfx942"])
    mutate(meta)
    with pytest.raises(CodeObjectError, match=message):
        CodeObject.parse(_with_note(tiny["gfx942"], msgpack.packb(meta)))


def test_garbage_metadata(tiny):
    with pytest.raises(CodeObjectError, match="msgpack|map"):
        CodeObject.parse(_with_note(tiny["gfx942"], b"\xc1\xc1\xc1\xc1"))
    with pytest.raises(CodeObjectError, match="expected a map"):
        CodeObject.parse(_with_note(tiny["gfx942"], b"\x93\x01\x02\x03"))


def test_read_code_object_missing_file(tmp_path):
    with pytest.raises(CodeObjectError, match="cannot read"):
        read_code_object(tmp_path / "none.hsaco")
