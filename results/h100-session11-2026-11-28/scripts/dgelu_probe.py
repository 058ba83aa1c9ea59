"""Where matmul_backward_dgelu 5's dpre_bias error at B=16 comes from (run on the GPU)."""
import sys
import numpy as np
import pycuda.autoinit  # noqa
import pycuda.driver as drv
from workbench.family import Project
from workbench.check import make_case, from_storage
from workbench.providers import VersionProvider, CaseBuffers, shapes_for

ver = int(sys.argv[1]) if len(sys.argv) > 1 else 5
B = int(sys.argv[2]) if len(sys.argv) > 2 else 16
version = Project(".").family("matmul_backward_dgelu").version(ver)
fam = version.family
sizes = {"B": B, "T": 1024, "C": 3072, "OC": 768}
prov = VersionProvider(version)
block = prov.configs()[0] if prov.configs() else None
for seed in (0, 1):
    case = make_case(fam, sizes, seed, version.precision)
    bufs = CaseBuffers(prov.args(), shapes_for(prov.args(), fam.env)(case), case)
    bufs.with_scratch(prov.scratch(sizes, block))
    plan, _ = prov.prepare(bufs, block)
    bufs.reset()
    s = drv.Stream(); plan(s); s.synchronize()
    def get(name, dtype):
        b = bufs.buffers[name]
        host = np.empty(b.nbytes // (2 if dtype == "bf16" else 4), dtype=np.uint16 if dtype == "bf16" else np.float32)
        drv.memcpy_dtoh(host, b.ptr)
        return from_storage(host, dtype).astype(np.float64)
    dtype = {a.name: a.dtype for a in prov.args()}
    dpre = get("dpre", dtype["dpre"]).reshape(-1, sizes["C"])
    dbias = get("dpre_bias", dtype["dpre_bias"])
    bias0 = from_storage(case.inputs["dpre_bias"], dtype["dpre_bias"]).astype(np.float64)
    rdpre = case.expected["dpre"].reshape(-1, sizes["C"])
    rbias = case.expected["dpre_bias"]
    d = dpre - rdpre
    print(f"v{ver} B={B} seed={seed} dtypes dpre={dtype['dpre']} dpre_bias={dtype['dpre_bias']}")
    print(f"  dpre vs ref: max|d| {np.abs(d).max():.3e}  mean d {d.mean():.3e}  col-sum of d: max {np.abs(d.sum(0)).max():.4f}")
    own = bias0 + dpre.sum(0)
    print(f"  dpre_bias vs bias0+colsum(own dpre): max {np.abs(dbias - own).max():.3e}")
    print(f"  dpre_bias vs ref: max {np.abs(dbias - rbias).max():.4f} at col {np.abs(dbias - rbias).argmax()}")
    # rounding walk: ref dpre rounded to bf16, summed exactly
    from workbench.check import to_storage
    rr = from_storage(to_storage(rdpre.astype(np.float32), "bf16"), "bf16").astype(np.float64)
    walk = bias0 + rr.sum(0) - rbias
    print(f"  pure rounding walk (ref dpre->bf16, exact sum): max {np.abs(walk).max():.4f}")
    # rounding of fp32 own values differs? compare own dpre with rounded ref
    dd = dpre - rr
    nz = np.count_nonzero(dd)
    print(f"  own dpre vs bf16(ref dpre): {nz} of {dd.size} differ, max {np.abs(dd).max():.3e}, col-sum max {np.abs(dd.sum(0)).max():.4f}, mean signed {dd.mean():.3e}")
    # systematic gelu' error? relative error of dpre where |ref|>1e-2
    m = np.abs(rdpre) > 1e-2
    rel = (dpre[m] - rdpre[m]) / rdpre[m]
    print(f"  rel err where |ref|>1e-2: mean {rel.mean():.3e} std {rel.std():.3e}")
    bufs.free()
prov.close()
