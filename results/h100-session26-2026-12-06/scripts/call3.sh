#!/usr/bin/env bash
# session 26, call 3 (H100): the power meter reading NVML's instant field (this session's change to
# workbench/power.py) against call 1's trailing-average readings: the same runs repeated (bf16 B=16
# three times, fp32 B=4 twice, bf16 B=32 once) under an nvidia-smi log of power.draw.instant and
# power.draw.average every 100 ms; then the power tests (CPU and GPU).
set -u
o=$OUT/c; mkdir -p $o/train; S_DIR=results/h100-session26-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id,driver_version --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
python3 - > $o/probe.txt 2>&1 <<'PY'
import pycuda.driver as cuda, ctypes, time
from workbench.power import PowerMeter
cuda.init(); dev = cuda.Device(0)
m = PowerMeter(dev.pci_bus_id()); print("why", m.why, "instant", m.instant, "limit", m.limit_w, "max", m.max_mhz)
for _ in range(3):
    mw = ctypes.c_uint(); m._nvml.nvmlDeviceGetPowerUsage(m._handle, ctypes.byref(mw))
    t0 = time.perf_counter(); r = m.read(); us = (time.perf_counter() - t0) * 1e6
    print("idle: read", r, "in %.0f us; GetPowerUsage %.1f W" % (us, mw.value / 1000)); time.sleep(0.2)
PY
nvidia-smi --query-gpu=timestamp,power.draw.instant,power.draw.average,clocks.sm --format=csv,nounits -lms 100 > $o/smi.csv 2>&1 &
SMI=$!
tr() { local name=$1; shift; echo "=== $name $(date +%T.%N): $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; echo "=== end $name $(date +%T.%N)" >> $o/train-log.txt; }
S="--steps 50 -v 0 -s 0"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 )
for i in 1 2 3; do tr P_b16_$i $W train --precision bf16 $S -b 16; done
for i in 1 2; do tr F_b4_$i $W train --precision fp32 $S -b 4; done
tr P_b32_1 $W train --precision bf16 $S -b 32
kill $SMI
P="python3 -m pytest -q -rs -p no:cacheprovider"
t timeout 110 $P --timeout 100 tests/test_power.py tests/test_gpu_trainer_runs.py -k "power" > $o/tests.txt 2>&1
grep -h "^===\|GPU power\|average step" $o/train-log.txt | cut -c1-200 > $o/summary.txt
cat $o/probe.txt $o/summary.txt; tail -n 3 $o/tests.txt; cat $o/times.txt; head -3 $o/smi.csv
cd $OUT && tar czf c.tgz c && cp c/summary.txt c/probe.txt c/tests.txt . && rm -rf c
