#!/usr/bin/env bash
# session 12, call 5 (H200, fresh machine): the final promoted set against PyTorch, same call
set -u
o=$OUT/c5; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty COLUMNS=150
W="python3 -m workbench"
python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > /dev/null 2>&1
timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
run1() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; timeout 100 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
run1 ours_b16 $W train --precision bf16 -b 16 --steps 30 -v 0 -s 0
run1 torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 30
run1 ours_b32 $W train --precision bf16 -b 32 --steps 30 -v 0 -s 0
[ $SECONDS -lt 110 ] && run1 torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
run1 ours_b16_2 $W train --precision bf16 -b 16 --steps 30 -v 0 -s 0
python3 - $o/train <<'PY' | tee $o/summary.txt
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
echo "seconds $SECONDS"
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
