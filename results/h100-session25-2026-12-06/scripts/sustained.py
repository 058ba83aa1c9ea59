"""Session 25: cuBLASLt's candidates timed under sustained load (at the power cap) instead of in
short bursts. `python3 sustained.py <workbench arguments>` runs the workbench CLI with
gemm_tuning.pick replaced: each call's candidates are first timed as the project times them (two
warm-ups, 7 rounds of 3 launches, bursts at full clock), then, after ~0.4 s of back-to-back
launches that bring the GPU to its power limit, in 3 rounds that visit every candidate for
~0.12 s of back-to-back launches each (CUDA events around the visit), with NVML's energy counter
read around each visit. The pick is the fastest sustained median; both medians, the energy per
launch and the SM clock are written with it (WORKBENCH_CACHE's gemm_tune.json; run with a cache dir
of its own)."""
import ctypes
import sys

import numpy as np

from workbench import gemm_tuning as gt

HEAT_S, VISIT_S, ROUNDS = 0.4, 0.12, 3
_nvml = None


def nvml():
    global _nvml
    if _nvml is None:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        lib.nvmlInit_v2()
        h = ctypes.c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
        _nvml = (lib, h)
    return _nvml


def energy_mj() -> int:
    lib, h = nvml()
    v = ctypes.c_ulonglong()
    lib.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(v))
    return v.value


def sm_clock() -> int:
    lib, h = nvml()
    v = ctypes.c_uint()
    lib.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(v))  # NVML_CLOCK_SM
    return v.value


def pick_sustained(key, count, extents, itemsize, launcher):
    if count <= 1:
        return 0
    if key in gt._PICKS:
        return gt._PICKS[key]
    device = gt._device_entry()
    known = gt._load().get(device, {}).get(key)
    if known and 0 <= known.get("pick", -1) < count and known.get("candidates") == count:
        gt._PICKS[key] = known["pick"]
        return known["pick"]
    import pycuda.driver as drv
    free, _ = drv.mem_get_info()
    if sum(extents.values()) > free // 4:
        gt._PICKS[key] = 0
        return 0
    bufs = {name: drv.mem_alloc(max(16, nbytes)) for name, nbytes in extents.items()}
    try:
        for name, nbytes in extents.items():
            gt.random_fill(int(bufs[name]), nbytes, itemsize)
        p = {name: int(b) for name, b in bufs.items()}
        s = drv.Stream()
        alive = []
        for i in range(count):
            try:
                for _ in range(gt.WARMUP):
                    launcher(i, p, s)
                s.synchronize()
                alive.append(i)
            except Exception:  # noqa: BLE001
                continue
        if not alive:
            gt._PICKS[key] = 0
            return 0

        def visit(i, n):
            a, b = drv.Event(), drv.Event()
            a.record(s)
            for _ in range(n):
                launcher(i, p, s)
            b.record(s)
            b.synchronize()
            return b.time_since(a) * 1000 / n  # us a launch

        burst = {i: [] for i in alive}
        for _ in range(gt.ROUNDS):
            for i in alive:
                burst[i].append(visit(i, gt.PER_VISIT))
        bmed = {i: float(np.median(t)) for i, t in burst.items()}
        heat_n = max(3, int(HEAT_S * 1e6 / bmed[alive[0]]))
        visit(alive[0], heat_n)
        sus = {i: [] for i in alive}
        joules, clocks = {i: [] for i in alive}, {i: [] for i in alive}
        for _ in range(ROUNDS):
            for i in alive:
                n = max(3, int(VISIT_S * 1e6 / bmed[i]))
                e0 = energy_mj()
                sus[i].append(visit(i, n))
                joules[i].append((energy_mj() - e0) / n)  # mJ a launch
                clocks[i].append(sm_clock())
        smed = {i: float(np.median(t)) for i, t in sus.items()}
        best = min(smed, key=lambda i: smed[i])
    finally:
        for b in bufs.values():
            b.free()
    gt._PICKS[key] = best
    gt._remember(device, key, {
        "pick": best, "candidates": count, "burst_pick": min(bmed, key=lambda i: bmed[i]),
        "median_us": {str(i): round(t, 2) for i, t in smed.items()},
        "burst_us": {str(i): round(t, 2) for i, t in bmed.items()},
        "mj_per_launch": {str(i): round(float(np.median(v)), 3) for i, v in joules.items()},
        "sm_mhz": {str(i): int(np.median(v)) for i, v in clocks.items()}})
    return best


if __name__ == "__main__":
    gt.pick = pick_sustained
    from workbench.cli.app import main
    main(sys.argv[1:])
