#!/usr/bin/env bash
# session 18, call C (H200), HEAD promotes dgelu 10 + gelu 14: matmul_forward_gelu 15 (128 x 256
# cooperative tiles) checked, sanitized, timed beside 5, 10 and 14 at B=16/32 (ncu beside 14); the
# trainer against PyTorch at B=16/32 (two runs of ours a size); every gelu/dgelu version's GPU test;
# the B=32 step's per-kernel profile
set -u
o=$OUT/cC; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 120 $W run matmul_forward_gelu 15 --no-torch --json $o/run-g15.json > $o/run-g15.txt 2>&1; G15=$?
( t timeout 150 $W sanitize matmul_forward_gelu 15 --timeout 120 > $o/sanitize-g15.txt 2>&1 ) &
wait
for b in 16 32; do for v in 5 10 14 15; do
  t timeout 60 $W run matmul_forward_gelu $v --sizes B=$b,T=1024 --no-test-sizes --seeds 1 --no-torch --json $o/run-g$v-b$b.json > $o/run-g$v-b$b.txt 2>&1
done; done
t timeout 100 $W profile matmul_forward_gelu 14 15 --sizes B=16,T=1024 --json $o/prof-g.json > $o/prof-g.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 50 -v 0 -s 0"
tr warm_b16 $W train $S -b 16
for b in 16 32; do
  tr P_b${b}_1 $W train $S -b $b
  tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps 50
  tr P_b${b}_2 $W train $S -b $b
done
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
( t timeout 250 $P tests/test_gpu.py -k "matmul_backward_dgelu or matmul_forward_gelu" > $o/gpu_versions.txt 2>&1 ) &
( [ $SECONDS -lt 420 ] && t timeout 80 env PYTHONPATH="$PP" python3 scratch/s18/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1 ) &
wait
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; grep -a -h "runs clean\|not clean" $o/sanitize-*.txt
for f in $o/run-g*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-90)"; done; grep -a "check " $o/run-g15.txt | cut -c1-150
grep -a "duration\|SM throughput\|kernels" $o/prof-g.txt | cut -c1-150; grep -a "matmul_backward_dgelu\|matmul_forward_gelu\|average step" $o/prof-bf16-b32.txt | cut -c1-120
tail -n 1 $o/gpu_*.txt; cat $o/times.txt
cd $OUT && tar czf cC.tgz cC && rm -rf cC
