#!/usr/bin/env bash
# session 14, call 4 (H200): the whole GPU suite at the committed, promoted set (two processes side by
# side: every version checked; the trainer, loop, profile, ...), the four sanitizers on
# layernorm_backward_proj_bias and its bench (the torch row in fp32 sums); then the trainer at B=16
# twice and B=32 once against PyTorch in the same call.
set -u
o=$OUT/c4; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=160
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240 --durations=15"
( t timeout 360 $P tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
( t timeout 360 $P tests --deselect tests/test_gpu.py --ignore tests/test_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 200 $W sanitize layernorm_backward_proj_bias --parallel 4 --timeout 150 > $o/sanitize-lnpb.txt 2>&1 ) &
wait
t timeout 60 $W bench layernorm_backward_proj_bias --json $o/bench-lnpb.json > $o/bench-lnpb.txt 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 )
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 100 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
tr ours1_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
tr ours2_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
tr ours_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
tail -4 $o/gpu_versions.txt; tail -25 $o/gpu_rest.txt | cut -c1-220
grep -a -h "runs clean\|not clean\|finding" $o/sanitize-lnpb.txt | tail -4
grep -a -h "│ [0-9] │\|torch" $o/bench-lnpb.txt | cut -c1-200 | tail -12
cat $o/summary.txt; cat $o/times.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
