"""Tensor-map arguments (`tma:` in a version's header, workbench/tensor_maps.py): how they parse,
the TMA's limits as one-line errors, and, on a GPU, the map the driver encodes in a plan."""
import numpy as np
import pytest

from workbench.errors import ContractError
from workbench.family import Project, tensor_map_arg
from workbench.tensor_maps import MAP_BYTES, check_shape, encode

from conftest import ROOT


def test_a_tma_argument_parses_into_its_buffer_and_four_expressions():
    assert tensor_map_arg("tma:inp, N, C, 128, 64") == ("inp", ("N", "C", "128", "64"))
    assert tensor_map_arg("tma: w , OC,C, 2 * 96,64") == ("w", ("OC", "C", "2 * 96", "64"))
    assert tensor_map_arg("inp") is None and tensor_map_arg("i64:N * C") is None
    with pytest.raises(ContractError, match="tma:BUFFER, ROWS, COLS, BOX_ROWS, BOX_COLS"):
        tensor_map_arg("tma:inp, N, C")


@pytest.mark.parametrize("shape, message", [
    ((8, 7, 8, 8, "bf16"), "multiple of 16 bytes apart: 7 bf16"),
    ((0, 8, 8, 8, "bf16"), "at least 1"),
    ((8, 64, 257, 64, "bf16"), "at most 256 x 256"),
    ((8, 128, 8, 128, "bf16"), "at most 128: 128 bf16 elements are 256"),
    ((8, 64, 8, 64, "i32"), "bf16 or f32"),
])
def test_the_tmas_limits_are_one_line_errors(shape, message):
    with pytest.raises(ContractError, match=message):
        check_shape(*shape)


def test_the_limits_take_the_shapes_the_gemm_uses():
    for rows, box in ((16384, 128), (3072, 192), (3072, 256), (1, 128)):
        check_shape(rows, 768, box, 64, "bf16")
    check_shape(5, 32, 5, 32, "f32")


def test_the_tma_gemm_takes_its_maps_as_pointers_in_the_order_its_header_gives_them():
    v = Project(ROOT).family("matmul_forward_gelu").version(7)
    (step,) = v.steps
    assert [tensor_map_arg(a) for a in step.args[:2]] == [("inp", ("N", "C", "128", "64")),
                                                         ("weight", ("OC", "C", "192", "64"))]
    assert not any(tensor_map_arg(a) for a in step.args[2:])
    assert "matmul_forward_gelu7(const TmaMap* map_inp, const TmaMap* map_weight," in v.path.read_text()


@pytest.mark.gpu
def test_a_plan_encodes_the_map_of_its_buffer():
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from workbench.launch import DeviceBuffer, _resolve
    buf = drv.mem_alloc(100 * 768 * 2)
    b = DeviceBuffer(int(buf), 100 * 768 * 2, "bf16")
    kind, ptr = _resolve("tma:x, R, 768, 128, 64", {"R": 100}, {"x": b})
    blob = drv.from_device(ptr, MAP_BYTES, np.uint8).tobytes()
    assert kind == "P" and ptr % 64 == 0 and blob == encode(int(buf), 100, 768, 128, 64, "bf16") != bytes(MAP_BYTES)
    assert _resolve("tma:x, R, 768, 128, 64", {"R": 100}, {"x": b})[1] == ptr  # one copy of one map
    kind2, ptr2 = _resolve("tma:x, R, 768, 128, 64", {"R": 99}, {"x": b})
    assert ptr2 != ptr and drv.from_device(ptr2, MAP_BYTES, np.uint8).tobytes() != blob  # the map holds the shape
    with pytest.raises(ContractError, match="more than its"):
        _resolve("tma:x, R, 768, 128, 64", {"R": 101}, {"x": b})
