#!/usr/bin/env bash
# session 15, call 5: versions 7 (refactored onto the cluster-aware ring) and 8 (pairs sharing B by multicast)
# was call 3 (H200): matmul_forward_gelu 7 with the staged, coalesced epilogue: main loop alone
# against the whole kernel (time7.py), check, bench at B=16 beside 5, four sanitizers, the tensor-map
# GPU test; the trainer against the promoted set only if 7 beats 5 alone.
set -u
o=$OUT/c5; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 120 $W run matmul_forward_gelu 7 --json $o/run-g7.json > $o/run-g7.txt 2>&1
t timeout 120 $W run matmul_forward_gelu 8 --json $o/run-g8.json > $o/run-g8.txt 2>&1
t timeout 200 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
t timeout 150 $W sanitize matmul_forward_gelu 8 --timeout 120 > $o/sanitize-g8.txt 2>&1
t timeout 150 $W sanitize matmul_forward_gelu 7 --timeout 120 > $o/sanitize-g7.txt 2>&1
wait
faster=$(python3 - $o/bench-g-b16.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); b = {v["version"]: (v.get("best") or {}).get("median_us") for f in d["families"] for v in f["versions"]}
best = min((v for v in (7, 8) if b.get(v)), key=lambda v: b[v], default=None)
print(best if best and b.get(5) and b[best] < b[5] else 0)
PY
)
echo "faster=$faster" >> $o/times.txt
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
if [ "$faster" != 0 ]; then
  cp -r train/kernels /tmp/kA
  if t timeout 120 $W promote matmul_forward_gelu $faster > $o/promote.txt 2>&1; then
    cp -r train/kernels /tmp/kG
    use() { rm -rf train/kernels && cp -r /tmp/k$1 train/kernels; }
    for r in 1 2; do for k in A G; do use $k; tr ${k}${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0; done; done
    tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
    for k in A G; do use $k; tr ${k}_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0; done
    tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
    use A
  fi
fi
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt; grep -a -h "runs clean" $o/sanitize-*.txt | tail -2; 
grep -a -h "check \|│ [578] │\|failed" $o/run-g*.txt $o/bench-g-b16.txt | cut -c1-220 | tail -12
cat $o/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
