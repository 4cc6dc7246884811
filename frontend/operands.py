"""The operand layer every op goes through: seeing, checking, placing and returning operands.

A call's *signature* is what its operands are -- container kind, shape, strides, dtype,
device, writability -- plus the op's own options and this thread's device choice. The first
call with a signature runs the op's ``bind``: every operand is viewed once (`tensors.view`),
checked by the op's declared rules and by the shared ones here (one device, the GPU layout
rules, ``out=``), the device, kernels and launch configuration are chosen, and a bound call is
stored. A later call with the same signature does only what can differ between calls with
equal signatures: read data pointers (and check their alignment), take the stream, allocate
or take the output, pack the arguments and launch. Nothing is re-validated, re-planned or
re-parsed that the signature already proves.

GPU-resident operands are used in place (`DeviceCall`); host operands (numpy, torch CPU,
host DLPack) are staged through the scratch pool of the current device, launched on its
default stream, copied back and synchronized (`HostCall`). Results come back in the kind of
container ``x`` came in (or in ``out``). An op with several results (``topk_softmax``: weights
and ids) names one ``out`` per result, last among its operands (``gather(..., outputs=2)``,
``more_outs=``); its bound call returns them as a tuple.

A test seam, `present_cpu_torch_as_gpu`, makes torch CPU tensors take the GPU path (pointers
used in place, torch's stream), so the torch fast path runs on machines without a GPU.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import devices as _devices
from . import launch as _launch
from . import scratch, tensors
from .devices import current_device, hip_device, thread_choice
from .devices.base import Device
from .errors import CaptureError, HipRuntimeError, InputValueError
from .launch import Launch
from .tensors import TensorView

# ----------------------------------------------------------------------------------------------
# signatures

_NP = np.ndarray
_torch_tensor: Any = None          # torch.Tensor once torch has been imported by someone
_seam: tuple[int, Callable[[int], int], Callable[..., Any] | None] | None = None   # test seam, see below


def _torch_class() -> Any:
    global _torch_tensor
    if _torch_tensor is None:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "Tensor"):
            _torch_tensor = torch.Tensor
    return _torch_tensor


def signature(names: Sequence[str], objs: Sequence[Any], options: Hashable = None
              ) -> tuple[tuple, list[int | None] | None]:
    """The hashable signature of ``objs`` -- ending with where this thread's host inputs would run
    (`devices.selection`) and the op's ``options`` -- and, for DLPack producers (their address
    comes from the same export as their layout), their data addresses by position (None elsewhere)."""
    tt = _torch_tensor or _torch_class()
    if tt is not None and isinstance(objs[0], tt):
        # All torch (the hot case): one pass. Anything else among them fails an attribute lookup.
        try:
            return (*[None if o is None else (o.shape, o.stride(), o.dtype, o.device, o.is_neg(), o.layout)
                      for o in objs], thread_choice.__dict__.get("selected") or _devices.default_device, options), None
        except (AttributeError, TypeError, RuntimeError):
            pass
    keys: list[Hashable] = []
    addresses: list[int | None] | None = None
    for i, obj in enumerate(objs):
        if obj is None:
            keys.append(None)
        elif tt is not None and isinstance(obj, tt):
            try:
                keys.append((obj.shape, obj.stride(), obj.dtype, obj.device, obj.is_neg(), obj.layout))
            except RuntimeError:      # no strides: let the view say what is wrong
                tensors.view(obj, names[i])
                raise
        elif type(obj) is _NP:
            keys.append((obj.shape, obj.strides, obj.dtype, obj.flags.writeable))
        else:
            if addresses is None:
                addresses = [None] * len(objs)
            found = tensors.dlpack_signature(obj)
            if found is None:         # an older or unusual producer (or not one at all): the full view
                v = tensors.view(obj, names[i])
                found = ((type(obj), v.device_type, v.device_id, v.dtype, v.shape, v.strides, v.readonly), v.ptr)
            keys.append(found[0])
            addresses[i] = found[1]
    keys.append(thread_choice.__dict__.get("selected") or _devices.default_device)
    keys.append(options)
    return tuple(keys), addresses


class CallCache:
    """Bound calls by signature (thread-safe; bounded: cleared when it overflows, and holding at most
    `launch.MAX_CACHED_DEVICES` devices with every other device-keyed cache)."""

    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self._calls: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.get = self._calls.get
        self.binds = 0
        _caches.append(self)
        _launch.device_caches().append(self)

    def add(self, key: Hashable, call: Any) -> Any:
        """Store (and return) ``call``, as its plain function (`DeviceCall.fast`) where it has one."""
        _launch.note_devices(*(key if isinstance(key, tuple) else (key,)), getattr(call, "device", None))
        call = getattr(call, "fast", call)
        with self._lock:
            if len(self._calls) >= self.maxsize:
                self._calls.clear()
            self._calls[key] = call
            self.binds += 1
        return call

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()


_caches: list[CallCache] = []


def forget_bound_calls(device: Device | None = None) -> None:
    """Drop every bound call (they may hold scratch addresses of a released pool)."""
    for cache in _caches:
        cache.clear()


scratch.on_release(forget_bound_calls)


def present_cpu_torch_as_gpu(ordinal: int | None, stream: Callable[[int], int] | None = None,
                             empty: Callable[..., Any] | None = None) -> None:
    """Test seam: treat torch CPU tensors as tensors on HIP device ``ordinal`` (``None`` ends it), with
    ``stream(ordinal)`` as torch's current stream (default: 0) and ``empty(shape, dtype)`` allocating
    outputs (default: ``torch.empty_strided``). Their memory must be memory the device can address (with the
    fake HIP runtime: its allocations)."""
    global _seam
    _seam = None if ordinal is None else (int(ordinal), stream or (lambda _ordinal: 0), empty)
    forget_bound_calls()


# ----------------------------------------------------------------------------------------------
# the slow path: viewing and placing


class Operands:
    """The operands of one call, viewed once; the device they run on is decided on first use."""

    def __init__(self, op: str, views: dict[str, TensorView | None], out: TensorView | None,
                 more_outs: Sequence[TensorView | None] = ()) -> None:
        self.op = op
        self.views = views                 # inputs by name, None for absent ones
        self.out = out
        self.outs = (out, *more_outs)      # every result's out=, the first is ``out``
        present = [v for v in (*views.values(), *self.outs) if v is not None]
        self.present = present
        self.first = present[0]            # decides the result's container kind and the device
        self.on_host = self.first.on_host
        self._device: Device | None = None

    def __getitem__(self, name: str) -> TensorView | None:
        return self.views[name]

    @property
    def device(self) -> Device:
        """The GPU the operands live on, else this thread's current device (checks they share one place)."""
        if self._device is None:
            tensors.same_device(self.present)
            self._device = current_device() if self.on_host else hip_device(self.first.device_id)
        return self._device


