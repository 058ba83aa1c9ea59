#!/usr/bin/env bash
# session 14, call 3 (H200): layernorm_backward_proj_bias 1-3 checked and timed (default sizes and B=16),
# layernorm_backward 12 after its body moved to a header (checked, timed), memcheck + racecheck of the
# new bf16 versions and of 12; the trainer at B=16 and B=32: the promoted set (A), + proj_bias 2 (L2),
# + proj_bias 3 (L3), + proj_bias 3 and matmul_backward_dgelu 7 (L3D), interleaved; PyTorch in the call.
set -u
o=$OUT/c3; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 150 $W bench layernorm_backward_proj_bias --json $o/bench-lnpb.json > $o/bench-lnpb.txt 2>&1
t timeout 150 $W bench layernorm_backward_proj_bias --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-lnpb-b16.json > $o/bench-lnpb-b16.txt 2>&1
t timeout 100 $W run layernorm_backward 12 --json $o/run-ln12.json > $o/run-ln12.txt 2>&1
t timeout 100 $W run layernorm_backward 12 --sizes B=16,T=1024 --no-test-sizes --no-torch > $o/run-ln12-b16.txt 2>&1
t timeout 100 $W run matmul_backward_bias 8 --sizes B=16,T=1024,OC=768 --no-test-sizes --no-torch > $o/run-bias8-b16.txt 2>&1
t timeout 200 $W sanitize layernorm_backward_proj_bias 2 3 --tool memcheck --tool racecheck --parallel 4 --timeout 150 > $o/sanitize-lnpb.txt 2>&1
t timeout 200 $W sanitize layernorm_backward 12 --tool memcheck --tool racecheck --timeout 150 > $o/sanitize-ln12.txt 2>&1
wait
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
cp -r train/kernels /tmp/kA
t timeout 120 $W promote layernorm_backward_proj_bias 2 > $o/promote.txt 2>&1; cp -r train/kernels /tmp/kL2
t timeout 120 $W promote layernorm_backward_proj_bias 3 >> $o/promote.txt 2>&1; cp -r train/kernels /tmp/kL3
t timeout 120 $W promote matmul_backward_dgelu 7 >> $o/promote.txt 2>&1; cp -r train/kernels /tmp/kL3D
tar czf $o/promoted-L3.tgz -C /tmp kL3 kL3D kL2
use() { rm -rf train/kernels && cp -r /tmp/k$1 train/kernels; }
for r in 1 2; do
  for k in A L2 L3 L3D; do use $k; tr ${k}${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0; done
done
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
for k in A L3 L3D; do use $k; tr ${k}_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0; done
tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
use A
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt; grep -a -h "runs clean\|finding" $o/sanitize-*.txt | tail -6
grep -a -h "│ [0-9]* │\|passed\|FAIL\|fail" $o/bench-lnpb*.txt $o/run-*.txt | cut -c1-200 | tail -40
grep -a "promoted\|rror" $o/promote.txt | cut -c1-200
grep -a "fused\|fuse" $o/train-log.txt | sort | uniq -c | cut -c1-200
cat $o/times.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
