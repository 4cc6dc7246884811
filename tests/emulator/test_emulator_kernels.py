"""The emulator against purpose-written kernels (tests/kernels/), on every shipped arch.

Each test runs real code objects built by ``python -m build_scripts`` into tests/hsaco/ and
checks them against numpy / ml_dtypes, or checks that a deliberately broken kernel is
caught (out-of-bounds access, runaway loop, uninitialised LDS, missing barrier).
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest
from emulated import from_device, launch, load_test_kernel, to_device

from hipskinny.arch import ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.errors import EmulatorError, EmulatorFault

ALL_ARCHS = list(ARCHS)
U32 = 2.0 ** -24          # unit roundoff of fp32
SEEDS = range(6)


def gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative bound of n fp32 roundings in a sum."""
    return n * U32 / (1 - n * U32)


def f32_bits(*words: int) -> np.ndarray:
    return np.array(words, np.uint32).view(np.float32)


def device(arch: str, **kwargs) -> EmulatedDevice:
    return EmulatedDevice(arch, num_cus=4, **kwargs)


# --- (1) conversions ---------------------------------------------------------------------

def f32_inputs(rng: np.random.Generator) -> np.ndarray:
    special = np.array([
        0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -7.25,
        65504.0, 65519.0, 65520.0, 65536.0, 1e5, -1e5, 3.4028235e38, -3.4028235e38,   # f16 max, overflow
        1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, -(1 + 2 ** -11),     # f16 ties
        2 ** -14, 2 ** -24, 2 ** -25, 1.5 * 2 ** -25, 3 * 2 ** -25, 2 ** -26,          # f16 denormal range
        2 ** -14 - 2 ** -25, -(2 ** -24), 5 * 2 ** -25,
        1e-40, -1e-40, 1.4e-45, np.inf, -np.inf,                                         # f32 denormals
    ], np.float32)
    bits = f32_bits(
        0x3F808000, 0x3F818000, 0x3F808001, 0xBF818000,      # bf16 ties and just above
        0x7F7FFFFF, 0x7F7F7FFF, 0x007FFFFF, 0x00008000, 0x00018000, 0x80018000,   # bf16 overflow, denormals
        0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA12345, 0xFF800100,              # quiet, signalling NaNs
    )
    scale = (10.0 ** rng.uniform(-9, 9, 200)).astype(np.float32)
    return np.concatenate([special, bits, rng.standard_normal(200).astype(np.float32) * scale])


