"""Operand adaptation: numpy, torch and DLPack producers seen as one TensorView, without copies."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from hipskinny import tensors
from hipskinny.errors import DeviceMismatchError, InputTypeError, InputValueError
from hipskinny.tensors import (
    DL_CPU,
    DL_ROCM,
    TensorView,
    dlpack_signature,
    new_output,
    same_device,
    to_kind,
    torch_current_stream,
    view,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = [np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e4m3fnuz),
       np.dtype(ml_dtypes.float8_e5m2), np.dtype(ml_dtypes.float8_e5m2fnuz)]


def np_ptr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def np_elem_strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def ramp(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    # Small integers are exact in every float type here, fp8 included.
    n = int(np.prod(shape))
    return (np.arange(n) % 13 - 6).astype(np.float32).astype(dtype).reshape(shape)


class Wrapper:
    """A third-party container that only speaks DLPack."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.inner.__dlpack_device__()


class LegacyWrapper(Wrapper):
    """A producer from before DLPack 1.0: no max_version keyword."""

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore[override]
        self.calls.append({"stream": stream})
        return self.inner.__dlpack__()


from dlpack_helpers import (  # noqa: E402
    HandMade,
)


def check_matches(tv: TensorView, a: np.ndarray) -> None:
    assert tv.ptr == np_ptr(a)
    assert tv.shape == a.shape
    assert tv.strides == np_elem_strides(a)
    assert tv.dtype == a.dtype
    assert tv.itemsize == a.itemsize


# --- numpy ---------------------------------------------------------------------------------

NP_DTYPES = [np.float16, np.float32, BF16]


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_numpy_contiguous(dtype: Any) -> None:
    a = ramp((3, 5), dtype)
    tv = view(a, "x")
    assert (tv.kind, tv.on_host, tv.device_type, tv.device_id) == ("numpy", True, DL_CPU, 0)
    check_matches(tv, a)
    assert tv.strides == (5, 1)
    assert tv.is_contiguous
    assert tv.nbytes_span == a.nbytes
    assert tv.host_array() is a
    assert tv.obj is a


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_numpy_transposed_and_sliced(dtype: Any) -> None:
    base = ramp((6, 8), dtype)
    t = base.T
    tv = view(t, "x")
    check_matches(tv, t)
    assert tv.strides == (1, 8) and not tv.is_contiguous

    s = base[2:5, 1::3]  # starts 2 rows + 1 column in: the offset is in ptr
    tv = view(s, "x")
    check_matches(tv, s)
    assert tv.ptr == np_ptr(base) + (2 * 8 + 1) * base.itemsize
    assert tv.strides == (8, 3)
    assert tv.nbytes_span == ((3 - 1) * 8 + (3 - 1) * 3 + 1) * base.itemsize
    np.testing.assert_array_equal(tv.host_array().astype(np.float32), s.astype(np.float32))

    rows = base[1:3]  # a row slice stays contiguous
    assert view(rows, "x").is_contiguous


def test_numpy_negative_strides_rejected() -> None:
    a = ramp((4, 3), np.float16)
    with pytest.raises(InputValueError, match=r"x: negative stride -3 on axis 0.*ascontiguousarray"):
        view(a[::-1], "x")
    with pytest.raises(InputValueError, match="axis 1"):
        view(a[:, ::-1], "x")
    # A reversed axis of length 1 addresses a single element: harmless, accepted.
    assert view(a[1:2][::-1], "x").shape == (1, 3)
    # Also rejected when the negative stride arrives through DLPack.
    with pytest.raises(InputValueError, match="negative stride"):
        view(Wrapper(np.arange(4.0, dtype=np.float32)[::-1]), "y")


def test_numpy_byte_stride_not_multiple_of_itemsize() -> None:
    rec = np.zeros(4, dtype=[("a", "<f4"), ("b", "u1")])
    with pytest.raises(InputValueError, match=r"x: byte stride 5 on axis 0 .* item size 4"):
        view(rec["a"], "x")


def test_numpy_broadcast_readonly_and_empty() -> None:
    b = np.broadcast_to(np.arange(3, dtype=np.float32), (4, 3))
    tv = view(b, "x")
    assert tv.strides == (0, 1) and tv.readonly and not tv.is_contiguous
    assert tv.nbytes_span == 3 * 4
    e = np.empty((0, 7), np.float16)
    tv = view(e, "e")
    assert tv.numel == 0 and tv.nbytes_span == 0 and tv.is_contiguous
    z = np.array(2.5, dtype=np.float32)  # 0-d
    tv = view(z, "z")
    assert tv.shape == () and tv.strides == () and tv.nbytes_span == 4 and tv.is_contiguous


