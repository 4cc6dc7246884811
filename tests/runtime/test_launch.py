"""Argument packing from kernel metadata, hidden arguments, launch plans."""

from types import SimpleNamespace

import numpy as np
import pytest

from hipskinny import KernelArgumentError
from hipskinny.codeobject import KernelArg
from hipskinny.launch import ArgPacker, PlanCache, make_launch, make_plan

HIDDEN = [("hidden_block_count_x", 4), ("hidden_block_count_y", 4), ("hidden_block_count_z", 4),
          ("hidden_group_size_x", 2), ("hidden_group_size_y", 2), ("hidden_group_size_z", 2),
          ("hidden_remainder_x", 2), ("hidden_remainder_y", 2), ("hidden_remainder_z", 2)]


def fake_kernel(explicit, hidden_base=None, extra_hidden=(), max_wg=256):
    args = [KernelArg(off, size, kind, name=name) for name, off, size, kind in explicit]
    end = max((a.offset + a.size for a in args), default=0)
    base = hidden_base if hidden_base is not None else -(-end // 8) * 8
    off = base
    for kind, size in HIDDEN:
        args.append(KernelArg(off, size, kind))
        off += size
    args.append(KernelArg(base + 24 + 16, 8, "hidden_global_offset_x"))
    args.append(KernelArg(base + 64, 2, "hidden_grid_dims"))
    for kind, rel, size in extra_hidden:
        args.append(KernelArg(base + rel, size, kind))
    ns = SimpleNamespace(name="k", args=tuple(args), kernarg_segment_size=base + 256,
                         max_flat_workgroup_size=max_wg)
    ns.explicit_args = tuple(a for a in args if not a.is_hidden)
    ns.hidden_args = tuple(a for a in args if a.is_hidden)
    return ns


GEMV_LIKE = [("x", 0, 8, "global_buffer"), ("w", 8, 8, "global_buffer"), ("M", 16, 4, "by_value"),
             ("K", 20, 4, "by_value"), ("stride", 24, 8, "by_value")]


def test_pack_at_metadata_offsets():
    p = ArgPacker(fake_kernel(GEMV_LIKE))
    buf = p.hidden_block((10, 1, 1), (256, 1, 1), 0)
    p.pack_into(buf, [0x1000, 0x2000, 7, -1, 2**40])
    assert len(buf) == 32 + 256
    assert int.from_bytes(buf[0:8], "little") == 0x1000
    assert int.from_bytes(buf[8:16], "little") == 0x2000
    assert int.from_bytes(buf[16:20], "little") == 7
    assert buf[20:24] == b"\xff\xff\xff\xff"
    assert int.from_bytes(buf[24:32], "little") == 2**40


def test_hidden_block_as_hip_fills_it():
    p = ArgPacker(fake_kernel(GEMV_LIKE))
    buf = p.hidden_block((10, 3, 1), (64, 4, 1), 512)
    h = 32
    assert [int.from_bytes(buf[h + 4 * i:h + 4 * i + 4], "little") for i in range(3)] == [10, 3, 1]
    assert [int.from_bytes(buf[h + 12 + 2 * i:h + 14 + 2 * i], "little") for i in range(3)] == [64, 4, 1]
    assert buf[h + 18:h + 24] == bytes(6)                      # no partial workgroups in HIP
    assert int.from_bytes(buf[h + 64:h + 66], "little") == 2    # y is used: 2-D grid
    assert buf[h + 40:h + 48] == bytes(8)                      # global offset 0


def test_dynamic_lds_size_is_filled():
    k = fake_kernel(GEMV_LIKE, extra_hidden=[("hidden_dynamic_lds_size", 120, 4)])
    buf = ArgPacker(k).hidden_block((1, 1, 1), (64, 1, 1), 4096)
    assert int.from_bytes(buf[32 + 120:32 + 124], "little") == 4096


def test_unknown_hidden_argument_is_refused():
    k = fake_kernel(GEMV_LIKE, extra_hidden=[("hidden_something_new", 140, 8)])
    with pytest.raises(KernelArgumentError, match="hidden_something_new"):
        ArgPacker(k).hidden_block((1, 1, 1), (64, 1, 1), 0)


def test_numpy_scalars_pack_by_their_bytes():
    k = fake_kernel([("a", 0, 4, "by_value"), ("s", 4, 4, "by_value")])
    p = ArgPacker(k)
    buf = p.hidden_block((1, 1, 1), (1, 1, 1), 0)
    p.pack_into(buf, [np.float32(1.5), np.int32(-3)])
    assert buf[0:4] == np.float32(1.5).tobytes() and buf[4:8] == np.int32(-3).tobytes()


@pytest.mark.parametrize("values, match", [
    ([1, 2, 3, 4], "takes 5 arguments"),
    ([1, 2, 3, 4, 5, 6], "takes 5 arguments"),
    ([-1, 2, 3, 4, 5], "device address"),
    ([1.5, 2, 3, 4, 5], "device address"),
    ([1, 2, 2**32, 4, 5], "does not fit"),
    ([1, 2, 3, 4.0, 5], "int or a sized numpy scalar"),
    ([1, 2, np.float64(1.0), 4, 5], "is 4 bytes"),
    ([1, 2, True, 4, 5], "int or a sized numpy scalar"),
])
def test_mismatched_calls_are_refused(values, match):
    p = ArgPacker(fake_kernel(GEMV_LIKE))
    with pytest.raises(KernelArgumentError, match=match):
        p.pack_into(p.hidden_block((1, 1, 1), (1, 1, 1), 0), values)


def test_plan_refuses_blocks_above_launch_bound():
    with pytest.raises(KernelArgumentError, match="launch bound"):
        make_plan(object(), fake_kernel(GEMV_LIKE, max_wg=256), (1, 1, 1), (512, 1, 1))


def test_plan_kernarg_and_cache():
    k = fake_kernel(GEMV_LIKE)
    cache = PlanCache(maxsize=2)
    builds = []

    def build(n):
        builds.append(n)
        return make_plan("fn", k, (n, 1, 1), (256, 1, 1))

    p1 = cache.get(("a", 1), lambda: build(1))
    assert cache.get(("a", 1), lambda: build(1)) is p1
    cache.get(("a", 2), lambda: build(2))
    cache.get(("a", 3), lambda: build(3))          # evicts ("a", 1)
    cache.get(("a", 1), lambda: build(1))
    assert builds == [1, 2, 3, 1] and cache.misses == 4
    kernarg = p1.kernarg([16, 32, 1, 2, 3])
    assert len(kernarg) == k.kernarg_segment_size and kernarg[32:36] == (1).to_bytes(4, "little")


class _RecordingDevice:
    """`make_launch` needs only ``dispatcher``: this one packs what a call passes (as HipDevice does)."""

    def dispatcher(self, plan):
        def dispatch(pointers, tail, stream=0):
            self.kernarg = bytearray(plan.template)
            plan.args.pack_into(self.kernarg, 0, *pointers, *tail)
        return dispatch


def _bound(kernel, pointers, **args):
    dev = _RecordingDevice()
    launch = make_launch(dev, make_plan("fn", kernel, (1, 1, 1), (64, 1, 1)), pointers, **args)
    return dev, launch


@pytest.mark.parametrize("order", ["as declared", "reversed"])
def test_launch_binds_arguments_by_name(order):
    """The kernel's metadata decides where each named value goes: a signature declared in another order
    (the same names at other offsets) takes the same call unchanged."""
    args = [("w", 0, 8, "global_buffer"), ("x", 8, 8, "global_buffer"), ("stride", 16, 8, "by_value"),
            ("K", 24, 4, "by_value"), ("M", 28, 4, "by_value")]
    if order == "reversed":     # pointers stay first (the launch packs the call's pointers, then values)
        args = [("x", 0, 8, "global_buffer"), ("w", 8, 8, "global_buffer"), ("M", 16, 4, "by_value"),
                ("K", 20, 4, "by_value"), ("stride", 24, 8, "by_value")]
    dev, launch = _bound(fake_kernel(args), ("x", "w", "out"), x="x", w="w", M=7, K=-1, stride=2**40)
    launch.dispatch(launch.args([0x1000, 0x2000, 0x3000]), launch.tail, 0)
    at = {name: (off, size) for name, off, size, _ in args}
    value = {n: int.from_bytes(dev.kernarg[o:o + s], "little", signed=True) for n, (o, s) in at.items()}
    assert value == {"x": 0x1000, "w": 0x2000, "M": 7, "K": -1, "stride": 2**40}
    assert launch.prefix == (-1 if order == "as declared" else 2)   # a slice when the call's order is the kernel's


def test_launch_null_pointers_and_scratch_names():
    args = [("x", 0, 8, "global_buffer"), ("lse", 8, 8, "global_buffer"), ("part", 16, 8, "global_buffer"),
            ("n", 24, 4, "by_value")]
    dev, launch = _bound(fake_kernel(args), ("x", "out", "part.slot"), x="x", lse=None, part="part.slot", n=3)
    assert launch.select == (0, -1, 2) and launch.tail == (3,)
    launch.dispatch(launch.args([5, 6, 7]), launch.tail, 0)
    assert [int.from_bytes(dev.kernarg[o:o + 8], "little") for o in (0, 8, 16)] == [5, 0, 7]
    _, trailing = _bound(fake_kernel(args), ("x",), x="x", lse=None, part=None, n=3)
    assert trailing.select == (0,) and trailing.tail == (0, 0, 3) and trailing.prefix == 1


@pytest.mark.parametrize("given, match", [
    (dict(x="x", w="w", M=1, K=2), r"takes \(x, w, M, K, stride\); missing stride"),
    (dict(x="x", w="w", M=1, K=2, stride=3, y="out"), "it has no y"),
    (dict(x="x", w="nope", M=1, K=2, stride=3), "none of the call's pointers"),
    (dict(x="x", w=0x1000, M=1, K=2, stride=3), "takes one of the call's pointers by name"),
    (dict(x="x", w="w", M="x", K=2, stride=3), "must be a pointer"),
])
def test_launch_refuses_what_the_kernel_does_not_take(given, match):
    with pytest.raises(KernelArgumentError, match=match):
        _bound(fake_kernel(GEMV_LIKE), ("x", "w", "out"), **given)


def test_argument_names_come_from_the_source():
    """clang names a pointer it passes coerced ``<name>.coerce``; the packer uses the source's name and
    refuses metadata whose names repeat."""
    k = fake_kernel([("x.coerce", 0, 8, "global_buffer"), ("M", 8, 4, "by_value")])
    assert [a.name for a in ArgPacker(k).explicit] == ["x", "M"]
    with pytest.raises(KernelArgumentError, match="repeat"):
        ArgPacker(fake_kernel([("x", 0, 8, "global_buffer"), ("x.coerce", 8, 8, "global_buffer")]))