def header_bf16_nan(bits: np.ndarray) -> np.ndarray:
    """HIP 6.2's __float2bfloat16 for NaN: truncate, but set bit 16 if the dropped half was nonzero."""
    return ((bits | np.where(bits & 0xFFFF, 0x10000, 0).astype(np.uint32)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_conversions_from_f32(arch):
    rng = np.random.default_rng(1)
    x = f32_inputs(rng)
    n = len(x)
    dev = device(arch)
    module, _ = load_test_kernel(dev, "conversions")
    xd, hd, backd, bd = to_device(dev, x), dev.alloc(2 * n), dev.alloc(4 * n), dev.alloc(2 * n)
    launch(dev, module, "cvt_f32", -(-n // 64), 64, [xd, hd, backd, bd, n])
    h = from_device(dev, hd, n, np.uint16)
    back = from_device(dev, backd, n, np.float32)
    b = from_device(dev, bd, n, np.uint16)

    nan = np.isnan(x)
    with np.errstate(over="ignore", invalid="ignore"):
        ref16 = x.astype(np.float16)
    np.testing.assert_array_equal(h[~nan], ref16.view(np.uint16)[~nan], err_msg="f32 -> f16 bits")
    assert np.isnan(h.view(np.float16)[nan]).all(), "f32 NaN -> f16 must be NaN"
    np.testing.assert_array_equal(back.view(np.uint32)[~nan], ref16.astype(np.float32).view(np.uint32)[~nan],
                                  err_msg="f16 -> f32 of the rounded value")
    assert np.isnan(back[nan]).all()

    with np.errstate(over="ignore", invalid="ignore"):
        refb = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(b[~nan], refb[~nan], err_msg="f32 -> bf16 bits (RNE)")
    np.testing.assert_array_equal(b[nan], header_bf16_nan(x.view(np.uint32)[nan]), err_msg="f32 NaN -> bf16")


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_conversions_f16_to_f32(arch):
    special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0x3555,
               0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7D55]
    h = np.array(special + list(range(0, 0x10000, 257)), np.uint16)
    n = len(h)
    dev = device(arch)
    module, _ = load_test_kernel(dev, "conversions")
    hd, fd = to_device(dev, h), dev.alloc(4 * n)
    launch(dev, module, "cvt_f16", -(-n // 64), 64, [hd, fd, n])
    f = from_device(dev, fd, n, np.float32)
    ref = h.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(f.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])
    assert np.isnan(f[nan]).all()


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_conversions_int_float(arch):
    rng = np.random.default_rng(2)
    si = [0, 1, -1, 7, -7, 2 ** 24, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24 + 3), 2 ** 31 - 1, -(2 ** 31),
          2 ** 31 - 64, 2 ** 31 - 65, 123456789, -987654321]
    ui = [0, 1, 2 ** 24 + 1, 2 ** 24 + 3, 2 ** 31, 2 ** 31 + 1, 2 ** 31 + 128, 2 ** 31 + 384, 2 ** 32 - 1,
          2 ** 32 - 128, 2 ** 32 - 129, 3_000_000_001]
    fi = [0.0, -0.0, 0.4, -0.4, 0.5, -0.5, 1.5, -1.5, 2.9999998, -2.9999998, 1e-40, -1e-40,
          2147483520.0, -2147483648.0, 16777217.0, 123456.79, -7.75, 1e9, -1e9]
    fu = [0.0, 1e-40, 0.5, 0.99999994, 1.0, 65535.5, 2.0 ** 31, 3e9, 4294967040.0]
    n = 128
    si_a = np.concatenate([si, rng.integers(-2 ** 31, 2 ** 31, n - len(si))]).astype(np.int32)
    ui_a = np.concatenate([ui, rng.integers(0, 2 ** 32, n - len(ui))]).astype(np.uint32)
    fi_a = np.concatenate([np.array(fi, np.float32), rng.uniform(-2e9, 2e9, n - len(fi)).astype(np.float32)])
    fu_a = np.concatenate([np.array(fu, np.float32), rng.uniform(0, 4.2e9, n - len(fu)).astype(np.float32)])

    dev = device(arch)
    module, _ = load_test_kernel(dev, "conversions")
    ins = [to_device(dev, a) for a in (si_a, ui_a, fi_a, fu_a)]
    outs = [dev.alloc(4 * n) for _ in range(4)]
    launch(dev, module, "cvt_int", -(-n // 64), 64, [*ins, *outs, n])
    from_i32 = from_device(dev, outs[0], n, np.float32)
    from_u32 = from_device(dev, outs[1], n, np.float32)
    to_i32 = from_device(dev, outs[2], n, np.int32)
    to_u32 = from_device(dev, outs[3], n, np.uint32)

    # Integers are exact in float64, so float64 -> float32 is the single RNE rounding.
    np.testing.assert_array_equal(from_i32, si_a.astype(np.float64).astype(np.float32), err_msg="(float)int")
    np.testing.assert_array_equal(from_u32, ui_a.astype(np.float64).astype(np.float32), err_msg="(float)unsigned")
    np.testing.assert_array_equal(to_i32, np.trunc(fi_a.astype(np.float64)).astype(np.int32), err_msg="(int)float")
    np.testing.assert_array_equal(to_u32, np.trunc(fu_a.astype(np.float64)).astype(np.uint32),
                                  err_msg="(unsigned)float")


# --- (2) block reduction -----------------------------------------------------------------

@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_block_reduce(arch):
    rng = np.random.default_rng(3)
    blocks = 5
    n = blocks * 256 - 37                     # the last block is partial
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(np.float32)
    x[512:768] = -np.abs(x[512:768])          # an all-negative block: the max must not come from padding
    ref_sum = np.array([x[b * 256:(b + 1) * 256].astype(np.float64).sum() for b in range(blocks)])
    ref_max = np.array([x[b * 256:(b + 1) * 256].max() for b in range(blocks)], np.float32)
    abs_sum = np.array([np.abs(x[b * 256:(b + 1) * 256].astype(np.float64)).sum() for b in range(blocks)])

    results = []
    for seed in (None, 5):
        dev = device(arch, seed=seed)
        module, _ = load_test_kernel(dev, "block_reduce")
        xd, sd, md = to_device(dev, x), dev.alloc(4 * blocks), dev.alloc(4 * blocks)
        launch(dev, module, "block_reduce", blocks, 256, [xd, sd, md, n])
        sums = from_device(dev, sd, blocks, np.float32)
        maxes = from_device(dev, md, blocks, np.float32)
        # Every element passes through 8 fp32 additions (log2 of 256, on wave64 and wave32 alike).
        err = np.abs(sums.astype(np.float64) - ref_sum)
        assert (err <= gamma(8) * abs_sum).all(), (sums, ref_sum, err / abs_sum)
        np.testing.assert_array_equal(maxes, ref_max)
        results.append(sums)
    # A fixed reduction tree: the schedule must not change a single bit.
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))


# --- (3) atomics across workgroups --------------------------------------------------------

@pytest.mark.parametrize("arch", ALL_ARCHS)
@pytest.mark.parametrize("seed", [None, 1])
def test_atomics(arch, seed):
    rng = np.random.default_rng(4)
    n = 16 * 64                               # 16 workgroups
    x = rng.uniform(-1, 1, n).astype(np.float32)
    x[rng.integers(n)] = 1.5                  # the unique maximum
    dev = device(arch, seed=seed)
    module, _ = load_test_kernel(dev, "atomics")
    xd = to_device(dev, x)
    sum_d = to_device(dev, np.zeros(1, np.float32))
    counter_d = to_device(dev, np.zeros(1, np.uint32))
    tickets_d = to_device(dev, np.full(n, 0xFFFFFFFF, np.uint32))
    max_d = to_device(dev, np.array([-np.inf], np.float32))
    launch(dev, module, "atomics", n // 64, 64, [xd, sum_d, counter_d, tickets_d, max_d, n])

    assert from_device(dev, counter_d, 1, np.uint32)[0] == n
    tickets = from_device(dev, tickets_d, n, np.uint32)
    np.testing.assert_array_equal(np.sort(tickets), np.arange(n, dtype=np.uint32))
    assert from_device(dev, max_d, 1, np.float32)[0] == np.float32(1.5)
    total = float(from_device(dev, sum_d, 1, np.float32)[0])
    ref = x.astype(np.float64).sum()
    # n terms summed in some order: at most n - 1 roundings on any element's path.
    assert abs(total - ref) <= gamma(n - 1) * np.abs(x.astype(np.float64)).sum(), (total, ref)


# --- (4) LDS staging and the barrier ---------------------------------------------------------

@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_lds_reverse_and_missing_barrier(arch):
    blocks = 2
    x = np.arange(1, blocks * 256 + 1, dtype=np.float32)       # nonzero: a read before the write shows
    expected = x.reshape(blocks, 256)[:, ::-1].reshape(-1)

    def run(kernel: str, **kwargs) -> np.ndarray:
        dev = device(arch, **kwargs)
        module, _ = load_test_kernel(dev, "lds_reverse")
        xd, yd = to_device(dev, x), dev.alloc(4 * len(x))
        launch(dev, module, kernel, blocks, 256, [xd, yd])
        return from_device(dev, yd, len(x), np.float32)

    for kwargs in [{}, {"strict_lds": True}, *({"seed": s} for s in SEEDS)]:
        np.testing.assert_array_equal(run("lds_reverse", **kwargs), expected, err_msg=f"lds_reverse {kwargs}")
    wrong = [s for s in SEEDS if not np.array_equal(run("lds_reverse_missing_barrier", seed=s), expected)]
    assert wrong, f"no seed in {list(SEEDS)} exposed the missing barrier"


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_lds_bytes_are_bank_dwords(arch):
    """16-bit LDS accesses take a bank each, as 32-bit ones do: the same LDS bytes for the same lanes."""
    x = np.arange(1, 257, dtype=np.uint16)
    dev = device(arch)
    module, _ = load_test_kernel(dev, "lds_reverse")
    xd, yd = to_device(dev, x), dev.alloc(2 * 256)
    stats = launch(dev, module, "lds_reverse_u16", 1, 256, [xd, yd])
    np.testing.assert_array_equal(from_device(dev, yd, 256, np.uint16), x[::-1])
    sixteen = {m for m in stats.mnemonics if re.fullmatch(r"ds_(write|store)_b16|ds_(read|load)_u16(_d16)?", m)}
    assert len(sixteen) == 2, sorted(stats.mnemonics)      # a 16-bit store and load, really
    assert stats.bytes_stored["lds"] == stats.bytes_loaded["lds"] == 4 * 256, dict(stats.bytes_loaded)


# --- (5)-(7) faults ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_out_of_bounds_read_faults(arch):
    n = 100
    dev = device(arch)
    module, _ = load_test_kernel(dev, "faults")
    xd, yd = to_device(dev, np.ones(n, np.float32)), dev.alloc(4 * n)
    with pytest.raises(EmulatorFault) as info:
        launch(dev, module, "oob_read", -(-n // 64), 64, [xd, yd, n])
    msg = str(info.value)
    lane = (n - 1) % 64 % ARCHS[arch].wave_size           # thread n - 1 reads x[n]
    assert "oob_read" in msg, msg
    assert re.search(r"\bpc 0x[0-9a-f]+", msg), msg
    assert re.search(rf"\blane {lane}\b", msg), msg
    assert f"0x{xd + 4 * n:x}" in msg, msg


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_runaway_loop_is_stopped(arch):
    dev = device(arch, max_wave_steps=20_000)
    module, _ = load_test_kernel(dev, "faults")
    flag, out = to_device(dev, np.zeros(1, np.int32)), to_device(dev, np.zeros(64, np.int32))
    with pytest.raises(EmulatorError, match="runaway") as info:
        launch(dev, module, "runaway", 1, 64, [flag, out])
    assert not isinstance(info.value, EmulatorFault)
    assert "runaway" in str(info.value) and "kernel runaway" in str(info.value)

    dev.copy_to_device(flag, np.ones(1, np.int32), 4)          # now the loop exits at once
    launch(dev, module, "runaway", 1, 64, [flag, out])
    np.testing.assert_array_equal(from_device(dev, out, 64, np.int32), np.ones(64, np.int32))


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_strict_lds_faults_on_unwritten_lds(arch):
    for strict in (False, True):
        dev = device(arch, strict_lds=strict)
        module, _ = load_test_kernel(dev, "faults")
        yd = dev.alloc(4 * 256)
        if not strict:
            launch(dev, module, "lds_uninit", 1, 256, [yd])
            y = from_device(dev, yd, 256, np.float32)
            np.testing.assert_array_equal(y[:128], 1 + np.arange(128, dtype=np.float32))
            continue
        with pytest.raises(EmulatorFault, match="LDS") as info:
            launch(dev, module, "lds_uninit", 1, 256, [yd])
        assert "lds_uninit" in str(info.value)


# --- (8) grid geometry and hidden arguments ------------------------------------------------------

GRIDS = [((3, 2, 2), (8, 4, 2)), ((2, 3, 1), (16, 2, 1)), ((5, 1, 1), (33, 1, 1)), ((1, 1, 3), (4, 4, 4)),
         ((2, 2, 2), (1, 1, 1)), ((1, 2, 1), (256, 1, 1))]


@pytest.mark.parametrize("arch", ALL_ARCHS)
@pytest.mark.parametrize("grid, block", GRIDS, ids=[f"g{g}-b{b}".replace(" ", "") for g, b in GRIDS])
def test_grid_ids(arch, grid, block):
    threads = math.prod(block)
    total = math.prod(grid) * threads
    dev = device(arch)
    module, _ = load_test_kernel(dev, "grid_dims")
    out = to_device(dev, np.full(12 * total, 0xFFFFFFFF, np.uint32))
    launch(dev, module, "grid_ids", grid, block, [out])
    got = from_device(dev, out, (total, 12), np.uint32)

    # Global linear index: threads of a block (x fastest), then blocks (x fastest).
    bz, by, bx, tz, ty, tx = np.meshgrid(*(np.arange(v) for v in (grid[2], grid[1], grid[0], *block[::-1])),
                                         indexing="ij")
    expected = np.stack([tx, ty, tz, bx, by, bz, *(np.full_like(tx, v) for v in (*block, *grid))], axis=-1)
    np.testing.assert_array_equal(got, expected.reshape(total, 12).astype(np.uint32))


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_add3d_partial_blocks(arch):
    nx, ny, nz = 37, 11, 5
    block = (16, 4, 2)
    grid = (-(-nx // block[0]), -(-ny // block[1]), -(-nz // block[2]))
    a = np.random.default_rng(6).standard_normal((nz, ny, nx)).astype(np.float32)
    dev = device(arch)
    module, _ = load_test_kernel(dev, "grid_dims")
    ad = to_device(dev, a)
    out = to_device(dev, np.full(a.shape, np.nan, np.float32))
    launch(dev, module, "add3d", grid, block, [ad, out, nx, ny, nz])
    expected = np.float32(2) * a + np.arange(nz, dtype=np.float32)[:, None, None]
    np.testing.assert_array_equal(from_device(dev, out, a.shape, np.float32), expected)


# --- (9) raw buffer loads (gfx9: the kernels' only buffer use) ----------------------------------

GFX9_ARCHS = [a for a in ALL_ARCHS if ARCHS[a].wave_size == 64]
BUFFER_WORD3 = 0x00020000    # DATA_FORMAT 32, as the kernels (and CK) set it on gfx9


def _buffer_loads(arch: str, src: np.ndarray, nbytes: int, soff: int, word3: int = BUFFER_WORD3) -> np.ndarray:
    dev = device(arch)
    module, _ = load_test_kernel(dev, "buffer_loads")
    sd = to_device(dev, src)
    out = to_device(dev, np.full(384, 0xDEADBEEF, np.uint32))
    launch(dev, module, "buffer_loads", 1, 64, [sd, out, nbytes, soff, word3])
    return from_device(dev, out, 384, np.uint32)


def _expected_buffer(src: np.ndarray, nbytes: int, soff: int) -> np.ndarray:
    """Each access read from src when wholly below nbytes, else zero (the ISA's range check)."""
    def at(off: np.ndarray, size: int) -> np.ndarray:
        inside = off + size <= nbytes
        assert not np.any((off < nbytes) & ~inside), "the test never straddles the end"
        got = np.stack([src[np.minimum(off + i, len(src) - 1)] for i in range(size)], 1).astype(np.uint32)
        got = (got << (8 * np.arange(size, dtype=np.uint32))).sum(1, dtype=np.uint32)
        return np.where(inside, got, 0).astype(np.uint32)
    lanes = np.arange(64)
    x4 = np.stack([at(soff + 16 * lanes + 4 * i, 4) for i in range(4)], 1).reshape(-1)
    return np.concatenate([x4, at(soff + lanes, 1), at(soff + 4 * lanes, 4)])


@pytest.mark.parametrize("arch", GFX9_ARCHS)
@pytest.mark.parametrize("nbytes, soff", [(1088, 64), (992, 0), (96, 0), (0, 0)])
def test_raw_buffer_loads_read_zero_past_the_end(arch, nbytes, soff):
    src = np.random.default_rng(9).integers(1, 256, 1152, dtype=np.uint8)     # nonzero: a zero shows
    np.testing.assert_array_equal(_buffer_loads(arch, src, nbytes, soff), _expected_buffer(src, nbytes, soff))


@pytest.mark.parametrize("arch", [a for a in ALL_ARCHS if a not in GFX9_ARCHS])
def test_buffer_loads_are_refused_on_rdna(arch):
    with pytest.raises(EmulatorError, match="not modeled"):
        _buffer_loads(arch, np.ones(1152, np.uint8), 1088, 64, word3=0x31004000)


@pytest.mark.parametrize("arch", GFX9_ARCHS)
def test_raw_buffer_loads_refuse_what_is_not_modeled(arch):
    src = np.ones(1152, np.uint8)
    with pytest.raises(EmulatorError, match="partly out of range"):
        _buffer_loads(arch, src, 100, 64)          # lane 2's 16 bytes at 96..111 straddle 100
    with pytest.raises(EmulatorError, match="DATA_FORMAT 0"):
        _buffer_loads(arch, src, 1088, 64, word3=0)
    # lane 58's 16 bytes: VGPR offset 928 (in range), plus the SGPR offset 992 (out): the sources
    # disagree on whether the SGPR offset counts
    with pytest.raises(EmulatorError, match="in range by one reading of the range check and out by the other"):
        _buffer_loads(arch, src, 992, 64)


@pytest.mark.parametrize("arch", GFX9_ARCHS)
def test_agpr_data_of_memory_instructions(arch):
    """Global, buffer and LDS loads and stores with AGPR data (gfx90a and later; matmul_4bit_splitk's
    _direct kernels load into AGPRs): tests/kernels/agpr_memory.hip."""
    dev = device(arch)
    module, _ = load_test_kernel(dev, "agpr_memory")
    src = np.random.default_rng(4).integers(0, 2**32, 512, dtype=np.uint32)
    sd = to_device(dev, src)
    out = to_device(dev, np.full(320, 0xDEADBEEF, np.uint32))
    launch(dev, module, "agpr_memory", 1, 64, [sd, out])
    got = from_device(dev, out, 320, np.uint32)
    lanes = np.arange(64)
    np.testing.assert_array_equal(got[:256].reshape(64, 4), src[:256].reshape(64, 4)[63 - lanes])
    np.testing.assert_array_equal(got[256:], src[256:320])


# --- hand-written assembly: DPP, readlane/writelane, EXEC masking ------------------------------

@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_xlane_assembly(arch):
    w = ARCHS[arch].wave_size
    dev = device(arch)
    module, _ = load_test_kernel(dev, "xlane")
    out = to_device(dev, np.full(2 * w + 10, 0xDEADBEEF, np.uint32))
    launch(dev, module, "xlane", 1, w, [out])
    got = from_device(dev, out, 2 * w + 10, np.uint32)
    lanes = np.arange(w, dtype=np.uint32)
    scan = (lanes + 1) * (lanes + 2) // 2
    np.testing.assert_array_equal(got[:w], scan, err_msg="DPP prefix sum")
    np.testing.assert_array_equal(got[w:2 * w], np.where(lanes < 20, 1000 + lanes, lanes), err_msg="EXEC mask")
    expected = [w * (w + 1) // 2,   # readlane(scan, w - 1)
                253,                # readlane(scan, s6 = 21)
                496,                # readlane(scan, 30) with lane 30 inactive
                0xFFFFFFFF, w,      # saved EXEC (low word), its popcount
                0xFFFFF, 20,        # EXEC inside the if, its popcount
                1, 0,               # SCC after saveexec: some lanes / no lanes left
                1]                  # s_cbranch_execz skipped the empty block
    assert got[2 * w:].tolist() == expected
