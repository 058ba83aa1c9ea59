#!/usr/bin/env bash
# session 20, call 2 (H100): why matmul_forward_gelu 16 (pairs) is 1.7x slower than 14: both under
# Nsight Compute at B=16; cuBLASLt's (5) against 14 at B=16; the bf16 B=32 step's per-kernel profile.
set -u
o=$OUT/c2; mkdir -p $o; S_DIR=results/h100-session20-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=200
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 200 $W profile matmul_forward_gelu 14 16 --sizes B=16,T=1024 --json $o/prof-fg.json > $o/prof-fg.txt 2>&1
for i in 1 2; do for v in 5 14; do
  t timeout 90 $W run matmul_forward_gelu $v --sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0 --json $o/run-fg-$v-b16-$i.json > $o/run-fg-$v-b16-$i.txt 2>&1
done; done
wait
t timeout 200 env PYTHONPATH="$PP" PROF_STEPS=30 python3 $S_DIR/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-100)"; done
cat $o/prof-fg.txt | cut -c1-200 | head -60
grep -a " ms " $o/prof-bf16-b32.txt | head -45
cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
