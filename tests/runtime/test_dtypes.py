"""dtype arguments in every spelling users write (issue 22, item 1): one reader, `hipskinny.dtypes`,
used by every op and helper that takes a dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import hipskinny
from hipskinny import InputTypeError, bnb, dtypes, fp8, w4a16
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import fp8_linear, fused_moe, matmul_4bit, skinny_gemm, topk_softmax, w4a16_linear

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)

SPELLINGS = [
    (np.float16, F16), (F16, F16), ("float16", F16), ("half", F16), ("torch.float16", F16),
    (torch.float16, F16), (torch.half, F16),
    (ml_dtypes.bfloat16, BF16), (BF16, BF16), ("bfloat16", BF16), (torch.bfloat16, BF16),
    (np.float32, F32), (F32, F32), ("float32", F32), (torch.float32, F32),
]


@pytest.mark.parametrize(("value", "want"), SPELLINGS, ids=lambda v: repr(v) if not isinstance(v, np.dtype) else None)
def test_reader_accepts_every_spelling(value, want):
    assert dtypes.read(value, "dtype") == want


@pytest.mark.parametrize("value", [ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn, "float8_e4m3fn",
                                   ml_dtypes.float8_e4m3fnuz, torch.float8_e4m3fnuz, "float8_e4m3fnuz"])
def test_reader_accepts_fp8_types_where_they_apply(value):
    fp8s = (dtypes.E4M3FN, dtypes.E4M3FNUZ)
    assert dtypes.read(value, "x_dtype", fp8s).name == str(value).rsplit(".", 1)[-1].removesuffix("'>")
    with pytest.raises(InputTypeError, match="must be float16, bfloat16 or float32"):
        dtypes.read(value, "dtype")


@pytest.mark.parametrize("value", ["float", float, np.float64, "fp16", "Float16", 3, None, torch.int8, object(),
                                   [np.float16]],
                         # the same id in every xdist worker (not the object's address)
                         ids=lambda v: "object()" if type(v) is object else repr(v))
def test_reader_refuses_with_the_values_repr_and_the_accepted_dtypes(value):
    with pytest.raises(InputTypeError) as info:
        dtypes.read(value, "out_dtype", dtypes.HALVES)
    msg = str(info.value)
    assert msg.startswith("out_dtype must be float16 or bfloat16") and msg.endswith(f"got {value!r}")


# ---- the ops and helpers read it too --------------------------------------------------------------

def _fp8_call(out_dtype):
    rng = np.random.default_rng(3)
    w8, ws = fp8.quantize(rng.standard_normal((24, 64)).astype(np.float32), granularity="channel", flavor="ocp")
    x8, xs = fp8.quantize(rng.standard_normal((2, 64)).astype(np.float32), granularity="token", flavor="ocp")
    with hipskinny.on_device(EmulatedDevice("gfx950", 2)):
        return hipskinny.fp8_linear(x8, w8, ws, x_scale=xs, out_dtype=out_dtype), (x8, w8, ws, xs)


@pytest.mark.parametrize(("out_dtype", "want"), [(np.float16, F16), (ml_dtypes.bfloat16, BF16), (torch.float16, F16),
                                                 ("half", F16)], ids=repr)
def test_fp8_linear_out_dtype_as_numpy_ml_dtypes_or_torch_type(out_dtype, want):
    y, args = _fp8_call(out_dtype)
    by_name, _ = _fp8_call(want.name)
    assert y.dtype == want and y.tobytes() == by_name.tobytes()
    ref = hipskinny.fp8_linear_reference(*args[:3], x_scale=args[3], out_dtype=out_dtype)
    assert ref.dtype == want


def test_fp8_linear_refuses_a_float64_out_dtype_naming_it():
    with pytest.raises(InputTypeError, match=r"fp8_linear: out_dtype must be float16 or bfloat16 .*got <class "
                                             r"'numpy.float64'>"):
        _fp8_call(np.float64)


@pytest.mark.parametrize("x_dtype", [torch.float16, "half", np.float16])
def test_plan_info_takes_any_spelling_of_x_dtype(x_dtype):
    dev = EmulatedDevice("gfx1100", 4)
    assert skinny_gemm.plan_info(dev, x_dtype, 4, 256, 512) == skinny_gemm.plan_info(dev, F16, 4, 256, 512)
    assert matmul_4bit.plan_info(dev, x_dtype, 4, 256, 512) == matmul_4bit.plan_info(dev, F16, 4, 256, 512)
    assert w4a16_linear.plan_info(dev, x_dtype, 4, 256, 512) == w4a16_linear.plan_info(dev, F16, 4, 256, 512)
    assert fp8_linear.plan_info(dev, x_dtype, 4, 256, 512) == fp8_linear.plan_info(dev, F16, 4, 256, 512)
    assert (fused_moe.plan_info(dev, x_dtype, 2, 256, 128, 8, 2) == fused_moe.plan_info(dev, F16, 2, 256, 128, 8, 2))
    assert topk_softmax.plan_info(dev, x_dtype, 3, 8, 2) == topk_softmax.plan_info(dev, F16, 3, 8, 2)
    with pytest.raises(InputTypeError, match="dtype must be float16 or bfloat16 .*got 'int8'"):
        skinny_gemm.plan_info(dev, "int8", 4, 256, 512)


def test_silu_and_mul_reference_dtype_spellings():
    g, u = np.linspace(-3, 3, 40).reshape(5, 8), np.linspace(1, 2, 40).reshape(5, 8)
    want = fused_moe.silu_and_mul_reference(g, u, F16)
    for dt in (torch.float16, "half", np.float16):
        assert fused_moe.silu_and_mul_reference(g, u, dt).tobytes() == want.tobytes()


def test_w4a16_prepare_and_unprepare_take_torch_and_named_dtypes():
    rng = np.random.default_rng(0)
    qweight = rng.integers(0, 2**31, (64 // 8, 32), dtype=np.int64).astype(np.int32)    # GPTQ [K/8, M]
    scales = rng.uniform(0.5, 1.0, (2, 32)).astype(np.float16)
    p = w4a16.prepare(qweight, scales, fmt="gptq", group_size=32, dtype=torch.bfloat16)
    assert p.scales.dtype == BF16
    assert w4a16.unprepare(p, "half").dtype == F16 and w4a16.unprepare(p, torch.float32).dtype == F32
    with pytest.raises(InputTypeError, match="dtype must be float16, bfloat16 or float32 .*got 'int4'"):
        w4a16.unprepare(p, "int4")


def test_bnb_state_dtype_as_a_numpy_type_object():
    w = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float16)
    packed, state = bnb.quantize_4bit(w, quant_type="nf4", compress_statistics=False)
    want = bnb.dequantize_4bit(packed, state)
    for dt in (np.float16, "half", torch.float16):
        state.dtype = dt
        got = bnb.dequantize_4bit(packed, state)
        assert got.dtype == F16 and got.tobytes() == want.tobytes()
