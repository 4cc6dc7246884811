"""The template of the quantized linear ops, matmul_4bit (bitsandbytes 4-bit) and w4a16_linear
(AWQ/GPTQ int4): both fuse the dequantization into the lane-split kernels (N = 1..8) and the
split-K kernels (N = 9..64, and large calls of N = 2..8 on CDNA: `_linear.small_n_splitk`), and
take a route through their own dequantize kernel and skinny_gemm's kernels
(`skinny_gemm.dequantize_route`) for the shapes those do not serve. The op modules keep their
formats' checks, their crossover rule, their kernels' scalar arguments and their references;
the bind, the plans, the launch and the host staging live here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes, operands, registry
from ..devices.base import Device
from ..errors import InputValueError
from ..launch import Launch, LaunchPlan, PlanCache, make_launch, make_plan, threads
from ..operands import DeviceCall, HostCall, Operands, Staged
from . import _linear as lin
from . import _splitk
from ._common import DTYPE_TAG

MAX_N = lin.MAX_N                   # fused lane-split kernel
FUSED_MAX_N = 64                    # fused split-K kernel, N = MAX_N + 1 .. FUSED_MAX_N
CHUNK = 32                          # K columns (16 weight bytes) per lane chunk


def check_prepared(op: str, what: str, ops: Operands, name: str, lead: tuple[int, ...], rows: int, k: int, g: int,
                   symmetric: bool, dtype: Any) -> None:
    """A `w4a16.Prepared` weight's arrays (operands ``name``, ``{name}_scales`` ..., or ``w``, ``scales`` ...
    when ``name`` is "w") against its shape: ``lead`` (``(E,)`` for an expert stack), ``[rows, K]``,
    group size G; scales in ``dtype``. ``what`` names the weight in messages."""
    pre = "" if name == "w" else f"{name}_"
    wv, sv, zv, pv = ops[name], ops[f"{pre}scales"], ops[f"{pre}zeros"], ops[f"{pre}perm"]
    assert wv is not None and sv is not None
    dims = ", ".join(map(str, (*lead, rows)))
    words, scales = (*lead, rows, k // 8), (*lead, rows, k // g)
    if wv.dtype not in (np.dtype(np.uint32), np.dtype(np.int32)) or wv.shape != words:
        raise InputValueError(f"{op}: {what}qweight must be uint32 [{dims}, K/8 = {k // 8}]; got {wv.dtype} "
                              f"{wv.shape}")
    if sv.dtype != dtype or sv.shape != scales:
        raise InputValueError(f"{op}: {what}scales must be {dtype} (x's dtype: prepare(..., dtype=...)) of shape "
                              f"[{dims}, K/G = {k // g}]; got {sv.dtype} {sv.shape}")
    if symmetric != (zv is None) or (zv is not None and (zv.dtype != np.dtype(np.uint8) or zv.shape != scales)):
        raise InputValueError(f"{op}: {what}zeros must be uint8 {scales} when asymmetric and absent when "
                              "symmetric")
    if pv is not None and (pv.dtype != np.dtype(np.int32) or pv.shape != (*lead, k)):
        raise InputValueError(f"{op}: {what}perm must be int32 {(*lead, k)}; got {pv.dtype} {pv.shape}")
    if math.prod(words) >= 2**32:
        raise InputValueError(f"{op}: {what}qweight holds {math.prod(words)} words; the kernels index below 2**32")


@dataclass
class QuantizedLinear:
    """One quantized linear op's fixed facts (names and families), and the steps they parameterize."""

    op: str                         # the public name: in messages, and the name of its code objects,
                                    # kernels and scratch slots (one name per family)
    names: tuple[str, ...]          # the operands: x, the weight's arrays, bias, out
    weights: tuple[str, ...]        # the weight's arrays, contiguous on a GPU
    weight_what: str                # "the prepared " -- how messages name them
    align_message: str
    sums: bool = False              # bf16 lane-split kernels take x's chunk sums in LDS
    plans: PlanCache = field(default_factory=PlanCache)

    def bind(self, ops: Operands, n: int, m: int, k: int, *, fusible: bool, fused: bool | None, fused_rule: str,
             route: Callable[[], Any], launch: Callable[[int, int], tuple[Launch, tuple]],
             staged: Callable[[], list[Staged | None]]) -> Any:
        """The bound call: nothing for an empty result; the dequantize ``route()`` where the fused
        kernels do not apply (``fusible``) or ``fused`` is False; else the fused kernel,
        ``launch(x_stride, bias_stride)``, with host inputs ``staged()``."""
        xv, bv = ops["x"], ops["bias"]
        assert xv is not None
        out_shape = (*xv.shape[:-1], m)
        operands.check_out(ops, out_shape, xv.dtype)
        if m == 0 or n == 0:
            return operands.nothing(ops, out_shape, xv.dtype, f"{self.op}.y")
        if not ops.on_host:
            operands.require_contiguous(ops, self.weights, self.weight_what)
        if not fusible:
            if fused:
                raise InputValueError(f"{self.op}: fused=True, but the fused kernels take N = 1..{FUSED_MAX_N} "
                                      f"tokens, {fused_rule}")
            return route()
        if fused is False:
            return route()
        if ops.on_host:
            call, slots = launch(k, m if lin.bias_rows(bv) > 1 else 0)
            return HostCall(ops, [call], staged(), out_shape=out_shape, out_dtype=xv.dtype,
                            out_slot=f"{self.op}.y", scratch_slots=slots)
        call, slots = launch(operands.staged_rows(self.op, xv, k), operands.bias_row_stride(self.op, bv, m))
        return DeviceCall(ops, [call], out_shape=out_shape, out_dtype=xv.dtype, aligned=("x", "w"),
                          align_message=self.align_message, scratch_slots=slots)

    def staged(self, ops: Operands, n: int, m: int, k: int, pitch: int,
               checks: dict[str, Callable[[Any], None]] | None = None) -> list[Staged | None]:
        """How host inputs reach the device: x rows ``pitch`` apart (zero padded), the weight's
        arrays flat (``checks``: value checks by name, run on every call), the bias rows."""
        bv = ops["bias"]
        bias = None if bv is None else Staged(f"{self.op}.bias", lin.bias_rows(bv), m, m, optional=True)
        weights = [operands.flat(ops, name, f"{self.op}.{name}", (checks or {}).get(name)) for name in self.weights]
        return [Staged(f"{self.op}.x", n, k, pitch), *weights, bias]

    def launch(self, device: Device, tag: str, n: int, m: int, k: int, x_stride: int, b_stride: int,
               lane: dict[str, int], splitk: dict[str, int]) -> tuple[Launch, tuple[tuple[str, int], ...]]:
        """The fused launch of a call of this shape (``lane``/``splitk``: the kernels' own scalars) and
        the scratch slots it needs (split-K partials and counters)."""
        plan = self.plan(device, tag, n, m, k)
        ptrs = {name: name for name in self.names[:-1]} | {"y": "out"}
        if "unit_len" not in plan.info:
            return make_launch(device, plan, self.names, **ptrs, M=m, K=k, x_stride=x_stride,
                                   bias_stride=b_stride, kc=plan.info["k_chunk"], **lane), ()
        values = dict(N=n, M=m, K=k, x_stride=x_stride, bias_stride=b_stride, unit_len=plan.info["unit_len"],
                      block_len=plan.info["block_len"],
                      **splitk)
        return _splitk.splitk_launch(device, plan, self.names, ptrs, values, f"{self.op}.partials",
                                 f"{self.op}.counters")

    def plan(self, device: Device, tag: str, n: int, m: int, k: int) -> LaunchPlan:
        """N <= 8: the lane-split plan (but see `_linear.small_n_splitk`); N = 9..64: skinny_gemm's
        split-K configuration."""
        key = (device, tag, n, m, k, device.properties.cu_count)
        if n > MAX_N or lin.small_n_splitk(self.op, device.arch.name, n, m, k):
            family = f"{self.op}_splitk"
            return self.plans.get(("splitk", *key), lambda: _splitk.splitk_plan(
                device, family, lambda nt, _: f"{family}_{tag}_t{nt}", n, m, k, weight_bits=4))
        return self.plans.get(key, lambda: lin.lane_split_plan(
            device, self.op, f"{self.op}_{tag}_n{n}", n, m, k, chunk=CHUNK, op=self.op,
            sums=self.sums and tag == "bf16"))

    def plan_info(self, device: Device, x_dtype: Any, n: int, m: int, k: int) -> dict[str, Any]:
        """The configuration a fused call of this shape gets on ``device`` (tests and benchmarks)."""
        if not 1 <= n <= FUSED_MAX_N or k % CHUNK:
            raise InputValueError(f"{self.op}: the fused kernels serve N = 1..{FUSED_MAX_N} and K a multiple of "
                                  f"{CHUNK}; got N={n}, K={k}")
        return dict(self.plan(device, DTYPE_TAG[dtypes.read(x_dtype, "x_dtype", dtypes.HALVES)], n, m, k).info)

    def dequantize_plan(self, device: Device, name: str, m: int, units: int) -> LaunchPlan:
        """The dequantize kernel ``name`` (one thread per unit of 8 weights, grid-stride): up to two
        workgroups per SIMD."""
        cu_count = device.properties.cu_count

        def build() -> LaunchPlan:
            fn, meta = registry.load(device, self.op).kernel(name)
            grid = max(1, min(-(-units // threads(meta)), cu_count * 2 * device.arch.simds_per_cu))
            return make_plan(fn, meta, (grid, 1, 1), info={"kernel": name, "grid": grid})

        return self.plans.get(("dequantize", device, name, m, units, cu_count), build)
