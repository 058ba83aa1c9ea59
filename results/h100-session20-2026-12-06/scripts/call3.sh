#!/usr/bin/env bash
# session 20, call 3 (H100): the pairs with the remote arrive at the block's scope (no cluster-wide
# MEMBAR): matmul_forward_gelu 16 and matmul_backward_dgelu 11 checked, sanitized, timed at B=32 and
# B=16 against 14 / 10; each promoted where it passes and beats its incumbent at both sizes; then the
# trainer's bf16 B=32 (twice) and B=16 against PyTorch in this call.
set -u
o=$OUT/c3; mkdir -p $o/train; S_DIR=results/h100-session20-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
nvcc -arch=sm_90a -cubin -o /tmp/fg16.cubin -Ikernels/common -Ikernels/matmul_forward_gelu kernels/matmul_forward_gelu/16_pingpong_pairs_multicast.cu
cuobjdump -sass /tmp/fg16.cubin | grep -c MEMBAR > $o/membar-count.txt 2>&1
for fv in "matmul_forward_gelu 16" "matmul_backward_dgelu 11"; do
  set -- $fv
  t timeout 150 $W run $1 $2 --no-torch --json $o/check-$1-$2.json > $o/check-$1-$2.txt 2>&1; echo "$1 $2 check rc=$?" >> $o/status.txt
  t timeout 200 $W sanitize $1 $2 --timeout 150 > $o/sanitize-$1-$2.txt 2>&1; echo "$1 $2 sanitize rc=$?" >> $o/status.txt
done
wait
Q="--no-test-sizes --seeds 1 --no-torch --budget 1.0"
for b in 32 16; do
  for v in 14 16; do t timeout 90 $W run matmul_forward_gelu $v --sizes B=$b,T=1024 $Q --json $o/run-fg-$v-b$b.json > $o/run-fg-$v-b$b.txt 2>&1; done
  for v in 10 11; do t timeout 90 $W run matmul_backward_dgelu $v --sizes B=$b,T=1024 $Q --json $o/run-dg-$v-b$b.json > $o/run-dg-$v-b$b.txt 2>&1; done
done
python3 - $o > $o/verdict.txt 2>&1 <<'PY'
import json, sys, os
o = sys.argv[1]
def med(n):
    try:
        v = json.load(open(f"{o}/run-{n}.json"))["families"][0]["versions"][0]
        return list(v["timings"].values())[0]["median_us"] if v["status"] == "passed" else None
    except Exception as e:
        return None
status = open(o + "/status.txt").read()
for fam, short, new, old in (("matmul_forward_gelu", "fg", 16, 14), ("matmul_backward_dgelu", "dg", 11, 10)):
    t = {(v, b): med(f"{short}-{v}-b{b}") for v in (new, old) for b in (32, 16)}
    print(fam, {f"{v}@B{b}": (round(x, 1) if x else x) for (v, b), x in t.items()})
    ok = f"{fam} {new} check rc=0" in status and all(t[(new, b)] and t[(old, b)] and t[(new, b)] < t[(old, b)] for b in (32, 16))
    print(f"PROMOTE {fam} {new}" if ok else f"KEEP {fam} {old}")
PY
cat $o/verdict.txt $o/status.txt $o/membar-count.txt
for fv in $(grep PROMOTE $o/verdict.txt | awk '{print $2 ":" $3}'); do
  t timeout 120 $W promote ${fv%%:*} ${fv##*:} >> $o/promote.txt 2>&1
done
if grep -q PROMOTE $o/verdict.txt; then
  tar czf $o/train-kernels.tgz train/kernels/matmul_forward_gelu* train/kernels/matmul_backward_dgelu* train/kernels/manifest.json
  tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
  S="--precision bf16 --steps 50 -v 0 -s 0"
  tr warm $W train $S -b 32
  tr P_b32_1 $W train $S -b 32
  tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
  tr P_b32_2 $W train $S -b 32
  tr P_b16_1 $W train $S -b 16
  tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 50
  python3 - $o/train > $o/train-summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); print(os.path.basename(f)[:-5], j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
  cat $o/train-summary.txt; tail -n 4 $o/promote.txt
fi
grep -a -h "check \|clean\|failed" $o/check-*.txt $o/sanitize-*.txt | cut -c1-150
cat $o/times.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
