"""Adapt op operands (numpy arrays, torch tensors, anything with ``__dlpack__``) without copying.

A :class:`TensorView` says where an operand's first element lives (an int address), its layout in
elements and its dtype as a numpy dtype (bf16 and fp8 through ``ml_dtypes``). It keeps the original
object alive, and for DLPack also the capsule: the capsule is never consumed or renamed, so its own
destructor releases the producer's tensor once the view is gone.

Negative strides (numpy ``a[::-1]``) are rejected, not supported: kernels and host staging assume
every element lies in ``[ptr, ptr + nbytes_span)``, and a reversed copy is one call away.

torch is optional: it is never imported here unless a torch tensor is already in play.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import ml_dtypes
import numpy as np

from .errors import DeviceMismatchError, InputTypeError, InputValueError

__all__ = [
    "DL_CPU",
    "DL_CUDA",
    "DL_CUDA_HOST",
    "DL_ROCM",
    "DL_ROCM_HOST",
    "TensorView",
    "new_output",
    "same_device",
    "supported_dtypes",
    "to_kind",
    "torch_current_stream",
    "view",
]

# DLPack device types (dlpack.h, DLDeviceType).
DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_ROCM = 10
DL_ROCM_HOST = 11
# Pinned host memory is still host memory: staged like any numpy array.
HOST_DEVICE_TYPES = frozenset({DL_CPU, DL_CUDA_HOST, DL_ROCM_HOST})
_DEVICE_NAMES = {
    1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi", 15: "webgpu",
    16: "hexagon", 17: "maia", 18: "trn",
}

# The one dtype table: numpy dtype, DLPack (type code, bits), torch dtype attribute.
# DLPack codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool; the float8 codes came with DLPack 1.1.
_DTYPE_TABLE: tuple[tuple[np.dtype[Any], tuple[int, int], str], ...] = (
    (np.dtype(np.bool_), (6, 8), "bool"),
    (np.dtype(np.int8), (0, 8), "int8"),
    (np.dtype(np.int16), (0, 16), "int16"),
    (np.dtype(np.int32), (0, 32), "int32"),
    (np.dtype(np.int64), (0, 64), "int64"),
    (np.dtype(np.uint8), (1, 8), "uint8"),
    (np.dtype(np.uint16), (1, 16), "uint16"),
    (np.dtype(np.uint32), (1, 32), "uint32"),
    (np.dtype(np.uint64), (1, 64), "uint64"),
    (np.dtype(np.float16), (2, 16), "float16"),
    (np.dtype(np.float32), (2, 32), "float32"),
    (np.dtype(np.float64), (2, 64), "float64"),
    (np.dtype(ml_dtypes.bfloat16), (4, 16), "bfloat16"),
    (np.dtype(ml_dtypes.float8_e4m3fn), (10, 8), "float8_e4m3fn"),
    (np.dtype(ml_dtypes.float8_e4m3fnuz), (11, 8), "float8_e4m3fnuz"),
    (np.dtype(ml_dtypes.float8_e5m2), (12, 8), "float8_e5m2"),
    (np.dtype(ml_dtypes.float8_e5m2fnuz), (13, 8), "float8_e5m2fnuz"),
)
if hasattr(ml_dtypes, "float8_e8m0fnu"):  # MX block scales; ml_dtypes >= 0.5 only
    _DTYPE_TABLE += ((np.dtype(ml_dtypes.float8_e8m0fnu), (14, 8), "float8_e8m0fnu"),)
_SUPPORTED = {dt: dt for dt, _, _ in _DTYPE_TABLE}
_FROM_DLPACK = {code_bits: dt for dt, code_bits, _ in _DTYPE_TABLE}
_DLPACK_CODE_NAMES = {
    0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool",
    7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn",
    11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz", 14: "float8_e8m0fnu",
    15: "float6_e2m3fn", 16: "float6_e3m2fn", 17: "float4_e2m1fn",
}
# Same-size integer types: torch's .numpy()/from_numpy() know these, not bf16 or fp8.
_INT_OF_SIZE = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32),
                8: np.dtype(np.int64)}

_KINDS_ACCEPTED = (
    "a numpy array, a torch tensor, or an object with __dlpack__ and __dlpack_device__"
)


def supported_dtypes() -> tuple[np.dtype[Any], ...]:
    """Every dtype an operand may have (the kernels accept a subset, checked by each op)."""
    return tuple(_SUPPORTED)


@dataclass(eq=False)
class TensorView:
    """One operand, seen through its address, layout (in elements) and numpy dtype."""

    kind: str                     # "numpy" | "torch" | "dlpack"
    obj: Any                      # the caller's object, kept alive with the view
    on_host: bool
    device_type: int              # DLPack DLDeviceType
    device_id: int
    ptr: int                      # address of the first element (data + byte_offset)
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    strides: tuple[int, ...]      # in elements, never negative on a dimension of size > 1
    itemsize: int
    name: str = ""
    readonly: bool = False        # numpy read-only arrays, DLPack READ_ONLY flag
    capsule: Any = field(default=None, repr=False)  # DLPack capsule the pointer came from

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes_span(self) -> int:
        """Bytes from ``ptr`` through the end of the last element (0 for an empty tensor)."""
        if any(s == 0 for s in self.shape):
            return 0
        last = sum((n - 1) * st for n, st in zip(self.shape, self.strides, strict=True))
        return (last + 1) * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        """Row-major dense. Strides of size-1 dimensions do not matter, as in torch."""
        if any(s == 0 for s in self.shape):
            return True
        expected = 1
        for n, st in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if n != 1 and st != expected:
                return False
            expected *= n
        return True

    @property
    def device_label(self) -> str:
        """``host``, ``rocm:0``, ``cuda:1``...: for messages and device comparisons."""
        if self.on_host:
            return "host"
        kind = _DEVICE_NAMES.get(self.device_type, f"device type {self.device_type}")
        return f"{kind}:{self.device_id}"

    def host_array(self) -> np.ndarray:
        """A numpy view of the same memory with this view's dtype (host memory only)."""
        if not self.on_host:
            raise DeviceMismatchError(
                f"{self.name or 'operand'} lives on {self.device_label}: only host memory has a "
                "numpy view")
        if self.kind == "numpy":
            return self.obj
        if self.kind == "torch":
            # .numpy() refuses bf16/fp8, so go through a same-size integer view.
            t = self.obj.detach()
            ints = t.view(_torch_dtype(_INT_OF_SIZE[self.itemsize]))
            return ints.numpy().view(self.dtype)
        if self.numel == 0:
            return np.empty(self.shape, self.dtype)
        # numpy keeps the holder (so this view, its object and capsule) as the array's base.
        holder = _HostMemory(self)
        return np.asarray(holder).view(self.dtype)


