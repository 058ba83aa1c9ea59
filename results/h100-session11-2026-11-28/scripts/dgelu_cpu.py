import numpy as np, time
from workbench.family import Project
from workbench.check import make_case, from_storage, to_storage
fam = Project(".").family("matmul_backward_dgelu")
sizes = {"B": 16, "T": 1024, "C": 3072, "OC": 768}
for seed in (0, 1):
    t = time.time()
    case = make_case(fam, sizes, seed, "bf16")
    rdpre = case.expected["dpre"].reshape(-1, 3072); rb = case.expected["dpre_bias"]
    b0 = from_storage(case.inputs["dpre_bias"], "bf16").astype(np.float64)
    rr = from_storage(to_storage(rdpre.astype(np.float32), "bf16"), "bf16").astype(np.float64)
    v = b0 + rr.sum(0)
    out = from_storage(to_storage(v.astype(np.float32), "bf16"), "bf16").astype(np.float64)
    err = np.abs(out - rb); tol = 3e-2 + 1e-2 * np.abs(rb)
    i = np.argmax(err / tol)
    print(f"seed {seed} ({time.time()-t:.0f}s): |ref| max {np.abs(rb).max():.2f}; worst err/tol {err[i]/tol[i]:.2f} at col {i}: ref {rb[i]:.4f} walk-sum {v[i]:.4f} stored {out[i]:.4f}; fails {int((err>tol).sum())}")
    for c in (1631, 308, 2713, 2090):
        print(f"   col {c}: ref {rb[c]:.4f} v {v[c]:.4f} stored {out[c]:.4f} err {err[c]:.4f} tol {tol[c]:.4f}")
