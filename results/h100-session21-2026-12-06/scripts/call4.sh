#!/usr/bin/env bash
# session 21, call 4 (H100): call 3 ran on a slower machine (PyTorch 73.6 ms at B=32 against call
# 2's 72.3) and left two changes tangled: matmul_forward_gelu 5 promoted over 14, and the side
# stream. A/B on one machine: the trainer with 14 (ab/k14: HEAD's manifest and frozen copies) and
# with 5 (ab/k5: call 3's promotion), interleaved, side stream on; then each with --one-stream.
set -u
o=$OUT/c4; mkdir -p $o/train; S_DIR=results/h100-session21-2026-12-06/scripts; A=results/h100-session21-2026-12-06/ab
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
k5() { cp $A/k5/* train/kernels/; rm -f train/kernels/matmul_forward_gelu.bf16.fallback.cu; }
k14() { cp $A/k14/* train/kernels/; }
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 100 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
k5; tr warm $W train $S --steps 10
for i in 1 2; do k14; tr k14_side_$i $W train $S; k5; tr k5_side_$i $W train $S; done
k14; tr k14_one $W train $S --one-stream; k5; tr k5_one $W train $S --one-stream
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); print(os.path.basename(f)[:-5], round(j.get("median_ms") or 0, 2), j.get("median_mfu"))
PY
cat $o/summary.txt; grep -a "matmul_forward_gelu" $o/train-log.txt | sort | uniq -c | cut -c1-150; cat $o/times.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
