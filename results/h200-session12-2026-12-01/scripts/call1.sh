#!/usr/bin/env bash
# session 12, call 1 (H200): the baseline at HEAD: attention 15 vs cuDNN at the trainer's shape,
# the bf16 step's kernel profile at B=16 and B=32, the trainer against PyTorch (B=16, B=32, TF32 B=4)
set -u
o=$OUT/c1; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=150
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for v in 9 15 9 15; do t timeout 100 $W run attention_forward $v $A > $o/fwd-$v-$SECONDS.txt 2>&1; done
for v in 9 15; do t timeout 100 $W run attention_backward $v $A > $o/bwd-$v-$SECONDS.txt 2>&1; done
wait
t timeout 120 env PYTHONPATH="$PP" python3 scratch/s10/prof_train.py -b 16 > $o/prof-bf16-b16.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=30
tr ours_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
tr ours_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
tr flash_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0 --attention flash
tr ours_b16_2 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
[ $SECONDS -lt 330 ] && t timeout 150 env PYTHONPATH="$PP" python3 scratch/s10/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
[ $SECONDS -lt 400 ] && tr ours_tf32_b4 $W train -b 4 --steps $S -v 0 -s 0
[ $SECONDS -lt 400 ] && tr torch_tf32_b4 python3 -m train.torch_baseline -b 4 --steps $S
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:20s} {d.get('median_ms')} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
for f in $o/fwd-*.txt $o/bwd-*.txt; do echo "$f: $(grep -h '^best\|check ' $f | tail -2 | tr '\n' ' ')"; done
cat $o/summary.txt; tail -20 $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
