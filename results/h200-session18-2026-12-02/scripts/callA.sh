#!/usr/bin/env bash
# session 18, call A (H200): matmul_backward_dgelu 10 (batched epilogue loads) and matmul_forward_gelu 14
# (bias before the products): SASS of 8/10/12/14, checks, sanitizers, times beside 8 and 12 at B=16/32,
# then the trainer with each promoted (sets D, D10, D10G14) against PyTorch
set -u
o=$OUT/cA; mkdir -p $o/train $o/sass
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
( for n in d8 d10 g12 g14; do timeout 30 cuobjdump -sass scratch/s18/cubin/$n.cubin > $o/sass/$n.sass 2>&1; done; which cuobjdump nvdisasm > $o/sass/which.txt 2>&1 ) &
t timeout 120 $W run matmul_backward_dgelu 10 --no-torch --json $o/run-d10.json > $o/run-d10.txt 2>&1; D10=$?
t timeout 120 $W run matmul_forward_gelu 14 --no-torch --json $o/run-g14.json > $o/run-g14.txt 2>&1; G14=$?
( t timeout 150 $W sanitize matmul_backward_dgelu 10 --tool memcheck --tool initcheck --tool synccheck --timeout 120 > $o/sanitize-d10.txt 2>&1 ) &
( t timeout 150 $W sanitize matmul_forward_gelu 14 --timeout 120 > $o/sanitize-g14.txt 2>&1 ) &
wait
for b in 16 32; do
  for v in 8 10; do t timeout 60 $W run matmul_backward_dgelu $v --sizes B=$b,T=1024 --no-test-sizes --seeds 1 --no-torch --json $o/run-d$v-b$b.json > $o/run-d$v-b$b.txt 2>&1; done
  for v in 12 14; do t timeout 60 $W run matmul_forward_gelu $v --sizes B=$b,T=1024 --no-test-sizes --seeds 1 --no-torch --json $o/run-g$v-b$b.json > $o/run-g$v-b$b.txt 2>&1; done
done
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 50 -v 0 -s 0"
cp -r train/kernels /tmp/tk_D
[ $D10 = 0 ] && t timeout 120 $W promote matmul_backward_dgelu 10 > $o/promote-d10.txt 2>&1 && cp -r train/kernels /tmp/tk_D10
[ $D10 = 0 ] && [ $G14 = 0 ] && t timeout 120 $W promote matmul_forward_gelu 14 > $o/promote-g14.txt 2>&1 && cp -r train/kernels /tmp/tk_D10G14
use() { rm -rf train/kernels && cp -r /tmp/tk_$1 train/kernels; }
use D; tr warm_b16 $W train $S -b 16
for b in 16 32; do
  for set in D D10 D10G14; do [ $SECONDS -lt 540 ] && [ -d /tmp/tk_$set ] && use $set && tr ${set}_b$b $W train $S -b $b; done
  [ $SECONDS -lt 550 ] && tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps 50
done
use D
[ -d /tmp/tk_D10G14 ] && (cd /tmp && tar czf $o/tk_D10G14.tgz -C /tmp/tk_D10G14 .)
[ -d /tmp/tk_D10 ] && (cd /tmp && tar czf $o/tk_D10.tgz -C /tmp/tk_D10 .)
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; grep -a -h "runs clean\|not clean" $o/sanitize-*.txt
grep -a -h "check \|best:" $o/run-*.txt | cut -c1-150; cat $o/times.txt
cd $OUT && tar czf cA.tgz cA && rm -rf cA
