#!/usr/bin/env bash
set -u
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty
o=$OUT/c6; mkdir -p $o/train
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"; export COLUMNS=150
cp scratch/s11/16_split_s.cu kernels/attention_forward/16_split_s.cu
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for v in 9 15 16 9 15 16; do t timeout 100 $W run attention_forward $v $A > $o/fwd-$v-$SECONDS.txt 2>&1; grep -h "check \|^best" $o/fwd-$v-*.txt | tail -2 | sed "s/^/v$v /"; done
rm kernels/attention_forward/16_split_s.cu
t timeout 200 $W sanitize attention_forward 15 --tool memcheck --tool racecheck > $o/san15.txt 2>&1; tail -2 $o/san15.txt
t timeout 300 $W promote attention_forward 15 > $o/promote15.txt 2>&1; tail -5 $o/promote15.txt
tar czf $o/promoted.tgz train/kernels/attention_forward.bf16*.cu train/kernels/manifest.json
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=30
tr flash_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0 --attention flash
tr cudnn_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0 --attention cudnn
[ $SECONDS -lt 300 ] && tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
tr flash_b16_2 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0 --attention flash
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:28s} {d.get('median_ms'):8.2f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt; cat $o/times.txt | tail -8
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