def gather(op: str, names: Sequence[str], objs: Sequence[Any], outputs: int = 1) -> Operands:
    """View every operand (the last ``outputs`` names are the results' ``out``)."""
    seen = [None if obj is None else view(obj, name) for name, obj in zip(names, objs, strict=True)]
    return Operands(op, dict(zip(names[:-outputs], seen[:-outputs], strict=True)), seen[-outputs],
                    seen[len(seen) - outputs + 1:])


def view(obj: Any, name: str) -> TensorView:
    """One operand's view as the bound calls see it (`tensors.view`, plus the test seam)."""
    v = tensors.view(obj, name)
    if _seam is not None and v.kind == "torch" and v.on_host:
        v.on_host, v.device_type, v.device_id = False, tensors.DL_ROCM, _seam[0]
    return v


def check_out(ops: Operands, shape: tuple[int, ...], dtype: Any, index: int = 0, name: str = "out") -> None:
    """``out=`` (result ``index``, called ``name`` in the message): a writable, contiguous array of the
    result's shape and dtype, on the operands' device (checked first: every operand in one place)."""
    tensors.same_device(ops.present)
    ov = ops.outs[index]
    if ov is not None and (ov.shape != shape or ov.dtype != dtype or not ov.is_contiguous or ov.readonly):
        raise InputValueError(f"{ops.op}: {name} must be a writable contiguous {dtype} array of shape {shape}; "
                              f"got {ov.dtype} {ov.shape}{' (read-only)' if ov.readonly else ''}")


