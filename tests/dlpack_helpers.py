"""A hand-built DLPack producer for tests (dlpack.h layout, written out independently).

Used to present memory that no framework here can produce: GPU-resident tensors (device
type 10, kDLROCM) backed by the fake HIP runtime's allocations, byte offsets, NULL strides.
"""

from __future__ import annotations

import ctypes
from typing import Any

from hipskinny.tensors import DL_CPU, DL_ROCM  # noqa: F401  (re-exported for tests)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


class HandMade:
    """Exports one fixed DLTensor; the ctypes structs live as long as this object.

    No deleter and no capsule destructor: the backing memory belongs to ``base``.
    """

    def __init__(self, base: Any, data: int, shape: tuple[int, ...], strides: tuple[int, ...] | None,
                 code: int, bits: int, byte_offset: int = 0, device: tuple[int, int] = (DL_CPU, 0),
                 version: tuple[int, int] | None = None, flags: int = 0, lanes: int = 1,
                 capsule_name: bytes | None = None) -> None:
        self.base = base
        self.device = device
        self.shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides_arr = (ctypes.c_int64 * max(len(shape), 1))(*strides) if strides is not None else None
        tensor = DLTensor(
            data=data, device=DLDevice(*device), ndim=len(shape), dtype=DLDataType(code, bits, lanes),
            shape=ctypes.cast(self.shape_arr, ctypes.POINTER(ctypes.c_int64)),
            strides=(ctypes.cast(self.strides_arr, ctypes.POINTER(ctypes.c_int64))
                     if self.strides_arr is not None else None),
            byte_offset=byte_offset)
        if version is None:
            self.managed: ctypes.Structure = DLManagedTensor(dl_tensor=tensor)
            default_name = b"dltensor"
        else:
            self.managed = DLManagedTensorVersioned(major=version[0], minor=version[1], flags=flags,
                                                    dl_tensor=tensor)
            default_name = b"dltensor_versioned"
        # PyCapsule keeps the name pointer, not a copy: keep the buffer alive with us.
        self.name = ctypes.create_string_buffer(capsule_name or default_name)
        self.kwargs: list[dict[str, Any]] = []

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.kwargs.append(kwargs)
        return _capsule_new(ctypes.addressof(self.managed), ctypes.addressof(self.name), None)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device