@pytest.mark.parametrize("dtype", FP8 + [np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)], ids=str)
def test_numpy_other_dtypes(dtype: Any) -> None:
    a = ramp((2, 4), dtype)[:, 1:]
    tv = view(a, "q")
    check_matches(tv, a)
    assert tv.itemsize == dtype.itemsize


def test_numpy_unsupported_dtypes() -> None:
    with pytest.raises(InputTypeError, match=r"x: unsupported dtype complex64; supported: .*bfloat16"):
        view(np.zeros(3, np.complex64), "x")
    with pytest.raises(InputTypeError, match="unsupported dtype object"):
        view(np.array([None, 1]), "x")
    with pytest.raises(InputTypeError, match="native byte order"):
        view(np.zeros(3, ">f4"), "x")
    with pytest.raises(InputTypeError):
        view(np.zeros(3, dtype=[("a", "<f4")]), "x")


# --- torch ---------------------------------------------------------------------------------

TORCH_DTYPES = [(torch.float16, np.dtype(np.float16)), (torch.bfloat16, BF16),
                (torch.float32, np.dtype(np.float32))]


@pytest.mark.parametrize(("tdt", "ndt"), TORCH_DTYPES, ids=str)
def test_torch_cpu_contiguous(tdt: torch.dtype, ndt: np.dtype) -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(tdt)
    tv = view(t, "x")
    assert (tv.kind, tv.on_host, tv.device_type, tv.device_id) == ("torch", True, DL_CPU, 0)
    assert tv.ptr == t.data_ptr() and tv.shape == (3, 4) and tv.strides == (4, 1)
    assert tv.dtype == ndt and tv.itemsize == t.element_size()
    assert tv.is_contiguous and tv.nbytes_span == 12 * t.element_size()
    h = tv.host_array()
    assert h.dtype == ndt and np_ptr(h) == t.data_ptr()  # zero-copy, right dtype
    np.testing.assert_array_equal(h.astype(np.float32), t.float().numpy())
    assert torch_current_stream(tv) == 0


@pytest.mark.parametrize(("tdt", "ndt"), TORCH_DTYPES, ids=str)
def test_torch_cpu_strided(tdt: torch.dtype, ndt: np.dtype) -> None:
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8).to(tdt)
    for t, strides in [(base.t(), (1, 8)), (base[1:5, 2::2], (8, 2)), (base[:, 3], (8,)),
                       (base.unsqueeze(1).expand(6, 3, 8), (8, 0, 1))]:
        tv = view(t, "x")
        assert tv.ptr == t.data_ptr() and tv.strides == strides == t.stride()
        assert tv.is_contiguous == t.is_contiguous()
        h = tv.host_array()
        assert np_ptr(h) == t.data_ptr() and h.dtype == ndt
        np.testing.assert_array_equal(h.astype(np.float32), t.float().numpy())
    # A grad-requiring tensor is fine: we only read its memory.
    p = torch.nn.Parameter(torch.ones(2, 2))
    assert view(p, "w").host_array().sum() == 4


def test_torch_host_array_writes_through_and_fp8() -> None:
    t = torch.zeros(2, 3, dtype=torch.bfloat16)
    view(t, "x").host_array()[1, 2] = 3.5
    assert t[1, 2].item() == 3.5
    for tdt, ndt in [(torch.float8_e4m3fn, FP8[0]), (torch.float8_e4m3fnuz, FP8[1]),
                     (torch.float8_e5m2, FP8[2]), (torch.float8_e5m2fnuz, FP8[3])]:
        t = torch.tensor([[1.0, -2.0], [0.5, 4.0]]).to(tdt)
        tv = view(t, "q")
        assert tv.dtype == ndt and tv.itemsize == 1
        np.testing.assert_array_equal(tv.host_array().astype(np.float32), t.float().numpy())
    assert view(torch.zeros(3, dtype=torch.bool), "m").host_array().dtype == np.bool_


def test_torch_unsupported() -> None:
    with pytest.raises(InputTypeError, match=r"x: unsupported dtype torch.complex64"):
        view(torch.zeros(2, dtype=torch.complex64), "x")
    with pytest.raises(InputTypeError, match="strided"):
        view(torch.eye(3).to_sparse(), "x")
    with pytest.raises(DeviceMismatchError, match=r"x is a torch tensor on device 'meta'"):
        view(torch.empty(3, device="meta"), "x")