# ----------------------------------------------------------------------------------------------
# GPU layout rules


def require(op: str, ok: bool, what: str) -> None:
    """A GPU layout rule: host inputs are staged, so they never hit these."""
    if not ok:
        raise InputValueError(f"{op} on a GPU tensor: {what} (host inputs have no layout limits)")


def nothing(ops: Operands, out_shape: tuple[int, ...], dtype: Any, out_slot: str) -> Any:
    """The bound call of an empty result (no launch)."""
    if ops.on_host:
        return HostCall(ops, [], [None] * len(ops.views), out_shape=out_shape, out_dtype=dtype,
                        out_slot=out_slot)
    return DeviceCall(ops, [], out_shape=out_shape, out_dtype=dtype)


def require_contiguous(ops: Operands, names: tuple[str, ...], what: str = "") -> None:
    """GPU rule: the named operands (those present) are contiguous."""
    for name in names:
        v = ops[name]
        require(ops.op, v is None or v.is_contiguous, f"{what}{name} must be contiguous")


def flat(ops: Operands, name: str, slot: str, check: Callable[[np.ndarray], None] | None = None) -> Staged | None:
    """A host input staged flat, as it is, into ``slot`` (None when absent); ``check``: see `Staged`."""
    v = ops[name]
    return None if v is None else Staged(slot, 1, v.numel, v.numel, check=check)


def bias_row_stride(op: str, bv: TensorView | None, m: int) -> int:
    """The row stride of a bias ``[M]``, ``[1, M]`` (0: one row for every token) or ``[N, M]`` on a GPU:
    contiguous along M, rows not overlapping."""
    if bv is None:
        return 0
    require(op, bv.strides[-1] == 1 or m == 1, "bias must be contiguous along M")
    if len(bv.shape) == 2 and bv.shape[0] > 1:
        require(op, bv.strides[0] >= m, f"bias rows must not overlap; got row stride {bv.strides[0]} for M={m}")
        return bv.strides[0]
    return 0


def staged_rows(op: str, v: TensorView, k: int) -> int:
    """The row stride of activations ``v [..., K]`` on a GPU, for kernels that read its rows 16 bytes
    at a time: unit stride along K, rows a multiple of 16 bytes apart and not overlapping (one row:
    any); the leading dims as `row_stride` takes them."""
    stride = row_stride(op, v)
    rows = int(np.prod(v.shape[:-1], dtype=np.int64))
    unit = 16 // v.dtype.itemsize
    require(op, v.strides[-1] == 1 or k == 1, f"{v.name} must be contiguous along K")
    require(op, (rows == 1 or stride >= k) and stride % unit == 0,
            f"{v.name}'s row stride must be a multiple of 16 bytes ({unit} elements) and >= K; got {stride}")
    return stride


