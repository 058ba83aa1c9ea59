#!/usr/bin/env bash
# session 14, call 1 (H200): matmul_backward_dgelu 7 and matmul_forward_gelu 6 (plain tuned GEMMs,
# the GELU's work in a pass of our own): bench at B=16 (all versions checked and timed), memcheck and
# racecheck; the trainer at B=16 and B=32 with the promoted set (A), dgelu 7 promoted (B), and dgelu 7 +
# forward 6 (C), interleaved; PyTorch in the call.
set -u
o=$OUT/c1; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty COLUMNS=160
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 150 $W bench matmul_backward_dgelu matmul_forward_gelu --sizes B=16,T=1024 --no-torch --json $o/bench.json > $o/bench.txt 2>&1
t timeout 150 $W sanitize matmul_backward_dgelu 7 --tool memcheck --tool racecheck --timeout 100 > $o/sanitize-dgelu7.txt 2>&1
t timeout 150 $W sanitize matmul_forward_gelu 6 --tool memcheck --tool racecheck --timeout 100 > $o/sanitize-gelu6.txt 2>&1
wait
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
cp -r train/kernels /tmp/kA
t timeout 120 $W promote matmul_backward_dgelu 7 > $o/promote.txt 2>&1
cp -r train/kernels /tmp/kB
t timeout 120 $W promote matmul_forward_gelu 6 >> $o/promote.txt 2>&1
cp -r train/kernels /tmp/kC
tar czf $o/promoted.tgz train/kernels
use() { rm -rf train/kernels && cp -r /tmp/k$1 train/kernels; }
for b in 16 32; do
  for r in 1 2; do
    for k in A B C; do use $k; tr ${k}${r}_b$b $W train --precision bf16 -b $b --steps $S -v 0 -s 0; done
  done
  tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps $S
done
use A
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt; grep -a -i "clean\|finding\|error" $o/sanitize-*.txt | tail -8
grep -a "matmul_" $o/bench.txt | cut -c1-170 | tail -30
tail -4 $o/promote.txt
cp ~/.cache/workbench/gemm_tune.json $o/ 2>/dev/null
cat $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