class _HostMemory:
    """Exposes a host view through ``__array_interface__`` so numpy can wrap it in place."""

    def __init__(self, tv: TensorView) -> None:
        self.view = tv
        self.__array_interface__ = {
            "version": 3,
            "typestr": _INT_OF_SIZE[tv.itemsize].str,
            "shape": tv.shape,
            "strides": tuple(s * tv.itemsize for s in tv.strides),
            "data": (tv.ptr, tv.readonly),
        }


# --------------------------------------------------------------------------------------------
# view()


def view(obj: object, name: str, *, stream: int | None = None) -> TensorView:
    """Describe ``obj`` (numpy array, torch tensor, or DLPack producer) without copying it.

    ``stream`` is passed to ``__dlpack__`` for device memory so the producer orders its pending
    work before that stream (DLPack protocol); numpy and torch operands ignore it.
    """
    if isinstance(obj, np.ma.MaskedArray):
        raise InputTypeError(f"{name}: masked arrays are not accepted (kernels would ignore the mask); "
                             "pass .filled(value) or .data")
    if isinstance(obj, np.ndarray):
        return _view_numpy(obj, name)
    torch = sys.modules.get("torch")  # a torch tensor implies torch is already imported
    if torch is not None and isinstance(obj, torch.Tensor):
        return _view_torch(obj, name)
    if isinstance(obj, (bool, int, float, complex, list, tuple, np.generic)):
        raise InputTypeError(
            f"{name}: expected {_KINDS_ACCEPTED}; got a Python/numpy scalar or sequence "
            f"({type(obj).__name__}). Those are not accepted: build an array with an explicit "
            "dtype, e.g. np.asarray(value, dtype=np.float16).")
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _view_dlpack(obj, name, stream)
    raise InputTypeError(f"{name}: expected {_KINDS_ACCEPTED}; got {type(obj).__name__}")


