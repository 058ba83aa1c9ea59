#!/usr/bin/env bash
# session 16, call 3 (H200): ping-pong. matmul_forward_gelu 12 and matmul_forward 10 checked;
# gelu's family benched at B=16; matmul_forward 8 / 9 / 10 at the trainer's four B=16 shapes; the
# trainer with the promoted set (A), with the faster of gelu 10 / 12 promoted (G), and with
# matmul_forward 10 too (GF) if it beat 8 at qkv, interleaved, PyTorch in the same call; then the
# four sanitizers on gelu 10, 12 and matmul_forward 10 side by side. The promoted sets come back.
set -u
o=$OUT/c3; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 90 $W run matmul_forward_gelu 12 --no-torch --json $o/run-g12.json > $o/run-g12.txt 2>&1
t timeout 90 $W run matmul_forward 10 --no-torch --json $o/run-f10.json > $o/run-f10.txt 2>&1
t timeout 150 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
for s in C=768,OC=2304 C=768,OC=768 C=3072,OC=768 C=768,OC=50304; do
  for v in 8 10 9; do t timeout 60 $W run matmul_forward $v --sizes B=16,T=1024,$s --no-test-sizes --seeds 1 --no-torch --json $o/run-f$v-$s.json > $o/run-f$v-$s.txt 2>&1; done
done
wait
pick=$(python3 - $o <<'PY'
import json, sys, glob
o = sys.argv[1]
d = json.load(open(o + "/bench-g-b16.json")); b = {v["version"]: (v.get("best") or {}).get("median_us") for f in d["families"] for v in f["versions"]}
g = min((v for v in (10, 12) if b.get(v)), key=lambda v: b[v], default=0)
g = g if g and b.get(5) and b[g] < b[5] else 0
def us(v, s):
    try: return json.load(open(f"{o}/run-f{v}-{s}.json"))["families"][0]["versions"][0]["best"]["median_us"]
    except Exception: return None
f8, f10 = us(8, "C=768,OC=2304"), us(10, "C=768,OC=2304")
f = 10 if f8 and f10 and f10 < f8 else 0
print(g, f)
PY
)
read g f <<< "$pick"
echo "pick gelu=$g mf=$f" >> $o/times.txt
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 100 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=50
cp -r train/kernels /tmp/kA
sets="A"
if [ "$g" != 0 ] && t timeout 150 $W promote matmul_forward_gelu $g > $o/promote-g.txt 2>&1; then
  cp -r train/kernels /tmp/kG; sets="A G"
  if [ "$f" != 0 ] && t timeout 200 $W promote matmul_forward $f > $o/promote-f.txt 2>&1; then cp -r train/kernels /tmp/kGF; sets="A G GF"; fi
fi
use() { rm -rf train/kernels && cp -r /tmp/k$1 train/kernels; }
for r in 1 2; do for k in $sets; do use $k; tr ${k}${r}_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0; done; done
tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
for k in $sets; do use $k; tr ${k}_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0; done
tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
use A
for k in G GF; do [ -d /tmp/k$k ] && tar czf $OUT/kernels-$k.tgz -C /tmp/k$k . ; done
( t timeout 200 $W sanitize matmul_forward_gelu 12 --timeout 150 > $o/sanitize-g12.txt 2>&1 ) &
( t timeout 200 $W sanitize matmul_forward_gelu 10 --timeout 150 > $o/sanitize-g10.txt 2>&1 ) &
( t timeout 200 $W sanitize matmul_forward 10 --timeout 150 > $o/sanitize-f10.txt 2>&1 ) &
wait
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
grep -a -h "check \|failed\|FAIL\|rror" $o/run-g12.txt $o/run-f10.txt | cut -c1-200 | head -12
grep -a -h "│ *[0-9]* │" $o/bench-g-b16.txt | grep -v "│  *[12] │" | cut -c1-200
python3 - $o <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/run-f*-*.json")):
    try: b = json.load(open(f))["families"][0]["versions"][0]["best"]; print(os.path.basename(f), round(b["median_us"], 1))
    except Exception as e: print(os.path.basename(f), "ERR", e)
PY
grep -a -h "promoted" $o/promote-*.txt 2>/dev/null | cut -c1-200
grep -a -h "runs clean\|not clean\|finding\|rror" $o/sanitize-*.txt | tail -8 | cut -c1-200
cat $o/summary.txt; cat $o/times.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