def test_torch_rocm_device_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 'cuda' tensor is DLPack kDLROCM on a ROCm build of torch, kDLCUDA otherwise.

    No GPU here, so a stand-in subclass of Tensor reports a cuda device.
    """

    class OnGpu(torch.Tensor):
        @property  # type: ignore[misc]
        def device(self) -> torch.device:  # type: ignore[override]
            return torch.device("cuda", 1)

    t = torch.zeros(4).as_subclass(OnGpu)
    monkeypatch.setattr(torch.version, "hip", "7.0.0", raising=False)
    tv = view(t, "x")
    assert (tv.on_host, tv.device_type, tv.device_id, tv.device_label) == (False, DL_ROCM, 1, "rocm:1")
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    tv = view(t, "x")
    assert (tv.device_type, tv.device_label) == (2, "cuda:1")
    with pytest.raises(DeviceMismatchError, match="x on cuda:1"):
        same_device([tv])


# --- DLPack via ctypes ---------------------------------------------------------------------

@pytest.mark.parametrize("inner_kind", ["numpy", "torch"])
def test_dlpack_wrapper_matches_numpy(inner_kind: str) -> None:
    base = np.arange(60, dtype=np.float32).reshape(5, 12)
    for a in [base, base[1:4, 2:11:3], base.T]:
        inner = torch.from_numpy(a) if inner_kind == "torch" else a
        w = Wrapper(inner)
        tv = view(w, "x")
        assert tv.kind == "dlpack" and tv.obj is w and tv.on_host and tv.device_type == DL_CPU
        check_matches(tv, a)
        np.testing.assert_array_equal(tv.host_array(), a)
        # Asked for a versioned capsule first; host producers get no stream.
        assert w.calls == [{"max_version": (1, 3)}]


def test_dlpack_torch_bf16_and_fp8() -> None:
    # numpy cannot export bf16/fp8 over DLPack, torch can (codes 4 and 10..13).
    for tdt, ndt in [(torch.bfloat16, BF16), (torch.float8_e4m3fn, FP8[0]),
                     (torch.float8_e4m3fnuz, FP8[1]), (torch.float8_e5m2, FP8[2]),
                     (torch.float8_e5m2fnuz, FP8[3]), (torch.float16, np.dtype(np.float16))]:
        t = torch.tensor([[1.0, 2.0, -3.0], [0.5, 0.0, 8.0]]).to(tdt)[:, 1:]
        for w in (Wrapper(t), LegacyWrapper(t)):
            tv = view(w, "x")
            assert tv.dtype == ndt and tv.ptr == t.data_ptr() and tv.strides == t.stride()
            np.testing.assert_array_equal(tv.host_array().astype(np.float32), t.float().numpy())


def test_dlpack_legacy_producer_falls_back() -> None:
    a = ramp((3, 4), np.float16)
    w = LegacyWrapper(a)
    tv = view(w, "x")
    check_matches(tv, a)
    assert w.calls == [{"stream": None}]


def test_dlpack_readonly_flag() -> None:
    b = np.broadcast_to(np.arange(4, dtype=np.float32), (2, 4))
    tv = view(Wrapper(b), "x")  # numpy flags it READ_ONLY in a versioned capsule
    assert tv.readonly and tv.strides == (0, 1)
    h = tv.host_array()
    assert not h.flags.writeable
    np.testing.assert_array_equal(h, b)


def test_dlpack_numpy_bf16_refused_clearly() -> None:
    with pytest.raises(InputTypeError, match=r"x: its __dlpack__\(\) refused to export"):
        view(Wrapper(np.zeros(3, BF16)), "x")


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_byte_offset_and_null_strides(versioned: bool) -> None:
    backing = ramp((4, 6), np.float16)
    offset = 6 * 2 * 2  # starts at row 2
    hm = HandMade(backing, np_ptr(backing), (2, 6), None, code=2, bits=16, byte_offset=offset,
                  version=(1, 1) if versioned else None)
    tv = view(hm, "x")
    expect = backing[2:]
    check_matches(tv, expect)  # ptr = data + byte_offset, NULL strides = row-major
    assert tv.is_contiguous and not tv.readonly
    np.testing.assert_array_equal(tv.host_array(), expect)
    # Explicit strides with an offset: a column-major 3x2 view starting at element 1.
    hm = HandMade(backing, np_ptr(backing), (3, 2), (1, 3), code=4, bits=16, byte_offset=2,
                  version=(1, 0) if versioned else None)
    tv = view(hm, "y")
    assert tv.dtype == BF16 and tv.ptr == np_ptr(backing) + 2 and tv.strides == (1, 3)
    assert tv.nbytes_span == (2 + 3 + 1) * 2


def test_dlpack_zero_dim_null_shape() -> None:
    backing = np.array([7.0], dtype=np.float32)
    hm = HandMade(backing, np_ptr(backing), (), None, code=2, bits=32)
    tv = view(hm, "s")
    assert tv.shape == () and tv.strides == () and tv.host_array() == 7.0


def test_dlpack_readonly_flag_handmade_and_bad_versions() -> None:
    backing = np.zeros(4, np.float32)
    tv = view(HandMade(backing, np_ptr(backing), (4,), (1,), 2, 32, version=(1, 2), flags=1), "x")
    assert tv.readonly
    with pytest.raises(InputTypeError, match=r"x: DLPack version 2.0 is not supported"):
        view(HandMade(backing, np_ptr(backing), (4,), (1,), 2, 32, version=(2, 0)), "x")
    with pytest.raises(InputTypeError, match="capsule named b'used_dltensor'"):
        view(HandMade(backing, np_ptr(backing), (4,), (1,), 2, 32, capsule_name=b"used_dltensor"), "x")


@pytest.mark.parametrize(("code", "bits", "lanes", "msg"), [
    (5, 64, 1, "complex"), (2, 32, 4, "4 lanes"), (17, 4, 1, "float4_e2m1fn"), (3, 64, 1, "opaque"),
    (2, 8, 1, r"float \(8 bits"), (99, 8, 1, "code 99")])
def test_dlpack_unsupported_dtypes(code: int, bits: int, lanes: int, msg: str) -> None:
    backing = np.zeros(8, np.float64)
    hm = HandMade(backing, np_ptr(backing), (2,), (1,), code, bits, lanes=lanes)
    with pytest.raises(InputTypeError, match=f"x: unsupported DLPack dtype.*{msg}"):
        view(hm, "x")


@pytest.mark.parametrize(("code", "bits", "dtype"), [
    (0, 8, np.int8), (0, 32, np.int32), (1, 8, np.uint8), (6, 8, np.bool_), (2, 16, np.float16),
    (4, 16, BF16), (10, 8, FP8[0]), (11, 8, FP8[1]), (12, 8, FP8[2]), (13, 8, FP8[3])])
def test_dlpack_dtype_codes(code: int, bits: int, dtype: Any) -> None:
    backing = np.zeros(8, np.float64)
    tv = view(HandMade(backing, np_ptr(backing), (2,), (1,), code, bits), "x")
    assert tv.dtype == np.dtype(dtype) and tv.itemsize == np.dtype(dtype).itemsize


def test_dlpack_device_tensor_and_stream() -> None:
    """A ROCm-resident DLPack tensor: the pointer is recorded, never dereferenced."""
    fake_ptr = 0x7F00_0000_0000
    hm = HandMade(None, fake_ptr, (16, 32), (32, 1), 4, 16, device=(DL_ROCM, 2), version=(1, 1))
    tv = view(hm, "w", stream=1234)
    assert (tv.on_host, tv.device_type, tv.device_id, tv.ptr) == (False, DL_ROCM, 2, fake_ptr)
    assert hm.kwargs == [{"max_version": (1, 3), "stream": 1234}]  # device producers get our stream
    assert torch_current_stream(tv) == 0
    with pytest.raises(DeviceMismatchError, match=r"w lives on rocm:2"):
        tv.host_array()
    with pytest.raises(InputTypeError, match=r"w is a DLPack tensor on rocm:2.*out="):
        new_output(tv, (16,), BF16)


@pytest.fixture
def young_gc():
    """gc.collect() over the objects made from here on: everything older is frozen meanwhile (late
    in a full suite run the heap is so large that each collection took about 15 s)."""
    frozen = gc.get_freeze_count()       # conftest freezes between modules: leave that as it was
    gc.freeze()
    yield
    if not frozen:
        gc.unfreeze()


@pytest.mark.parametrize("wrapper", [Wrapper, LegacyWrapper])
def test_dlpack_capsule_kept_alive_then_released(wrapper: type[Wrapper], young_gc: None) -> None:
    a = np.arange(6, dtype=np.float32)
    alive = weakref.ref(a)
    tv = view(wrapper(a), "x")
    h = tv.host_array()
    del a, tv
    gc.collect()
    assert alive() is not None  # the capsule (held by h's base) still owns the array
    np.testing.assert_array_equal(h, np.arange(6, dtype=np.float32))
    del h
    gc.collect()
    assert alive() is None  # the capsule's destructor released the producer's tensor


def counting_raises(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The names under which tensors' PyCapsule_GetPointer raised (ctypes turns a wrong name into an exception)."""
    raised: list[bytes] = []
    real = tensors._PyCapsule_GetPointer

    def get_pointer(capsule: Any, name: bytes) -> int:
        try:
            return real(capsule, name)
        except Exception:
            raised.append(name)
            raise

    monkeypatch.setattr(tensors, "_PyCapsule_GetPointer", get_pointer)
    return raised


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_legacy_dltensor_capsule_read_without_raising(monkeypatch: pytest.MonkeyPatch, versioned: bool) -> None:
    """A legacy 'dltensor' capsule is read as cheaply as a versioned one: its name is looked at, not
    guessed at the price of an exception, on the first export of a type as on later ones."""
    class Producer(HandMade):   # a type not seen before
        pass

    raised = counting_raises(monkeypatch)
    backing = ramp((3, 4), np.float16)
    hm = Producer(backing, np_ptr(backing), (3, 4), (4, 1), code=2, bits=16,
                  version=(1, 0) if versioned else None)
    for _ in range(3):
        found = dlpack_signature(hm)
        assert found is not None and found[1] == np_ptr(backing)
        check_matches(view(hm, "x"), backing)
    assert raised == []


