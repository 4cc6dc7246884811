"""MoE routing: router logits ``[N, E]`` to ``topk_weights`` fp32 ``[N, k]`` and ``topk_ids`` int32 ``[N, k]``.

Per token row: softmax over the E experts in fp32 (max, ``exp(x - max)`` summed in a fixed order,
``p = e / sum``), then the k largest probabilities in descending order, ties by the lower expert id;
with ``renormalize`` each selected weight is divided by the fp32 sum of the selected ones (summed
in rank order). vLLM's ``fused_topk`` / ``topk_softmax`` semantics (quant_specs.md 3.1).

Logits fp16, bf16 or fp32, E = 1..512, k = 1..min(16, E), any N. On a GPU the rows may be strided
(unit stride along E). Kernel ``topk_softmax_<f16|bf16|f32>_v<V>`` (kernels/topk_softmax.hip): one
wave per row, V = ceil(E / wave) values per lane rounded up to a power of two, k rounds of a
wave-wide argmax by xor butterflies. Bitwise reproducible (fixed reduction trees, no atomics).

Non-finite logits: ``-inf`` is probability 0 (it can be selected, after every positive
probability, by id). A row whose softmax is undefined -- one holding a NaN or ``+inf``, or only
``-inf`` -- gets NaN weights and ids ``0..k-1`` (as ``torch.softmax``, its probabilities are all
NaN; NaN ranks below every number and ties go to the lower id). Ids are always in ``0..E-1``.

Both results come from one launch writing two outputs (the operand layer's ``more_outs``): host
inputs are staged and both results copied back; GPU tensors are read in place and the results
allocated on their device (or written into ``out=(topk_weights, topk_ids)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes, operands, registry
from ..devices.base import Device
from ..errors import InputTypeError, InputValueError
from ..launch import Launch, LaunchPlan, PlanCache, make_launch, make_plan, threads
from ..operands import DeviceCall, HostCall, Operands, Staged
from ..torch_ops import declare, fake_operands
from . import Exports
from ._common import DTYPE_TAG, MAX_EXPERTS, MAX_TOPK

FAMILY = "topk_softmax"
NAMES = ("router_logits", "topk_weights", "topk_ids")     # the last two: out=
_F32, _I32 = np.dtype(np.float32), np.dtype(np.int32)
_TAG = {**DTYPE_TAG, _F32: "f32"}   # the router also takes fp32 logits
_plans = PlanCache()
_calls = operands.CallCache()


def topk_softmax(router_logits: Any, k: int, renormalize: bool = False, *, out: Any = None) -> tuple[Any, Any]:
    """``(topk_weights, topk_ids)`` of router logits ``[N, E]`` (see the module docstring): fp32 and
    int32 ``[N, k]``, in the container kind of ``router_logits`` (numpy, torch or DLPack; on the host
    or on a GPU), or written into ``out=(topk_weights, topk_ids)`` (contiguous, same device) and
    returned."""
    if type(k) is not int or type(renormalize) is not bool:
        k, renormalize = _scalars(k, renormalize)
    if out is None:
        objs: tuple[Any, ...] = (router_logits, None, None)
    elif type(out) in (tuple, list) and len(out) == 2 and out[0] is not None and out[1] is not None:
        objs = (router_logits, out[0], out[1])
    else:
        raise InputTypeError(f"topk_softmax: out must be a pair (topk_weights, topk_ids) of arrays; got "
                             f"{type(out).__name__}")
    key, addresses = operands.signature(NAMES, objs, (k, renormalize))
    call = _calls.get(key)
    if call is None:
        if router_logits is None:
            raise InputTypeError("topk_softmax: router_logits is None; expected an [N, E] array")
        call = _calls.add(key, _bind(operands.gather("topk_softmax", NAMES, objs, outputs=2), k, renormalize))
    return call(objs, addresses)


def _scalars(k: Any, renormalize: Any) -> tuple[int, bool]:
    """k as an int (numpy integers too), renormalize as a bool (numpy bools too); else InputTypeError."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise InputTypeError(f"topk_softmax: k must be an int; got {type(k).__name__}")
    if not isinstance(renormalize, (bool, np.bool_)):
        raise InputTypeError(f"topk_softmax: renormalize must be a bool; got {type(renormalize).__name__}")
    return int(k), bool(renormalize)


def _bind(ops: Operands, k: int, renormalize: bool) -> Any:
    xv = ops["router_logits"]
    assert xv is not None
    n, e = _check(xv.dtype, xv.shape, k)
    shape = (n, k)
    operands.check_out(ops, shape, _F32, 0, "out[0] (topk_weights)")
    operands.check_out(ops, shape, _I32, 1, "out[1] (topk_ids)")
    device, tag = ops.device, _TAG[xv.dtype]
    if ops.on_host:
        launches = [_launch(device, tag, n, e, k, e, renormalize)] if n else []
        return HostCall(ops, launches, [Staged("topk_softmax.logits", n, e, e)], out_shape=shape, out_dtype=_F32,
                        out_slot="topk_softmax.weights", more_outs=[(shape, _I32, "topk_softmax.ids")])
    launches = []
    if n:
        operands.require("topk_softmax", xv.strides[1] == 1 or e == 1,
                         f"router_logits must be contiguous along E (unit stride); got strides {xv.strides}")
        launches = [_launch(device, tag, n, e, k, xv.strides[0] if n > 1 else e, renormalize)]
    return DeviceCall(ops, launches, out_shape=shape, out_dtype=_F32, more_outs=[(shape, _I32)])


