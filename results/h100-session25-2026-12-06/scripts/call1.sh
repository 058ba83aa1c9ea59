#!/usr/bin/env bash
# session 25, call 1 (H100), session 24's prepared call 3 grown:
# 1. the four versions fadd21d changed (matmul_backward_bias 8, 9, qkv_bias_backward 2, 3) checked and sanitized;
# 2. under an nvidia-smi log (100 ms), B=32 bf16 trainer runs interleaved: this tree's promoted set
#    (`head`), the same with cuBLASLt's algorithms picked under sustained load (`sus`: sustained.py, a
#    cache dir of its own), and the two MLP GEMMs' cuBLASLt fallbacks in the step (matmul_forward_gelu 5:
#    `fg5`, matmul_backward_dgelu 7: `dg7`), and matmul_forward_gelu 16 (14 in pairs sharing the weight's tiles by multicast, a quarter
#    fewer L2 bytes a FLOP: `fg16`); PyTorch's baseline beside; power, clock and energy a step.
set -u
o=$OUT; J=/tmp/c1; mkdir -p $J; S_DIR=results/h100-session25-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
start=$(date +%s); left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $J/prepro.txt 2>&1
# first, the four versions fadd21d changed on the CPU (column_parts.cuh's eight-column warp sums),
# checked at their test sizes with 3 seeds and sanitized, while nothing else runs
for fv in "matmul_backward_bias 8" "matmul_backward_bias 9" "qkv_bias_backward 2" "qkv_bias_backward 3"; do
  n=${fv// /-}; t timeout 120 $W run $fv --seeds 3 --budget 0.5 --json $J/run-$n.json > $J/run-$n.txt 2>&1
  t timeout 200 $W sanitize $fv --json $J/sanitize-$n.json > $J/sanitize-$n.txt 2>&1
done
grep -h "check \|passed\|FAIL" $J/run-*.txt > $o/checks.txt; grep -h "clean\|hazard\|error" $J/sanitize-*.txt | head -40 >> $o/checks.txt
cp train/kernels/manifest.json /tmp/head.json
python3 - <<'PY'
import copy, json
m = json.load(open("/tmp/head.json"))
for name, key in (("fg5", "matmul_forward_gelu.bf16"), ("dg7", "matmul_backward_dgelu.bf16")):
    alt = copy.deepcopy(m)
    alt["kernels"][key] = alt["kernels"][key]["fallback"]
    json.dump(alt, open(f"/tmp/manifest_{name}.json", "w"), indent=2)
PY
use() { cp $1 train/kernels/manifest.json; }
cp -r train/kernels /tmp/head_kernels
t env PYTHONPATH=$PP python3 $S_DIR/alt_kernels.py /tmp/alt_fg16 matmul_forward_gelu 16 > $J/alt.txt 2>&1
usedir() { rm -rf train/kernels; cp -r $1 train/kernels; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active,temperature.gpu --format=csv,noheader -lms 100 > $o/smi.csv 2>&1 &
smi=$!
tr() { local name=$1; shift; echo "$name start $(date +%s.%N)" >> $o/marks.txt; echo "=== $name: $*" >> $J/train-log.txt
       t timeout 240 "$@" --json $J/$name.json >> $J/train-log.txt 2>&1; echo "$name end $(date +%s.%N)" >> $o/marks.txt; sleep 2; }
S="--precision bf16 -v 0 -s 0 -b 32"
tr warm $W train $S --steps 12
mkdir -p /tmp/cache_sus; cp -r ~/.cache/workbench/cubin /tmp/cache_sus/ 2>/dev/null
SUS="env WORKBENCH_CACHE=/tmp/cache_sus PYTHONPATH=$PP python3 $S_DIR/sustained.py"
tr sus_warm $SUS train $S --steps 12
cp /tmp/cache_sus/gemm_tune.json $J/gemm_tune_sus.json; cp ~/.cache/workbench/gemm_tune.json $J/gemm_tune_burst.json
for i in 1 2; do
  [ $i = 2 ] && { tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 40; left 470 || break; }
  tr head_$i $W train $S --steps 60
  tr sus_$i $SUS train $S --steps 60
  use /tmp/manifest_fg5.json; tr fg5_$i $W train $S --steps 60
  use /tmp/manifest_dg7.json; tr dg7_$i $W train $S --steps 60
  use /tmp/head.json
  usedir /tmp/alt_fg16; tr fg16_$i $W train $S --steps 60
  usedir /tmp/head_kernels
done
left 530 && tr head_3 $W train $S --steps 60
kill $smi
python3 - $o $J > $o/power.txt 2>&1 <<'PY'
import sys, json, statistics as st, datetime as dt
o, J = sys.argv[1], sys.argv[2]
marks = {}
for line in open(f"{o}/marks.txt"):
    n, what, ts = line.split(); marks.setdefault(n, {})[what] = float(ts)
rows = []
for line in open(f"{o}/smi.csv"):
    p = [x.strip() for x in line.split(",")]
    try:
        ts = dt.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((ts, float(p[1].split()[0]), float(p[2].split()[0]), int(p[3], 16), float(p[4])))
    except Exception:
        pass
for n, m in marks.items():
    if "end" not in m: continue
    busy = [r for r in rows if m["start"] <= r[0] <= m["end"] and r[2] > 300]
    try: ms = json.load(open(f"{J}/{n}.json"))["median_ms"]
    except Exception: ms = None
    if not busy: print(n, ms, "no busy samples"); continue
    pw = st.median(r[2] for r in busy); ck = st.median(r[1] for r in busy)
    capped = sum(1 for r in busy if r[3] & 0x4) / len(busy)
    e = f"{pw * ms / 1e3:.1f} J a step" if ms else "-"
    print(f"{n:10s} step {ms} ms  samples {len(busy):3d}  power median {pw:.0f} W  SM clock median {ck:.0f} MHz  "
          f"capped {100 * capped:.0f}%  temp {st.median(r[4] for r in busy):.0f} C  ~{e}")
PY
python3 - $J > $o/tune.txt 2>&1 <<'PY'
import sys, json
J = sys.argv[1]
sus = json.load(open(f"{J}/gemm_tune_sus.json")); burst = json.load(open(f"{J}/gemm_tune_burst.json"))
for dev, keys in sus.items():
    b = burst.get(dev, {})
    for k, e in sorted(keys.items()):
        bp = b.get(k, {}).get("pick")
        su, bu = e["median_us"], e["burst_us"]
        print(f"{k}\n   sustained pick {e['pick']} ({su[str(e['pick'])]} us, {e['mj_per_launch'][str(e['pick'])]} mJ)"
              f"  burst pick here {e['burst_pick']} (sustained {su[str(e['burst_pick'])]} us, {e['mj_per_launch'][str(e['burst_pick'])]} mJ)"
              f"  the project's burst pick {bp}")
        print("   us sustained", su, "\n   us burst    ", bu, "\n   mJ", e["mj_per_launch"], "\n   MHz", e["sm_mhz"])
PY
cat $o/power.txt; cat $o/times.txt
gzip -c $J/train-log.txt > $o/train-log.txt.gz
tar czf $o/runs.tgz -C /tmp c1