def test_dlpack_pre_1_0_producer_on_the_per_call_path() -> None:
    """A producer from before DLPack 1.0 (no max_version keyword) has its layout and address read by
    `dlpack_signature` like any other, and is asked with max_version once, not on every call."""
    class Pre10(Wrapper):
        def __dlpack__(self, **kwargs: Any) -> Any:
            self.calls.append(kwargs)
            if "max_version" in kwargs:
                raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
            return self.inner.__dlpack__()   # numpy: a legacy 'dltensor' capsule

    a = ramp((3, 4), np.float16)[:, 1:]
    w = Pre10(a)
    first = dlpack_signature(w)
    assert first is not None and first[1] == np_ptr(a)
    assert [dlpack_signature(w) for _ in range(3)] == [first] * 3
    check_matches(view(w, "x"), a)
    assert w.calls == [{"max_version": (1, 3)}] + [{}] * 5   # the refused ask, its retry, 3 signatures, the view


def test_dlpack_type_whose_capsule_name_changes() -> None:
    """Exports of one type that switch between versioned and legacy capsules are still read right: the
    per-call path gives up once on a switch (the caller then views it, which relearns the type)."""
    class Producer(HandMade):
        pass

    backing = ramp((2, 8), np.float16)
    versioned, legacy = (Producer(backing, np_ptr(backing), (2, 8), (8, 1), code=2, bits=16, version=v, flags=1)
                         for v in ((1, 0), None))
    assert dlpack_signature(versioned) is not None and view(versioned, "x").readonly
    assert dlpack_signature(legacy) is None                    # named otherwise than the type's last export
    assert not view(legacy, "x").readonly                      # no flags before DLPack 1.0
    found = dlpack_signature(legacy)
    assert found is not None and found[1] == np_ptr(backing)
    assert dlpack_signature(versioned) is None
    assert view(versioned, "x").readonly and dlpack_signature(versioned) is not None


