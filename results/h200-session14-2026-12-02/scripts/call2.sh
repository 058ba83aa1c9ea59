#!/usr/bin/env bash
# session 14, call 2 (H200): per-kernel bench of the two new versions at B=16; with dgelu 7 promoted,
# upper bounds of the step's gain from removing bias calls (WB_SKIP drops them: timing only, the
# gradients are then wrong); the GPU's busy share and its idle gaps in the step; PyTorch in the call.
set -u
o=$OUT/c2; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 150 $W bench matmul_backward_dgelu --sizes B=16,T=1024 --no-torch --no-test-sizes --json $o/bench-dgelu.json > $o/bench-dgelu.txt 2>&1
t timeout 150 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-torch --no-test-sizes --json $o/bench-gelu.json > $o/bench-gelu.txt 2>&1
wait
t timeout 120 $W promote matmul_backward_dgelu 7 > $o/promote.txt 2>&1
python3 scratch/s14/skip_patch.py
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
for r in 1 2; do
  tr none${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
  WB_SKIP='(attproj|fcproj) bias$' tr projbias${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
  WB_SKIP='bias$' tr allbias${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
done
t timeout 120 python3 scratch/s14/prof_gaps.py -b 16 > $o/gaps-b16.txt 2>&1
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
git checkout train/model.py
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt
grep -a "matmul_\|copy" $o/bench-*.txt | cut -c1-200 | tail -24
head -40 $o/gaps-b16.txt | cut -c1-200
cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
