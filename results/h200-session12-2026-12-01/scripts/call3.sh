#!/usr/bin/env bash
# session 12, call 3 (H200): the trainer with the next step launched behind the running one,
# against PyTorch in the same call (bf16 B=16, B=32; TF32 B=4); one replay traced again; which
# cuBLASLt algorithms put a memset before their kernel
set -u
o=$OUT/c3; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty COLUMNS=150
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 90 python3 scratch/s12/memset_probe.py > $o/memset_probe.txt 2>&1
t timeout 120 env PYTHONPATH="$PP" python3 scratch/s12/trace_train.py $o/trace-b16.json -b 16 > $o/trace-b16.txt 2>&1
rm -f $o/*.trace.json
run1() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=30
run1 ours_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
run1 torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
run1 ours_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
run1 torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
run1 ours_b16_2 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
run1 flash_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0 --attention flash
run1 ours_b32_2 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
[ $SECONDS -lt 380 ] && run1 ours_tf32_b4 $W train -b 4 --steps $S -v 0 -s 0
[ $SECONDS -lt 380 ] && run1 torch_tf32_b4 python3 -m train.torch_baseline -b 4 --steps $S
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:16s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}  host_us {d.get('median_host_us')}")
PY
head -12 $o/trace-b16.txt | grep -v "^step\|GPU memory\|average" ; cut -c1-400 $o/memset_probe.txt; cat $o/summary.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