# --- unsupported objects -------------------------------------------------------------------

@pytest.mark.parametrize("obj", [1.5, 3, [1.0, 2.0], (1, 2), np.float32(1.0), True])
def test_scalars_and_lists_rejected(obj: Any) -> None:
    with pytest.raises(InputTypeError, match=r"bias: expected a numpy array, a torch tensor.*not accepted"):
        view(obj, "bias")


def test_unknown_object_rejected() -> None:
    with pytest.raises(InputTypeError, match="x: masked arrays are not accepted"):
        view(np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "x")
    with pytest.raises(InputTypeError, match=r"x: expected a numpy array, a torch tensor, or an object with "
                                             r"__dlpack__ and __dlpack_device__; got dict"):
        view({"a": 1}, "x")
    with pytest.raises(InputTypeError, match="got memoryview"):
        view(memoryview(b"abcd"), "x")

    class NotACapsule:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return b"nope"

        def __dlpack_device__(self) -> tuple[int, int]:
            return (DL_CPU, 0)

    with pytest.raises(InputTypeError, match="returned bytes, not a DLPack capsule"):
        view(NotACapsule(), "x")


# --- devices -------------------------------------------------------------------------------

def fake_view(name: str, on_host: bool, device_type: int, device_id: int = 0) -> TensorView:
    return TensorView(kind="dlpack", obj=None, on_host=on_host, device_type=device_type,
                      device_id=device_id, ptr=0x1000, dtype=np.dtype(np.float16), shape=(4,),
                      strides=(1,), itemsize=2, name=name)