def _supported_dtype(dtype: np.dtype[Any], name: str) -> np.dtype[Any]:
    if not dtype.isnative:
        raise InputTypeError(
            f"{name}: dtype {dtype.str} is not in native byte order; convert it with "
            "arr.astype(arr.dtype.newbyteorder('='))")
    found = _SUPPORTED.get(dtype)
    if found is None:
        raise InputTypeError(f"{name}: unsupported dtype {dtype}; supported: {_dtype_names()}")
    return found


def _dtype_names() -> str:
    return ", ".join(dt.name for dt in _SUPPORTED)


def _check_strides(shape: tuple[int, ...], strides: tuple[int, ...], name: str) -> None:
    # Kernels and host staging assume every element lies at or above ptr, within nbytes_span.
    for axis, (n, st) in enumerate(zip(shape, strides, strict=True)):
        if st < 0 and n > 1:
            raise InputValueError(
                f"{name}: negative stride {st} on axis {axis} is not supported; pass a "
                "copy in memory order (np.ascontiguousarray / .contiguous()) instead")


def _view_numpy(arr: np.ndarray, name: str) -> TensorView:
    dtype = _supported_dtype(arr.dtype, name)
    itemsize = dtype.itemsize
    strides = []
    for axis, st in enumerate(arr.strides):
        if st % itemsize:
            raise InputValueError(
                f"{name}: byte stride {st} on axis {axis} is not a multiple of the item size "
                f"{itemsize}; pass np.ascontiguousarray({name})")
        strides.append(st // itemsize)
    shape = tuple(arr.shape)
    elem_strides = tuple(strides)
    _check_strides(shape, elem_strides, name)
    return TensorView(
        kind="numpy", obj=arr, on_host=True, device_type=DL_CPU, device_id=0,
        ptr=int(arr.__array_interface__["data"][0]), dtype=dtype, shape=shape,
        strides=elem_strides, itemsize=itemsize, name=name, readonly=not arr.flags.writeable)


@lru_cache(maxsize=1)
def _torch_dtype_maps() -> tuple[dict[Any, np.dtype[Any]], dict[np.dtype[Any], Any]]:
    import torch

    to_np: dict[Any, np.dtype[Any]] = {}
    to_torch: dict[np.dtype[Any], Any] = {}
    for dt, _, attr in _DTYPE_TABLE:
        tdt = getattr(torch, attr, None)  # older torch lacks some fp8/uint types
        if tdt is not None:
            to_np[tdt] = dt
            to_torch[dt] = tdt
    return to_np, to_torch


def _torch_dtype(dtype: np.dtype[Any]) -> Any:
    tdt = _torch_dtype_maps()[1].get(dtype)
    if tdt is None:
        raise InputTypeError(f"dtype {dtype} has no torch equivalent in this torch build")
    return tdt


def _view_torch(t: Any, name: str) -> TensorView:
    import torch

    if t.layout != torch.strided:
        raise InputTypeError(f"{name}: only dense (strided) torch tensors are accepted, got "
                             f"layout {t.layout}")
    dtype = _torch_dtype_maps()[0].get(t.dtype)
    if dtype is None:
        raise InputTypeError(f"{name}: unsupported dtype {t.dtype}; supported: {_dtype_names()}")
    dev = t.device
    if dev.type == "cpu":
        device_type, device_id, on_host = DL_CPU, 0, True
    elif dev.type == "cuda":
        # ROCm builds of torch call AMD GPUs "cuda"; DLPack calls them kDLROCM.
        device_type = DL_ROCM if getattr(torch.version, "hip", None) else DL_CUDA
        device_id = dev.index if dev.index is not None else torch.cuda.current_device()
        on_host = False
    else:
        raise DeviceMismatchError(
            f"{name} is a torch tensor on device {dev.type!r}; hipskinny takes host tensors or "
            "tensors on a ROCm GPU (torch device 'cuda' in a ROCm build of torch)")
    if t.is_neg() or t.is_conj():
        raise InputValueError(f"{name}: a lazily negated/conjugated tensor has no plain memory "
                              "layout; call .resolve_neg() / .resolve_conj() first")
    shape = tuple(t.shape)
    strides = tuple(t.stride())
    _check_strides(shape, strides, name)
    return TensorView(
        kind="torch", obj=t, on_host=on_host, device_type=device_type, device_id=int(device_id),
        ptr=int(t.data_ptr()), dtype=dtype, shape=shape, strides=strides,
        itemsize=int(t.element_size()), name=name)


# --------------------------------------------------------------------------------------------
# DLPack, read with ctypes (dlpack.h structs; layout fixed within major version 1)

_DLPACK_MAJOR = 1
# The newest version whose dtype codes we know; a producer exports at most this version.
_DLPACK_MAX_VERSION = (1, 3)
_FLAG_READ_ONLY = 1 << 0


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# DLTensor: data, device (type, id), ndim, dtype (code, bits, lanes), shape*, strides*, byte_offset.
_DLTENSOR = struct.Struct("<QiiiBBHQQQ")
# DLManagedTensorVersioned up to its flags: version (major, minor), manager_ctx, deleter, flags.
_VERSIONED_HEAD = struct.Struct("<II16xQ")
assert _DLTENSOR.size == ctypes.sizeof(_DLTensor) and _VERSIONED_HEAD.size == _DLManagedTensorVersioned.dl_tensor.offset

_DIMS = [struct.Struct(f"<{n}q") for n in range(9)]


def _address_space() -> memoryview | None:
    """The process's memory as one read-only byte view, so ``unpack_from(view, address)`` reads a struct
    at an address without a ctypes call; None where ctypes cannot describe it (then ``string_at``)."""
    try:
        return memoryview((ctypes.c_uint8 * (1 << 47)).from_address(0)).cast("B").toreadonly()
    except (OverflowError, ValueError, MemoryError, TypeError):
        return None


_MEMORY = _address_space()
_MEMORY_END = 0 if _MEMORY is None else len(_MEMORY)


def _read(layout: struct.Struct, address: int) -> tuple:
    if address + layout.size <= _MEMORY_END:
        return layout.unpack_from(_MEMORY, address)   # type: ignore[arg-type]
    return layout.unpack(ctypes.string_at(address, layout.size))


# Own function objects, so setting restype/argtypes cannot clash with other users of pythonapi.
_PyCapsule_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

_VERSIONED = b"dltensor_versioned"
_LEGACY = b"dltensor"          # DLPack before 1.0: a bare DLManagedTensor, dl_tensor its first member

# How each producer type exported last: whether its __dlpack__ took max_version and the capsule's name.
# The per-call path asks the same way and takes the pointer under that name: a TypeError retry, or a
# pointer asked under the wrong name (an exception through ctypes), cost more than the rest of the read.
_habits: dict[type, tuple[bool, bytes | None]] = {}


def _remember(tp: type, takes_max_version: bool, capsule_name: bytes | None) -> None:
    if len(_habits) >= 256:     # bounded: types made on the fly must not pile up
        _habits.clear()
    _habits[tp] = (takes_max_version, capsule_name)


def _capsule_pointer(capsule: Any) -> tuple[int, bytes | None]:
    """The pointer a DLPack capsule holds (0 when it is named otherwise, e.g. already consumed) and its name."""
    name = _PyCapsule_GetName(capsule)   # read, not guessed: a wrong guess raises
    if name != _VERSIONED and name != _LEGACY:
        return 0, name
    return _PyCapsule_GetPointer(capsule, name) or 0, name


def _is_capsule(obj: object) -> bool:
    return type(obj).__name__ == "PyCapsule" and type(obj).__module__ == "builtins"


def _export_capsule(obj: Any, name: str, device_type: int, stream: int | None) -> tuple[Any, bool]:
    """A fresh export of ``obj``, and whether its ``__dlpack__`` took max_version."""
    kwargs: dict[str, Any] = {}
    if stream is not None and device_type not in HOST_DEVICE_TYPES:
        kwargs["stream"] = stream  # host producers must not be given a stream
    habit = _habits.get(type(obj))
    try:
        if habit is None or habit[0]:
            try:
                return obj.__dlpack__(max_version=_DLPACK_MAX_VERSION, **kwargs), True
            except TypeError:
                pass                # producers older than DLPack 1.0 have no max_version keyword
        return obj.__dlpack__(**kwargs), False
    except (BufferError, ValueError, NotImplementedError) as e:
        raise InputTypeError(f"{name}: its __dlpack__() refused to export: {e}") from e


def _view_dlpack(obj: Any, name: str, stream: int | None) -> TensorView:
    try:
        dev_type = int(obj.__dlpack_device__()[0])
    except Exception as e:  # a broken producer: say which operand
        raise InputTypeError(f"{name}: __dlpack_device__() failed: {e}") from e
    capsule, takes_max_version = _export_capsule(obj, name, dev_type, stream)
    if not _is_capsule(capsule):
        raise InputTypeError(f"{name}: __dlpack__() returned {type(capsule).__name__}, "
                             "not a DLPack capsule")
    readonly = False
    # The structs are read with struct.unpack_from on their memory: field by field through ctypes
    # costs several µs per operand, and DLPack producers are exported afresh on every call.
    address, capsule_name = _capsule_pointer(capsule)
    if not address:
        raise InputTypeError(f"{name}: __dlpack__() returned a capsule named {capsule_name!r}, "
                             "not an unconsumed 'dltensor' or 'dltensor_versioned'")
    if capsule_name == _VERSIONED:
        major, minor, flags = _read(_VERSIONED_HEAD, address)
        if major != _DLPACK_MAJOR:
            # The layout below the header may differ: refuse rather than misread.
            raise InputTypeError(
                f"{name}: DLPack version {major}.{minor} is not "
                f"supported (major version {_DLPACK_MAJOR} only)")
        readonly = bool(flags & _FLAG_READ_ONLY)
        tensor_address = address + _VERSIONED_HEAD.size
    else:
        tensor_address = address
    _remember(type(obj), takes_max_version, capsule_name)
    (data, device_type, device_id, ndim, code, bits, lanes, shape_ptr, strides_ptr,
     byte_offset) = _read(_DLTENSOR, tensor_address)
    dtype = _FROM_DLPACK.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        code_name = _DLPACK_CODE_NAMES.get(code, f"code {code}")
        raise InputTypeError(
            f"{name}: unsupported DLPack dtype {code_name} ({bits} bits, {lanes} lanes); "
            f"supported: {_dtype_names()}")
    dims = _DIMS[ndim] if 0 < ndim < len(_DIMS) else struct.Struct(f"<{max(ndim, 0)}q")
    shape = _read(dims, shape_ptr) if ndim > 0 else ()
    if ndim > 0 and strides_ptr:
        strides = _read(dims, strides_ptr)
    else:
        # NULL strides mean row-major (allowed before DLPack 1.2).
        strides = _row_major_strides(shape)
    if strides and min(strides) < 0:
        _check_strides(shape, strides, name)
    if data == 0 and all(shape):
        raise InputValueError(f"{name}: DLPack tensor with elements has a NULL data pointer")
    return TensorView(
        kind="dlpack", obj=obj, on_host=device_type in HOST_DEVICE_TYPES,
        device_type=device_type, device_id=device_id,
        ptr=data + byte_offset, dtype=dtype, shape=shape, strides=strides,
        itemsize=dtype.itemsize, name=name, readonly=readonly, capsule=capsule)


def dlpack_signature(obj: Any) -> tuple[tuple, int] | None:
    """A DLPack producer's layout key and data address, read straight from a fresh export (the
    per-call path of ops: about half the cost of `view`). None when the export is not a plain
    DLPack one (the caller then takes `view`, which also says what is wrong)."""
    habit = _habits.get(type(obj))
    try:
        # Held until the reads below are done: dropping the capsule runs the export's deleter, which
        # may free the shape and strides (the data stays: the producer, alive in the caller, owns it).
        if habit is None:           # a type not seen yet: learn how it exports
            capsule, takes_max_version = _export_capsule(obj, "", DL_CPU, None)
            address, capsule_name = _capsule_pointer(capsule)
            if not address:
                return None
            _remember(type(obj), takes_max_version, capsule_name)
        else:
            takes_max_version, capsule_name = habit
            capsule = obj.__dlpack__(max_version=_DLPACK_MAX_VERSION) if takes_max_version else obj.__dlpack__()
            # Raises only if this export is named otherwise than the type's last: `view` then relearns.
            address = _PyCapsule_GetPointer(capsule, capsule_name)
    except Exception:  # noqa: BLE001 - anything unusual: the full view decides
        return None
    if _MEMORY is None or address + 96 > _MEMORY_END:   # room for either layout
        return None
    if capsule_name == _VERSIONED:
        major, _minor, flags = _VERSIONED_HEAD.unpack_from(_MEMORY, address)
        address += 32
    else:
        major, flags = _DLPACK_MAJOR, 0   # no version, no flags before DLPack 1.0
    (data, device_type, device_id, ndim, code, bits, lanes, shape_ptr, strides_ptr,
     byte_offset) = _DLTENSOR.unpack_from(_MEMORY, address)
    if major != _DLPACK_MAJOR or not 0 < ndim < len(_DIMS) or not strides_ptr:
        return None
    dims = _DIMS[ndim]
    key = (type(obj), device_type, device_id, code, bits, lanes, dims.unpack_from(_MEMORY, shape_ptr),
           dims.unpack_from(_MEMORY, strides_ptr), flags & _FLAG_READ_ONLY, data == 0)
    del capsule
    return key, data + byte_offset


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


# --------------------------------------------------------------------------------------------
# streams, devices, outputs


def torch_current_stream(tv: TensorView) -> int:
    """torch's current stream handle on ``tv``'s GPU, or 0 (the default stream) otherwise."""
    if tv.kind != "torch" or tv.on_host:
        return 0
    import torch

    return int(torch.cuda.current_stream(tv.obj.device).cuda_stream)


def same_device(views: Sequence[TensorView]) -> None:
    """Raise DeviceMismatchError unless all operands are on host or all on one ROCm GPU."""
    unusable = [v for v in views if not v.on_host and v.device_type != DL_ROCM]
    if unusable:
        where = ", ".join(f"{v.name or '?'} on {v.device_label}" for v in unusable)
        raise DeviceMismatchError(
            f"{where}: hipskinny runs on AMD GPUs through ROCm (DLPack kDLROCM) or takes host "
            "memory")
    places = {v.device_label for v in views}
    if len(places) > 1:
        where = ", ".join(f"{v.name or '?'} on {v.device_label}" for v in views)
        raise DeviceMismatchError(
            f"operands are on different devices ({where}); put them all on one GPU, or all on "
            "the host")


def new_output(like: TensorView, shape: Sequence[int], dtype: Any,
               name: str = "out") -> tuple[object, TensorView]:
    """A new uninitialised output of ``like``'s container kind, and its view."""
    dt = _supported_dtype(np.dtype(dtype), name)
    dims = tuple(int(n) for n in shape)
    out: object
    if like.kind == "torch":
        import torch

        out = torch.empty(dims, dtype=_torch_dtype(dt), device=like.obj.device)
    elif like.kind == "numpy" or like.on_host:
        out = np.empty(dims, dt)
    else:
        # Without torch we have no allocator the caller's framework would own.
        raise InputTypeError(
            f"{like.name or 'operand'} is a DLPack tensor on {like.device_label}: hipskinny "
            f"cannot allocate {name} for that framework; pass a preallocated out=")
    return out, view(out, name)


def to_kind(arr: np.ndarray, like: TensorView) -> object:
    """Hand a host numpy result back in ``like``'s container kind (dlpack producers get numpy).

    torch gets a tensor of ``arr``'s dtype sharing ``arr``'s memory, moved to ``like``'s
    device if that is a GPU.
    """
    if like.kind != "torch":
        return arr
    import torch

    dt = _supported_dtype(arr.dtype, "result")
    tdt = _torch_dtype(dt)
    if not arr.flags.writeable or any(st < 0 for st in arr.strides):
        # from_numpy cannot share read-only or negatively strided memory.
        arr = np.array(arr, copy=True)
    # from_numpy refuses bf16/fp8, so share the bytes as integers and reinterpret in torch.
    t = torch.from_numpy(arr.view(_INT_OF_SIZE[dt.itemsize])).view(tdt)
    if not like.on_host:
        t = t.to(like.obj.device)
    return t


# ----------------------------------------------------------------------------------------------
# kinds, for the format modules (fp8, bnb, w4a16) that take numpy or torch without importing torch


def torch_module() -> Any:
    """torch if someone has imported it, else None."""
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    tensor = getattr(torch_module(), "Tensor", None)
    return tensor is not None and isinstance(x, tensor)


def describe(x: Any) -> str:
    """``x``'s type (and dtype) for error messages."""
    dt = getattr(x, "dtype", None)
    return f"{type(x).__module__}.{type(x).__name__}" + (f" of dtype {dt}" if dt is not None else "")
