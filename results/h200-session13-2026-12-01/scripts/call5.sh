#!/usr/bin/env bash
# session 13, call 5 (H200): matmul_backward_bias 9 (one launch, the last block of a stripe
# reduces): run (checks + timing against 8), the four sanitizers, promoted; the trainer at B=16
# with 8 and with 9, interleaved; PyTorch last
set -u
o=$OUT/c5; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty COLUMNS=150
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 60 $W bench matmul_backward_bias --no-torch --json $o/bench-bias.json > $o/bench-bias.txt 2>&1
t timeout 60 $W sanitize matmul_backward_bias 9 --parallel 8 --timeout 50 > $o/sanitize.txt 2>&1
wait
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 60 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=60
cp -r train/kernels /tmp/k8
tr a8_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
t timeout 60 $W promote matmul_backward_bias 9 > $o/promote.txt 2>&1
cp -r train/kernels /tmp/k9; tar czf $o/promoted9.tgz train/kernels
tr b9_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
rm -rf train/kernels && cp -r /tmp/k8 train/kernels
tr c8_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
rm -rf train/kernels && cp -r /tmp/k9 train/kernels
tr d9_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt; grep -a "clean\|finding" $o/sanitize.txt | tail -6; grep -a "matmul_backward_bias" $o/bench-bias.txt | tail -8 | cut -c1-160
tail -3 $o/promote.txt
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
cat $o/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