def _check(dtype: np.dtype, shape: tuple[int, ...], k: int) -> tuple[int, int]:
    """dtype, shape and k of a call; returns N, E."""
    if dtype not in _TAG:
        raise InputTypeError(f"topk_softmax: router_logits has dtype {dtype}; supported: float16, bfloat16, float32")
    if len(shape) != 2:
        raise InputValueError(f"topk_softmax: router_logits must be 2-D [N, E]; got shape {shape}")
    n, e = shape
    if not 1 <= e <= MAX_EXPERTS:
        raise InputValueError(f"topk_softmax: E={e} experts; supported: E = 1..{MAX_EXPERTS}")
    if not 1 <= k <= min(MAX_TOPK, e):
        raise InputValueError(f"topk_softmax: k={k}; supported: k = 1..min({MAX_TOPK}, E) = 1..{min(MAX_TOPK, e)}")
    if n * k >= 2**31:
        raise InputValueError(f"topk_softmax: N*k must be below 2**31; got N={n}, k={k}")
    return n, e


def values_per_lane(e: int, wave: int) -> int:
    """V of the kernel serving E experts on a wave of ``wave`` lanes: ceil(E / wave) rounded up to a
    power of two."""
    v = 1
    while v * wave < e:
        v *= 2
    return v


def _launch(device: Device, tag: str, n: int, e: int, k: int, stride: int, renormalize: bool) -> Launch:
    return make_launch(device, _plan(device, tag, n, e), NAMES, x="router_logits", weights="topk_weights",
                           ids="topk_ids", N=n, E=e, k=k, stride=stride, renorm=int(renormalize))


def _plan(device: Device, tag: str, n: int, e: int) -> LaunchPlan:
    wave = device.arch.wave_size
    v = values_per_lane(e, wave)
    key = (device, tag, n, v)

    def build() -> LaunchPlan:
        name = f"{FAMILY}_{tag}_v{v}"
        fn, meta = registry.load(device, FAMILY).kernel(name)
        rows = threads(meta) // wave
        return make_plan(fn, meta, (-(-n // rows), 1, 1),
                         info={"kernel": name, "values_per_lane": v, "rows_per_group": rows})

    return _plans.get(key, build)


def plan_info(device: Device, dtype: Any, n: int, e: int, k: int) -> dict[str, Any]:
    """The configuration a call of this shape gets on ``device`` (tests)."""
    dt = dtypes.read(dtype, "dtype", dtypes.FLOATS)
    _check(dt, (n, e), k)
    plan = _plan(device, _TAG[dt], n, e)
    return {**plan.info, "grid": plan.grid[0]}


def _torch_check(router_logits: Any, k: int, renormalize: bool = False, *, out: Any = None) -> None:
    """The op's bind-time rules on fake tensors (`hipskinny.torch_ops.validate`)."""
    objs = (router_logits, *(out if out is not None else (None, None)))
    _bind(fake_operands("topk_softmax", NAMES, objs, outputs=2), *_scalars(k, renormalize))


def _torch_result_dtypes(*_: Any, **__: Any) -> tuple[Any, Any]:
    import torch

    return torch.float32, torch.int32


# torch.ops.hipskinny.topk_softmax -> (topk_weights, topk_ids) / topk_softmax_out (mutates both).
TORCH_OPS = declare("topk_softmax", "Tensor router_logits, int k, bool renormalize=False", topk_softmax,
                    lambda logits, k, renormalize=False: ((logits[0], k), (logits[0], k)),
                    out_dtype=_torch_result_dtypes, check=_torch_check, outs=("topk_weights", "topk_ids"))
EXPORTS = Exports(TORCH_OPS, ("topk_softmax",), report=(
    "MoE routing: router logits [N, E], E <= 512, to top-k weights and ids; no weight matrix, and its only "
    "parallel dimension is N, which the report never scales. A call moves N x E logits and N x k x 8 result "
    "bytes (a few KB at decode): launch-bound on every arch."))


def topk_softmax_reference(router_logits: Any, k: int, renormalize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The semantics in numpy, fp32 throughout: ``p = exp(x - max) / sum`` (numpy's order of the sum,
    so p may differ from the kernel's by the rounding of a differently ordered sum), the k largest p
    by a stable sort (ties: the lower id; NaN last), renormalized by their sum taken in rank order."""
    x = np.asarray(router_logits).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.max(axis=1, keepdims=True) if x.shape[0] else np.zeros((0, 1), np.float32)
        ex = np.exp(x - m)
        p = ex / ex.sum(axis=1, keepdims=True, dtype=np.float32)
        ids = np.argsort(-p, axis=1, kind="stable")[:, :k]
        w = np.take_along_axis(p, ids, axis=1)
        if renormalize:
            s = w[:, 0].copy()
            for j in range(1, k):
                s += w[:, j]
            w = w / s[:, None]
    return w.astype(np.float32), ids.astype(np.int32)
