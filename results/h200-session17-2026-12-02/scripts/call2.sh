#!/usr/bin/env bash
# session 17, call 2 (H200): matmul_backward_dgelu 8 checked (default + test sizes incl. 325 tiles),
# sanitized, timed beside 7 (and the family at B=32); matmul_forward_gelu 13 sanitized; then the
# trainer against PyTorch with: A the set before, D = + dgelu 8, DG = + gelu 13 (each promoted on
# the machine); the step's GPU tests on the faster set; the ncu test alone (call 1's failure)
set -u
o=$OUT/c2; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 150 $W run matmul_backward_dgelu 8 --no-torch --json $o/run-d8.json > $o/run-d8.txt 2>&1; D8=$?
( t timeout 250 $W sanitize matmul_backward_dgelu 8 --timeout 200 > $o/sanitize-d8.txt 2>&1 ) &
( t timeout 250 $W sanitize matmul_forward_gelu 13 --timeout 200 > $o/sanitize-g13.txt 2>&1 ) &
wait
for v in 7 8; do t timeout 60 $W run matmul_backward_dgelu $v --sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --json $o/run-d$v-b16.json > $o/run-d$v-b16.txt 2>&1; done
t timeout 150 $W bench matmul_backward_dgelu --sizes B=32,T=1024 --no-test-sizes --seeds 1 --no-torch --json $o/bench-d-b32.json > $o/bench-d-b32.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
use() { rm -rf train/kernels && cp -r /tmp/tk_$1 train/kernels; }
cp -r train/kernels /tmp/tk_A
[ $D8 = 0 ] && t timeout 150 $W promote matmul_backward_dgelu 8 > $o/promote-d8.txt 2>&1 && cp -r train/kernels /tmp/tk_D
[ -d /tmp/tk_D ] && t timeout 150 $W promote matmul_forward_gelu 13 > $o/promote-g13.txt 2>&1 && cp -r train/kernels /tmp/tk_DG
S="--precision bf16 --steps 50 -v 0 -s 0"
for b in 16 32; do
  for set in A D DG; do [ -d /tmp/tk_$set ] && use $set && tr ${set}_b$b $W train $S -b $b; done
  tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps 50
done
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
d = sys.argv[1]; ms = {}
for f in sorted(glob.glob(d + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    m = j.get("median_ms"); ms[n] = m
    print(n, m, j.get("median_tokens_per_s"), j.get("median_mfu"))
best = min([s for s in ("D", "DG") if f"{s}_b16" in ms and ms[f"{s}_b16"]], key=lambda s: (ms.get(f"{s}_b16") or 1e9) + (ms.get(f"{s}_b32") or 1e9) / 2, default="A")
print("best", best); open("/tmp/best", "w").write(best)
PY
B=$(cat /tmp/best 2>/dev/null || echo A); use $B
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
t timeout 100 $P tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
if [ $SECONDS -lt 330 ]; then
  ( t timeout 250 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1 ) &
  ( t timeout 250 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
  ( t timeout 250 $P tests/test_gpu.py -k "matmul_backward_dgelu or matmul_forward_gelu" > $o/gpu_versions.txt 2>&1 ) &
  wait
fi
tar czf $o/tk_$B.tgz train/kernels
cat $o/summary.txt; grep -a -h "runs clean\|not clean" $o/sanitize-*.txt; grep -a "check \|best:" $o/run-d8*.txt | cut -c1-170
grep -a -h "│ *[5-8] │" $o/bench-d-b32.txt | cut -c1-170; tail -n 1 $o/gpu_*.txt; cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
