"""The skeleton every linear-like op shares (skinny_gemm, fp8_linear, matmul_4bit, w4a16_linear): the
plan of the lane-split kernels for small N (the split-K kernels' for larger N is `ops._splitk`), the
rule that sends the quantized ops' small N to split-K on CDNA, the shared shape and bias checks, the
reference's last step, and the test for torch's own fallback on a ROCm GPU. Each op module keeps its
format checks, its kernel choice and its reference.

The configuration rules (K-chunk, workgroups per CU, YTILE, grid) are written out in docs/linear.md;
the comments here name them. Results never
depend on the CU count, the tile or the grid: ``deterministic=True`` holds across calls, schedules and
CU counts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import registry, tensors
from ..devices.base import Device
from ..errors import HipSkinnyError, InputValueError
from ..launch import LaunchPlan, make_plan, threads
from ..operands import Operands
from ..tensors import TensorView

MAX_N = 8                           # small-N kernel
SPLITK_MAX_N = 128                  # split-K kernel, N = MAX_N + 1 .. SPLITK_MAX_N
# MAX_GROUPS_PER_CU: docs/linear.md
MAX_GROUPS_PER_CU = 4
# SMALL_N_SPLITK_WORK: docs/linear.md
SMALL_N_SPLITK_WORK: dict[str, float] = {"gfx942": 8e7, "gfx950": 1e8}
SMALL_N_SPLITK_OPS = ("fp8_linear", "matmul_4bit", "w4a16_linear")


def k_chunk(n: int, k: int, lds_bytes: int, wave_size: int, chunk: int = 8, op: str = "skinny_gemm",
            elem_bytes: int = 2) -> int:
    """Columns of x staged in LDS per pass (see the module docstring); ``chunk``: the columns a
    lane takes at a time (fp8_linear: 16); ``elem_bytes``: bytes per staged element."""
    k_pad = -(-k // chunk) * chunk
    fit = lds_bytes // (elem_bytes * n)
    if k_pad <= fit:
        return k_pad
    step = chunk * wave_size
    if fit < step:
        raise InputValueError(f"{op}: {n} rows of x do not fit {lds_bytes} bytes of LDS")
    return fit // step * step


def groups_per_cu(info: Any, meta: Any, lds: int, most: int) -> int:
    """Workgroups per CU that the kernel's registers and LDS allow: at least 1, at most `most`."""
    waves = threads(meta) // info.wave_size
    per_simd = info.occupancy(meta.vgpr_count, meta.group_segment_fixed_size + lds, waves)
    return max(1, min(most, per_simd * info.simds_per_cu // waves))


def lane_split_grid(tiles: tuple[int, ...], m: int, cu_count: int, groups: int, waves: int) -> tuple[int, int]:
    """(YTILE, grid) of the small-N lane-split kernels: persistent, the ``waves`` of each workgroup
    striding over the tiles; ``tiles``: the YTILEs built for N (`built_ytiles`)."""
    yt = ytile(tiles, m, cu_count * groups * waves)
    count = -(-m // yt)
    return yt, max(1, min(cu_count * groups, -(-count // waves)))


def built_ytiles(module: Any, prefix: str) -> tuple[int, ...]:
    """The YTILEs of the lane-split kernels ``{prefix}_y<YTILE>`` in ``module`` (a loaded code object),
    largest first. The kernel sources decide which exist (a tile's N x YTILE accumulators must fit
    the register budget); the planner only reads them."""
    pattern = re.compile(re.escape(prefix) + r"_y(\d+)")
    found = sorted((int(m.group(1)) for k in module.code.kernels if (m := pattern.fullmatch(k.name))), reverse=True)
    if not found:
        raise HipSkinnyError(f"no lane-split kernel {prefix}_y<YTILE> in the {module.family} code object")
    return tuple(found)


def lane_split_plan(device: Device, family: str, prefix: str, n: int, m: int, k: int, *, chunk: int = 8,
                    op: str = "skinny_gemm", elem: int = 2, reserved: int = 0, sums: bool = False) -> LaunchPlan:
    """The plan of a small-N lane-split kernel ``{prefix}_y{YTILE}`` of code-object ``family`` by
    this module's rules, for kernels that stage N x kc values of ``elem`` bytes of x after their
    static LDS, then ``reserved`` bytes (fp8_linear's block scales); ``sums``: plus one fp32 per
    token and 32-column chunk (N * kc / 8 bytes; w4a16 bf16). ``chunk``: the K columns a lane takes
    at a time. Not cached: the caller's plan cache holds it."""
    info = device.arch
    module = registry.load(device, family)
    # Occupancy depends on the kernel's registers: judge it on the largest tile built for N.
    tiles = built_ytiles(module, prefix)
    _, meta_max = module.kernel(f"{prefix}_y{tiles[0]}")
    free = info.lds_per_workgroup - meta_max.group_segment_fixed_size - reserved
    kc = k_chunk(n, k, free * 16 // 17 if sums else free, info.wave_size, chunk, op, elem)
    lds = n * kc * elem + (n * kc // 8 if sums else 0) + reserved
    groups = groups_per_cu(info, meta_max, lds, MAX_GROUPS_PER_CU)
    yt, grid = lane_split_grid(tiles, m, device.properties.cu_count, groups, threads(meta_max) // info.wave_size)
    fn, meta = module.kernel(f"{prefix}_y{yt}")
    return make_plan(fn, meta, (grid, 1, 1), shared_mem=lds,
                     info={"kernel": f"{prefix}_y{yt}", "ytile": yt, "k_chunk": kc, "lds_bytes": lds,
                           "groups_per_cu": groups, "grid": grid, "staged_once": kc >= k})


def ytile(tiles: tuple[int, ...], m: int, wave_slots: int) -> int:
    """Rows per wave tile: the largest of ``tiles`` (those built for N, largest first) whose tile count
    still gives every wave slot a tile; the smallest when none does."""
    for y in tiles:
        if -(-m // y) >= wave_slots:
            return y
    return tiles[-1]


def small_n_splitk(op: str, arch: str, n: int, m: int, k: int) -> bool:
    """Whether ``op``'s call of N = 2..MAX_N tokens takes the split-K kernel on ``arch``
    (SMALL_N_SPLITK_WORK): a rule of the call's shape and the arch, never of the CU count."""
    work = SMALL_N_SPLITK_WORK.get(arch)
    return op in SMALL_N_SPLITK_OPS and work is not None and 2 <= n <= MAX_N and n * m * k >= work


def on_rocm_torch(ops: Operands) -> bool:
    """Whether the call's operands are torch tensors on a ROCm GPU (where the torch routes apply)."""
    xv = ops["x"]
    return xv is not None and xv.kind == "torch" and not ops.on_host and xv.device_type == tensors.DL_ROCM


def outside(ops: Operands, op: str, why: str, fallback: Callable[[], Any], supported: str) -> Any:
    """A call outside the kernels' range: torch tensors on a ROCm GPU take ``fallback()`` (logged at
    debug level); anything else is an error naming what is ``supported``."""
    if on_rocm_torch(ops):
        logging.getLogger(f"{__package__}.{op}").debug("%s: %s is outside the kernels' range; falling back to "
                                                       "torch.nn.functional.linear", op, why)
        return fallback()
    raise InputValueError(f"{op}: {why}; supported: {supported}")


# ----------------------------------------------------------------------------------------------
# Checks and the reference's last step, shared by every linear op


def tokens(op: str, xv: TensorView, m: int, k: int, weight: str = "the weight") -> int:
    """N, the rows of x ``[..., K]`` (leading dims flattened), for a weight ``[M, K]``."""
    if len(xv.shape) < 1 or xv.shape[-1] != k:
        raise InputValueError(f"{op}: x must be [..., K] with K={k} ({weight} is [M={m}, K={k}]); "
                              f"got shape {xv.shape}")
    return int(np.prod(xv.shape[:-1], dtype=np.int64))


def check_bias(op: str, bv: TensorView | None, n: int, m: int, dtype: np.dtype | None = None) -> None:
    """A bias ``[M]``, ``[1, M]`` or ``[N, M]`` (in ``dtype`` when given)."""
    if bv is not None and ((dtype is not None and bv.dtype != dtype) or bv.shape not in ((m,), (1, m), (n, m))):
        raise InputValueError(f"{op}: bias must be {'' if dtype is None else f'{dtype} '}[M], [1, M] or [N, M] "
                              f"with N={n}, M={m}; got {bv.dtype} {bv.shape}")


def bias_rows(bv: TensorView | None) -> int:
    """Rows of a bias: 0 (none), 1 (one row for every token) or N."""
    return 0 if bv is None else (bv.shape[0] if len(bv.shape) == 2 else 1)


def linear_reference(x: Any, w: np.ndarray, bias: Any = None) -> np.ndarray:
    """``x @ w.T + bias`` in float64, before any rounding (``w``: the exact weight ``[M, K]``; shape
    ``[..., M]``)."""
    xa = np.asarray(x)
    m, k = w.shape
    y = xa.reshape(-1, k).astype(np.float64) @ w.T
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64).reshape(-1, m)
    return y.reshape(*xa.shape[:-1], m)
