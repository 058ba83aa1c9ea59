"""`workbench train ARGS` with the weight-gradient GEMMs (the gemm_lt calls with trans_a and beta 1)
described to cuBLASLt with SM_COUNT_TARGET = $SIDE_SMS: run with --side-stream, they then leave
the other multiprocessors to the main stream's kernels. Session 21's experiment (call 2); the
tuning's picks for those calls are remembered under their own key."""
import os
import sys

from nvmath.bindings import cublasLt

from workbench import gemm_tuning
from workbench import library_calls as lc

SMS = int(os.environ["SIDE_SMS"])
state = {"dw": False}
make_desc = cublasLt.matmul_desc_create


def matmul_desc_create(*args):
    desc = make_desc(*args)
    if state["dw"]:
        lc._set(cublasLt.matmul_desc_set_attribute, desc, cublasLt.MatmulDescAttribute.SM_COUNT_TARGET,
                cublasLt.get_matmul_desc_attribute_dtype, SMS)
    return desc


cublasLt.matmul_desc_create = matmul_desc_create
gemm_lt = lc._LIBRARY["gemm_lt"]


def weight_gradient_aware(*args, **kw):
    state["dw"] = bool(kw.get("trans_a")) and float(kw.get("beta", 0)) == 1.0
    try:
        return gemm_lt(*args, **kw)
    finally:
        state["dw"] = False


lc._LIBRARY["gemm_lt"] = weight_gradient_aware
pick = gemm_tuning.pick
gemm_tuning.pick = lambda key, *a, **kw: pick(key + (f" sms={SMS}" if state["dw"] else ""), *a, **kw)
sys.argv = ["workbench", "train", *sys.argv[1:]]
from workbench.cli.app import main  # noqa: E402

main()
