#!/usr/bin/env bash
# session 15, call 2 (the maps now in device memory; call 1's by-value maps reached the kernel as zeros)
# was call 1 (H200): matmul_forward_gelu 7 (own TMA + wgmma GEMM, GELU epilogue) and its
# 128x256 variant (scratch, as 8): checked, timed at B=16 beside 5 and 6, sanitizers; then the trainer
# at B=16 / B=32 with the promoted set (A) and with 7 promoted (G), interleaved; PyTorch in the call.
set -u
o=$OUT/c2; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
cp scratch/s15/8_bn256.cu kernels/matmul_forward_gelu/8_bn256.cu
(cd scratch/s15/dbg && timeout 60 python3 dbg.py) > $o/dbg.txt 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
if [ "$(grep -c 'nan 0 of' $o/dbg.txt)" != 2 ]; then echo "dbg failed: skipping the rest" >> $o/times.txt; grep -a -v Warn $o/dbg.txt | tail -20; cd $OUT && tar czf c2.tgz c2; exit 0; fi
t timeout 120 $W run matmul_forward_gelu 7 --json $o/run-g7.json > $o/run-g7.txt 2>&1
t timeout 200 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
t timeout 250 $W sanitize matmul_forward_gelu 7 --timeout 200 > $o/sanitize-g7.txt 2>&1
wait
rm -f kernels/matmul_forward_gelu/8_bn256.cu
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
cp -r train/kernels /tmp/kA
if t timeout 120 $W promote matmul_forward_gelu 7 > $o/promote.txt 2>&1; then
  cp -r train/kernels /tmp/kG
  use() { rm -rf train/kernels && cp -r /tmp/k$1 train/kernels; }
  for r in 1 2; do for k in A G; do use $k; tr ${k}${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0; done; done
  tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
  for k in A G; do use $k; tr ${k}_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0; done
  tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
  use A
fi
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
grep -a -v Warn $o/dbg.txt | tail -12; cat $o/summary.txt; grep -a -h "clean\|finding\|error" $o/sanitize-*.txt | tail -8
grep -a -h "│\|passed\|FAIL\|fail\|rror" $o/run-g*.txt $o/bench-g-b16.txt | cut -c1-220 | tail -60
grep -a "promoted\|rror" $o/promote.txt | cut -c1-200
cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
