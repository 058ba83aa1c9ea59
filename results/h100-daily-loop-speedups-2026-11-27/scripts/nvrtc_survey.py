"""NVRTC against nvcc for every version on the GPU host: refusals (why), compile seconds, and
whether the kernels' code (.text.* sections) and resources (.nv.info.*, .nv.shared.*) are the same."""
import json, struct, sys, time
sys.path.insert(0, ".")
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from workbench import compile as comp
from workbench.family import Project

CUDA_INC = "/usr/local/cuda/include"

def sections(elf: bytes) -> dict:
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx]
    def name(off):
        s = strtab[4] + off
        return elf[s:elf.index(b"\0", s)].decode()
    return {name(h[0]): (elf[h[4]:h[4] + h[5]] if h[1] != 8 else h[5]) for h in hdrs}

def nvrtc(text, name, arch, dirs, extra=()):
    from cuda.bindings import nvrtc as n
    err, prog = n.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], [])
    opts = [f"-arch={arch}".encode(), b"--use_fast_math", b"-std=c++17", b"--ptxas-options=-v",
            *(f"-I{d}".encode() for d in [*dirs, CUDA_INC]), *[e.encode() for e in extra]]
    err, = n.nvrtcCompileProgram(prog, len(opts), opts)
    _, size = n.nvrtcGetProgramLogSize(prog); log = b" " * size; n.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace").rstrip("\0")
    if err != n.nvrtcResult.NVRTC_SUCCESS:
        return None, log
    _, size = n.nvrtcGetCUBINSize(prog); cubin = b" " * size; n.nvrtcGetCUBIN(prog, cubin)
    n.nvrtcDestroyProgram(prog)
    return cubin, log

def one(args):
    fam, num = args
    v = Project().family(fam).version(num)
    text, dirs = comp.source_for(v.path), comp.include_dirs(v.path)
    t0 = time.perf_counter(); cub, log = nvrtc(text, v.path.name, "sm_90", dirs); t1 = time.perf_counter()
    try:
        nv, res, _ = comp.compile_cubin(v.path, "sm_90")
    except Exception as e:
        nv, res = None, {}
    t2 = time.perf_counter()
    out = {"v": v.label, "nvrtc_s": round(t1 - t0, 3), "nvcc_s": round(t2 - t1, 3), "refused": cub is None}
    if cub is None:
        out["why"] = [l for l in log.splitlines() if "error" in l][:3]
        return out
    a, b = sections(cub), sections(nv)
    text_a = {k: a[k] for k in a if k.startswith(".text.")}
    text_b = {k: b[k] for k in b if k.startswith(".text.")}
    out["same_text"] = text_a == text_b
    out["same_info"] = all(a.get(k) == b.get(k) for k in set(a) | set(b) if k.startswith((".nv.info.", ".nv.shared.", ".nv.constant0.")))
    out["res_nvrtc"] = {k: r.__dict__ for k, r in comp.parse_ptxas(log).items()}
    out["res_nvcc"] = {k: r.__dict__ for k, r in res.items()}
    if not out["same_text"]:
        out["text_diff"] = sorted(k for k in set(text_a) | set(text_b) if text_a.get(k) != text_b.get(k))[:4]
    return out

if __name__ == "__main__":
    v = Project().family("layernorm_forward").version(4)
    text, dirs = comp.source_for(v.path), comp.include_dirs(v.path)
    for extra in ((), ("-pch",)):
        for i in range(3):
            t = time.perf_counter(); c, log = nvrtc(text, v.path.name, "sm_90", dirs, extra)
            print(f"## layernorm_forward 4 nvrtc {extra} try {i}: {time.perf_counter()-t:.3f} s, ok={c is not None} {log[:300] if c is None else ''}")
    jobs = [(f.name, v.number) for f in Project().families() for v in f.versions]
    with ProcessPoolExecutor(14) as pool:
        out = list(pool.map(one, jobs))
    for o in out:
        print(json.dumps(o))
    ok = [o for o in out if not o["refused"]]
    print(f"## {len(out)} versions: refused {len(out)-len(ok)}, same text {sum(o['same_text'] for o in ok)}, "
          f"same text+info {sum(o['same_text'] and o['same_info'] for o in ok)}, "
          f"nvrtc median {sorted(o['nvrtc_s'] for o in out)[len(out)//2]} s, nvcc median {sorted(o['nvcc_s'] for o in out)[len(out)//2]} s (14 at once)")
