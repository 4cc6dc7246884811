"""The 16-bit skinny GEMM kernels (``kernels/skinny_gemm.hip``, ``kernels/skinny_gemm_splitk.hip``) as the ops
that run them use them: `hipskinny.skinny_gemm`, and the ops that dequantize their weights to 16 bits first
and multiply by them (`dequantize_route`: matmul_4bit, w4a16_linear). Their plans (`plan`), one bound
launch (`launch`), and ``torch.nn.functional.linear`` for torch ROCm tensors outside the kernels' range
(`TorchLinear`, `TorchDequantizeRoute`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import operands
from ..devices.base import Device
from ..errors import InputValueError
from ..launch import Launch, LaunchPlan, PlanCache
from ..operands import DeviceCall, HostCall, Operands, Staged
from . import _linear as lin
from . import _splitk as splitk
from ._common import DTYPE_TAG
from ._linear import MAX_N, SPLITK_MAX_N, lane_split_plan, on_rocm_torch
from ._splitk import splitk_plan

FAMILY = "skinny_gemm"
SPLITK_FAMILY = "skinny_gemm_splitk"
NAMES = ("x", "w", "bias", "out")      # skinny_gemm's operands
_plans = PlanCache()


def plan(device: Device, tag: str, n: int, m: int, k: int, atomic: bool) -> LaunchPlan:
    if n > MAX_N:
        return _plan_splitk(device, tag, n, m, k, atomic)
    key = (device, tag, n, m, k, device.properties.cu_count)
    return _plans.get(key, lambda: lane_split_plan(device, FAMILY, f"{FAMILY}_{tag}_n{n}", n, m, k))


def _plan_splitk(device: Device, tag: str, n: int, m: int, k: int, atomic: bool) -> LaunchPlan:
    key = (device, tag, n, m, k, device.properties.cu_count, atomic)
    return _plans.get(key, lambda: splitk_plan(
        device, SPLITK_FAMILY, lambda nt, at: f"{SPLITK_FAMILY}_{tag}_t{nt}{'_atomic' if at else ''}", n, m, k,
        atomic=atomic, weight_bits=16))


def launch(device: Device, tag: str, n: int, m: int, k: int, atomic: bool, x_stride: int, w_stride: int,
           b_stride: int, *, pointers: tuple[str, ...] = NAMES, w: str = "w"
           ) -> tuple[Launch, tuple[tuple[str, int], ...]]:
    """The launch of a call of this shape, and the scratch slots it needs (partials, counters).
    ``pointers``: the call's pointers ahead of those slots (this op's: NAMES; an op that dequantizes
    first adds its weights slot), ``w``: the one that holds the 16-bit weights."""
    chosen = plan(device, tag, n, m, k, atomic)
    # The atomic variant needs its slices zero on entry (it leaves them so); the deterministic one
    # leaves its partials as written: they must not share a slot.
    partials = "skinny_gemm.atomic_slices" if chosen.info["kernel"].endswith("_atomic") else "skinny_gemm.partials"
    return splitk.linear_launch(device, chosen, pointers, dict(x="x", w=w, bias="bias", y="out"),
                           dict(M=m, K=k, x_stride=x_stride, w_stride=w_stride, bias_stride=b_stride), n, partials,
                           "skinny_gemm.counters")


class TorchLinear:
    """Outside the kernels' range, torch tensors on a ROCm GPU go to ``torch.nn.functional.linear``."""

    def __init__(self, per_token_bias: bool) -> None:
        self.per_token_bias = per_token_bias

    def __call__(self, objs: Any, addresses: Any) -> Any:
        import torch.nn.functional as F  # noqa: N812

        x, w, bias, out = objs
        y = F.linear(x, w)
        if bias is not None:   # [M], [1, M] or [N, M]: F.linear takes only [M]
            y = y + bias.reshape(y.shape if self.per_token_bias else (y.shape[-1],))
        if out is None:
            return y
        out.copy_(y)
        return out


DEQUANTIZED = "dequantized"        # the 16-bit weights a dequantize launch writes, as its pointer is named


def route_pointers(names: tuple[str, ...]) -> tuple[str, ...]:
    """The pointers of `TorchDequantizeRoute`'s launch: x and the weight operands, then `DEQUANTIZED`."""
    return (*names[:-2], DEQUANTIZED)


