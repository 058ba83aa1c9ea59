#!/usr/bin/env bash
# session 16, call 2 (H200): the copy-engine epilogue. matmul_forward_gelu 10 (one staging area)
# and 11 (two, three stages) and matmul_forward 9 (own GEMM, bias) checked; gelu's family benched at
# B=16; matmul_forward 8 against 9 at the trainer's four B=16 shapes; then the trainer with the
# promoted set (A), with the faster of gelu 10/11 promoted (G), and with matmul_forward 9 too (GF),
# interleaved, PyTorch in the same call.
set -u
o=$OUT/c2; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 90 $W run matmul_forward_gelu 10 --no-torch --json $o/run-g10.json > $o/run-g10.txt 2>&1
t timeout 90 $W run matmul_forward_gelu 11 --no-torch --json $o/run-g11.json > $o/run-g11.txt 2>&1
t timeout 90 $W run matmul_forward 9 --no-torch --json $o/run-f9.json > $o/run-f9.txt 2>&1
t timeout 150 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
for s in C=768,OC=2304 C=768,OC=768 C=3072,OC=768 C=768,OC=50304; do
  for v in 8 9; do t timeout 60 $W run matmul_forward $v --sizes B=16,T=1024,$s --no-test-sizes --seeds 1 --no-torch --json $o/run-f$v-$s.json > $o/run-f$v-$s.txt 2>&1; done
done
wait
best=$(python3 - $o/bench-g-b16.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); b = {v["version"]: (v.get("best") or {}).get("median_us") for f in d["families"] for v in f["versions"]}
best = min((v for v in (10, 11) if b.get(v)), key=lambda v: b[v], default=None)
print(best if best and b.get(5) and b[best] < b[5] else 0)
PY
)
echo "best gelu=$best" >> $o/times.txt
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 100 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
cp -r train/kernels /tmp/kA
sets="A"
if [ "$best" != 0 ] && t timeout 150 $W promote matmul_forward_gelu $best > $o/promote-g.txt 2>&1; then
  cp -r train/kernels /tmp/kG; sets="A G"
  if t timeout 200 $W promote matmul_forward 9 > $o/promote-f.txt 2>&1; then cp -r train/kernels /tmp/kGF; sets="A G GF"; fi
fi
use() { rm -rf train/kernels && cp -r /tmp/k$1 train/kernels; }
for r in 1 2; do for k in $sets; do use $k; tr ${k}${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0; done; done
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
for k in $sets; do use $k; tr ${k}_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0; done
tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
use A
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
grep -a -h "check \|failed\|FAIL\|rror" $o/run-g10.txt $o/run-g11.txt $o/run-f9.txt | cut -c1-200 | head -12
grep -a -h "│ [0-9]* │" $o/bench-g-b16.txt | cut -c1-200
for f in $o/run-f[89]-*.txt; do echo "$(basename $f): $(grep -a -o "│ [0-9.]* µs │ [0-9.]* µs-[0-9.]* µs" $f | head -1)"; done
grep -a -h "promot\|rror" $o/promote-*.txt 2>/dev/null | tail -6 | cut -c1-200
cat $o/summary.txt; cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