def test_same_device() -> None:
    host = view(np.zeros(2, np.float16), "x")
    host2 = view(torch.zeros(2), "y")
    g0, g0b, g1 = fake_view("w", False, DL_ROCM, 0), fake_view("b", False, DL_ROCM, 0), fake_view(
        "z", False, DL_ROCM, 1)
    same_device([host, host2])
    same_device([g0, g0b])
    same_device([])
    with pytest.raises(DeviceMismatchError, match=r"x on host, w on rocm:0"):
        same_device([host, g0])
    with pytest.raises(DeviceMismatchError, match=r"w on rocm:0, z on rocm:1"):
        same_device([g0, g1])
    with pytest.raises(DeviceMismatchError, match=r"v on vulkan:0: hipskinny runs on AMD GPUs"):
        same_device([fake_view("v", False, 7)])
    # Pinned ROCm host memory counts as host.
    same_device([host, fake_view("p", True, 11)])


# --- outputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, np.float32, BF16, FP8[0]], ids=str)
def test_new_output_kinds(dtype: Any) -> None:
    out, tv = new_output(view(np.zeros(2, np.float32), "x"), (3, 4), dtype)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and out.shape == (3, 4)
    assert tv.kind == "numpy" and tv.obj is out and tv.name == "out" and tv.is_contiguous

    out, tv = new_output(view(torch.zeros(2), "x"), (3, 4), dtype, name="y")
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu" and tuple(out.shape) == (3, 4)
    assert tv.kind == "torch" and tv.dtype == np.dtype(dtype) and tv.name == "y"
    assert out.dtype == {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
                         BF16: torch.bfloat16, FP8[0]: torch.float8_e4m3fn}[np.dtype(dtype)]

    out, tv = new_output(view(Wrapper(np.zeros(2, np.float32)), "x"), (5,), dtype)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and tv.kind == "numpy"


def test_new_output_unsupported_dtype() -> None:
    with pytest.raises(InputTypeError, match="out: unsupported dtype complex128"):
        new_output(view(np.zeros(2), "x"), (2,), np.complex128)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, BF16, *FP8, np.int32, np.bool_], ids=str)
def test_to_kind(dtype: Any) -> None:
    arr = ramp((2, 3), dtype) if dtype is not np.bool_ else np.array([[True, False, True]] * 2)
    assert to_kind(arr, view(np.zeros(1), "x")) is arr
    assert to_kind(arr, view(Wrapper(np.zeros(1)), "x")) is arr

    t = to_kind(arr, view(torch.zeros(1), "x"))
    assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
    assert t.data_ptr() == np_ptr(arr)  # shares the result's memory
    back = view(t, "t")
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back.host_array(), arr)

    # A strided result shares memory too; a read-only or reversed one is copied.
    assert to_kind(arr.T, view(torch.zeros(1), "x")).stride() == (1, 3)  # type: ignore[attr-defined]
    ro = arr.copy()
    ro.flags.writeable = False
    t = to_kind(ro, view(torch.zeros(1), "x"))
    np.testing.assert_array_equal(view(t, "t").host_array(), ro)
    t = to_kind(arr[:, ::-1], view(torch.zeros(1), "x"))
    np.testing.assert_array_equal(view(t, "t").host_array(), arr[:, ::-1])


# --- torch stays optional ------------------------------------------------------------------

def test_imports_and_works_without_torch() -> None:
    code = """
import sys
sys.modules['torch'] = None  # any 'import torch' now raises ImportError
import numpy as np
from hipskinny.tensors import view, new_output, to_kind, torch_current_stream

class W:
    def __init__(self, a): self.a = a
    def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
    def __dlpack_device__(self): return self.a.__dlpack_device__()

a = np.arange(6, dtype=np.float32).reshape(2, 3)
tv = view(a, 'x')
assert torch_current_stream(tv) == 0
assert view(W(a), 'y').ptr == tv.ptr
out, _ = new_output(tv, (2,), np.float16)
assert to_kind(out, tv) is out
print('ok')
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