def dequantize_route(ops: Operands, op: str, names: tuple[str, ...], n: int, m: int, k: int, pitch: int,
                     dequantize: Callable[[tuple[str, ...], str], Launch], staged: Callable[[], list[Staged | None]],
                     *, slot: str, out_slot: str, k_rule: str, align_message: str) -> Any:
    """The route of an op that dequantizes its weights first (matmul_4bit, w4a16_linear): its
    ``dequantize(pointers, out)`` launch writes W ``[M, pitch]`` in x's 16-bit dtype to the pooled
    slot ``slot``, then this op's kernel for N multiplies plain x by it: one bound call, two
    launches, nothing allocated per call. N above this op's range: torch tensors on a ROCm GPU
    dequantize the same way into a tensor and take ``torch.nn.functional.linear``; anything else
    raises. ``names``: the op's operands (x, the weight operands, bias, out); ``staged``: its host
    inputs' staging; ``k_rule``: the K its other kernels take (for the GPU error at K % 8 != 0)."""
    xv, bv = ops["x"], ops["bias"]
    assert xv is not None
    device, tag = ops.device, DTYPE_TAG[xv.dtype]
    out_shape = (*xv.shape[:-1], m)
    if n > SPLITK_MAX_N:
        if on_rocm_torch(ops):
            return TorchDequantizeRoute(ops, dequantize(route_pointers(names), DEQUANTIZED), m, k, pitch)
        raise InputValueError(f"{op}: N={n} tokens; supported: N = 1..{SPLITK_MAX_N} (torch tensors on a ROCm GPU: "
                              "any N, through torch.nn.functional.linear above that)")
    pointers = (*names, slot)                # inputs, out, then the scratch slots: the weights first
    dq = dequantize(pointers, slot)
    if ops.on_host:
        # x rows padded with zeros to the weights' pitch: the zero columns of both add nothing,
        # so the split-K kernel runs on K rounded up to the pitch.
        b_rows = lin.bias_rows(bv)
        gemm, gemm_slots = launch(device, tag, n, m, pitch if n > MAX_N else k, False, pitch, pitch,
                                   m if b_rows > 1 else 0, pointers=pointers, w=slot)
    else:
        if n > MAX_N and k % 8:
            raise InputValueError(f"{op} on a GPU tensor: K={k} is neither {k_rule} nor of 8 (the dequantize + "
                                  f"skinny_gemm route at N > {MAX_N}); host inputs take any K")
        gemm, gemm_slots = launch(device, tag, n, m, k, False, operands.staged_rows(op, xv, k), pitch,
                                   operands.bias_row_stride(op, bv, m), pointers=pointers, w=slot)
    slots = ((slot, 2 * m * pitch), *gemm_slots)
    if ops.on_host:
        return HostCall(ops, [dq, gemm], staged(), out_shape=out_shape, out_dtype=xv.dtype, out_slot=out_slot,
                        scratch_slots=slots)
    return DeviceCall(ops, [dq, gemm], out_shape=out_shape, out_dtype=xv.dtype, aligned=("x", "w"),
                      align_message=align_message, scratch_slots=slots)


class TorchDequantizeRoute:
    """N above the kernels' range for ops that dequantize to 16-bit weights first (matmul_4bit,
    w4a16_linear) on torch ROCm tensors: their dequantize kernel into a tensor of x's dtype
    (allocated per call, as the ``F.linear`` after it does), then this module's ``F.linear``
    fallback. ``launch`` reads the op's weight operands and writes ``[M, pitch]`` weights to the
    pointer named `DEQUANTIZED`; its pointers are `route_pointers` of the op's operand names
    (``x, *weight operands, bias, out``)."""

    def __init__(self, ops: Operands, launch: Launch, m: int, k: int, pitch: int) -> None:
        bv = ops["bias"]
        self.launch, self.k = launch, k
        self.stream = operands.stream_of(ops.first, ops.first.device_id)
        self.empty = operands.torch_empty(ops.first, (m, pitch), ops.first.dtype)
        self.linear = TorchLinear(bv is not None and len(bv.shape) == 2 and bv.shape[0] > 1)

    def __call__(self, objs: Any, addresses: Any) -> Any:
        x, *weights, bias, out = objs
        w16 = self.empty()
        ptrs = [0 if o is None else o.data_ptr() for o in (x, *weights)] + [w16.data_ptr()]
        self.launch.dispatch(self.launch.args(ptrs), self.launch.tail, self.stream())
        return self.linear((x, w16[:, :self.k], bias, out), None)