def row_stride(op: str, v: TensorView) -> int:
    """Stride between the rows of ``v`` viewed as ``[rows, K]`` (leading dims flattened); leading dims
    must flatten without a copy. A single row gets K rounded up to 8 (any multiple of 8 will do)."""
    if len(v.shape) == 1:
        return -(-v.shape[0] // 8) * 8
    dims = [(d, s) for d, s in zip(v.shape[:-1], v.strides[:-1], strict=True) if d != 1]
    if not dims:
        return -(-v.shape[-1] // 8) * 8
    for (_, outer), (inner_n, inner) in zip(dims, dims[1:], strict=False):
        require(op, outer == inner * inner_n,
                f"{v.name}'s leading dims {v.shape[:-1]} (strides {v.strides[:-1]}) do not flatten to rows "
                f"without a copy; pass {v.name}.reshape(-1, K).contiguous()")
    return dims[-1][1]


# ----------------------------------------------------------------------------------------------
# bound calls


def stream_of(v: TensorView, ordinal: int) -> Callable[[], int]:
    """torch's current stream on the device for torch tensors (the cheapest call torch offers), else 0."""
    if v.kind != "torch":
        return lambda: 0
    if _seam is not None:
        return functools.partial(_seam[1], _seam[0])
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # what torch's compiled code calls
    if raw is not None:
        return functools.partial(raw, ordinal)                   # no Python frame per call
    device = torch.device("cuda", ordinal)
    return lambda: int(torch.cuda.current_stream(device).cuda_stream)


def torch_empty(like: TensorView, shape: tuple[int, ...], dtype: Any) -> Callable[[], Any]:
    """A function returning a new contiguous torch tensor of ``shape`` and ``dtype`` on the device
    of the torch tensor ``like`` (under the test seam: its allocator)."""
    import torch

    tdt = tensors._torch_dtype(np.dtype(dtype))
    if _seam is not None and _seam[2] is not None:
        seam_empty = _seam[2]
        return lambda: seam_empty(shape, tdt)
    strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
    # empty_strided: a third cheaper than torch.empty (no memory-format argument)
    return functools.partial(torch.empty_strided, shape, strides, dtype=tdt, device=like.obj.device)


class DeviceCall:
    """A bound call on GPU-resident operands: pointers in place, torch's current stream. ``more_outs``:
    (shape, dtype) of each further result (see `gather`); the call then returns every result."""

    def __init__(self, ops: Operands, launches: Sequence[Launch], *, out_shape: tuple[int, ...], out_dtype: Any,
                 aligned: Sequence[str] = (), align_message: str = "", scratch_slots: Sequence[tuple[str, int]] = (),
                 more_outs: Sequence[tuple[tuple[int, ...], Any]] = ()) -> None:
        names = [*ops.views, "out"]         # the pointers' positions: inputs, then the (first) result
        self.device = ops.device
        self.launches = tuple(launches)
        self.runs = tuple((launch.dispatch, launch.prefix, launch.tail, launch.select) for launch in launches)
        self.stream = stream_of(ops.first, ops.first.device_id)
        self.scratch_slots = tuple(scratch_slots)
        self._scratch: dict[int, tuple[int, ...]] = {}
        self._locks: dict[int, tuple[Callable[[], Any], Callable[[], None]]] = {}   # pool lock per stream
        # The operands that must be 16-byte aligned, checked on every call: up to three positions
        # (repeated to fill three), so the check is one expression.
        idx = [names.index(n) for n in aligned]
        if len(idx) > 3:
            raise ValueError("DeviceCall checks the alignment of at most three operands")
        self.aligned = tuple((idx * 3)[:3])
        self.align_message = align_message
        self.op = ops.op
        self.new_outs: list[Callable[[], Any] | None] = []
        for ov, (shape, dtype) in zip(ops.outs, ((out_shape, out_dtype), *more_outs), strict=True):
            new = None
            if ov is None:
                first = ops.first
                if first.kind == "torch":
                    new = torch_empty(first, shape, dtype)
                else:
                    tensors.new_output(first, shape, dtype)   # raises: no allocator for that kind
            self.new_outs.append(new)
        self.fast = self._compile()

    def _compile(self) -> Callable[[Sequence[Any], list[int | None] | None], Any]:
        """This call as a plain function with everything it reads bound as locals (attribute loads
        and the method binding are a good part of a microsecond-scale call): what the call cache
        stores (`fast`) and what ``__call__`` runs. ``objs``: the inputs, then the results given
        (None: allocate one); returns the result, or a tuple of them for an op with several."""
        runs, stream, news, op, message = self.runs, self.stream, tuple(self.new_outs), self.op, self.align_message
        slots, per_stream, scratch_for = self.scratch_slots, self._scratch, self._scratch_for
        a0, a1, a2 = self.aligned if self.aligned else (-1, -1, -1)
        checked, n, new_out = bool(self.aligned), len(news), news[0]
        # Several launches that pass data through the stream's scratch (a dequantize launch writing
        # weights the next one reads, fused_moe's routing metadata) are enqueued as one: another
        # thread's call on the same stream, whose launches would land between them and overwrite that
        # scratch, waits for the stream's pool lock (held by host calls for their whole sequence too).
        locks, atomic = self._locks, bool(slots) and len(runs) > 1

        def call(objs: Sequence[Any], addresses: list[int | None] | None) -> Any:
            if addresses is None:        # torch tensors only (what a GPU call without DLPack producers is)
                ptrs = [0 if o is None else o.data_ptr() for o in objs]
            else:
                ptrs = [0 if o is None else a if a is not None else o.data_ptr()
                        for o, a in zip(objs, addresses, strict=True)]
            if checked and (ptrs[a0] | ptrs[a1] | ptrs[a2]) & 15:
                raise InputValueError(f"{op} on a GPU tensor: {message} (host inputs have no layout limits)")
            if n == 1:
                result = objs[-1]
                if result is None:
                    result = new_out()  # type: ignore[misc]
                    ptrs[-1] = result.data_ptr()
            else:
                outs = list(objs[-n:])
                first = len(ptrs) - n
                for j, new in enumerate(news):
                    if new is not None:
                        outs[j] = new()
                        ptrs[first + j] = outs[j].data_ptr()
                result = tuple(outs)
            if not runs:
                return result
            s = stream()
            if slots:
                ptrs += per_stream.get(s) or scratch_for(s)
                if atomic:
                    acquire, release = locks[s]      # bound methods: a third cheaper than ``with``
                    acquire()
                    try:
                        for dispatch, count, tail, select in runs:
                            if count < 0:
                                dispatch([ptrs[i] if i >= 0 else 0 for i in select], tail, s)
                            else:
                                dispatch(ptrs if count == len(ptrs) else ptrs[:count], tail, s)
                    finally:
                        release()
                    return result
            for dispatch, count, tail, select in runs:
                if count < 0:
                    dispatch([ptrs[i] if i >= 0 else 0 for i in select], tail, s)
                else:
                    dispatch(ptrs if count == len(ptrs) else ptrs[:count], tail, s)
            return result

        call.bound = self  # type: ignore[attr-defined]
        return call

    def _scratch_for(self, stream: int) -> tuple[int, ...]:
        found = self._scratch.get(stream)
        if found is None:
            pool = scratch.pool(self.device, stream)
            self._locks[stream] = (pool.lock.acquire, pool.lock.release)   # first: found with the addresses
            found = self._scratch[stream] = tuple(pool.buffer(name, size) for name, size in self.scratch_slots)
        return found

    def __call__(self, objs: Sequence[Any], addresses: list[int | None] | None) -> Any:
        return self.fast(objs, addresses)


@dataclass(frozen=True)
class Staged:
    """How a host input reaches the device: as ``rows`` x ``cols`` elements with rows ``pitch`` apart
    (zero padding up to the pitch), copied into the scratch slot ``slot``."""

    slot: str
    rows: int
    cols: int
    pitch: int
    optional: bool = False        # an input that may be absent (bias)
    # Checks the values of a host input before anything is launched (index lists, permutations): the
    # contents of host arrays are checked on every call, as the kernels cannot trust them (device-
    # resident ones cannot be checked without a sync: the kernels clip what they read instead).
    check: Callable[[np.ndarray], None] | None = None


class HostCall:
    """A bound call on host operands: staged through the device's scratch pool (stream 0), launched,
    copied back, synchronized; the result in the container kind of the first operand. ``more_outs``:
    (shape, dtype, slot) of each further result (see `gather`); the call then returns every result."""

    def __init__(self, ops: Operands, launches: Sequence[Launch], staged: Sequence[Staged | None], *,
                 out_shape: tuple[int, ...], out_dtype: Any, out_slot: str,
                 scratch_slots: Sequence[tuple[str, int]] = (),
                 more_outs: Sequence[tuple[tuple[int, ...], Any, str]] = ()) -> None:
        self.op = ops.op
        self.device = ops.device
        self.launches = tuple(launches)
        self.staged = tuple(staged)
        self.names = tuple(ops.views)
        self.numpy = tuple(v is not None and v.kind == "numpy" for v in ops.views.values())
        # (shape, dtype, bytes, slot) of every result
        self.results = tuple((shape, np.dtype(dt), int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize, slot)
                             for shape, dt, slot in ((out_shape, out_dtype, out_slot), *more_outs))
        self.scratch_slots = tuple(scratch_slots)
        self.first_kind = ops.first

    def _host(self, i: int, obj: Any) -> np.ndarray:
        return obj if self.numpy[i] else tensors.view(obj, self.names[i]).host_array()

    def __call__(self, objs: Sequence[Any], addresses: list[int | None] | None) -> Any:
        """``objs``: the inputs, then ``out`` (None: return a new array)."""
        n = len(self.results)
        objs, outs = objs[:-n], objs[-n:]
        device = self.device
        ovs = [None if out is None else tensors.view(out, "out") for out in outs]
        if not self.launches:
            done = [ov.obj if ov is not None else tensors.to_kind(np.empty(shape, dt), self.first_kind)
                    for ov, (shape, dt, _, _) in zip(ovs, self.results, strict=True)]
            return done[0] if n == 1 else tuple(done)
        pool = scratch.pool(device, 0)
        with pool.lock, _capture_errors(self.op):   # staged inputs are this call's until it has synchronized
            hosts = [None if how is None or obj is None else _rows(self._host(i, obj), how)
                     for i, (how, obj) in enumerate(zip(self.staged, objs, strict=True))]
            for how, h in zip(self.staged, hosts, strict=True):
                if h is not None and how.check is not None:     # type: ignore[union-attr]
                    how.check(h)                                # type: ignore[union-attr]
            # Slots of the required inputs and of the output first, then their copies, then the
            # optional inputs (bias): the order of HIP calls the ops have always made.
            ptrs = [0 if h is None or how.optional else pool.buffer(how.slot, h.nbytes)  # type: ignore[union-attr]
                    for how, h in zip(self.staged, hosts, strict=True)]
            y_ds = [pool.buffer(slot, nbytes) for _, _, nbytes, slot in self.results]
            for how, h, ptr in zip(self.staged, hosts, ptrs, strict=True):
                if h is not None and not how.optional:   # type: ignore[union-attr]
                    device.copy_to_device(ptr, h, h.nbytes)
            for i, (how, h) in enumerate(zip(self.staged, hosts, strict=True)):
                if h is not None and how.optional:       # type: ignore[union-attr]
                    ptrs[i] = pool.buffer(how.slot, h.nbytes)   # type: ignore[union-attr]
                    device.copy_to_device(ptrs[i], h, h.nbytes)
            ptrs.extend(y_ds)
            ptrs.extend(pool.buffer(name, size) for name, size in self.scratch_slots)
            for launch in self.launches:
                launch.dispatch(launch.args(ptrs), launch.tail, 0)
            ys = [ov.host_array() if ov is not None else np.empty(shape, dt)
                  for ov, (shape, dt, _, _) in zip(ovs, self.results, strict=True)]
            for y, y_d, (_, _, nbytes, _) in zip(ys, y_ds, self.results, strict=True):
                device.copy_to_host(y, y_d, nbytes)
            device.synchronize(0)
        done = [ov.obj if ov is not None else tensors.to_kind(y, self.first_kind)
                for ov, y in zip(ovs, ys, strict=True)]
        return done[0] if n == 1 else tuple(done)


# hipErrorStreamCaptureUnsupported, ...Invalidated, ...Implicit: a copy or synchronization met a capture.
_CAPTURE_ERRORS = frozenset({900, 901, 906})


@contextmanager
def _capture_errors(op: str) -> Iterator[None]:
    """Host calls copy and synchronize, which a graph capture forbids. Checking for a capture first
    would cost every host call a HIP call; the runtime refuses the first copy anyway, so that
    refusal becomes a `CaptureError` that says what to do."""
    try:
        yield
    except HipRuntimeError as e:
        if getattr(e, "hip_error_code", None) not in _CAPTURE_ERRORS:
            raise
        raise CaptureError(f"{op}: host inputs are copied to the device and synchronized, which a graph "
                           "capture forbids; pass GPU tensors to captured calls") from e


def _rows(a: np.ndarray, how: Staged) -> np.ndarray:
    """``a`` as C-contiguous ``[rows, pitch]`` (zero padding past ``cols``), copying only when needed."""
    if how.pitch == how.cols and a.flags.c_contiguous:
        return a
    flat = a.reshape(how.rows, how.cols)
    if how.pitch == how.cols:
        return np.ascontiguousarray(flat)
    padded = np.zeros((how.rows, how.pitch), dtype=a.dtype)
    padded[:, :how.cols] = flat
    return padded


