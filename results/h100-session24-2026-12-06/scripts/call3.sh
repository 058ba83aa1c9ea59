#!/usr/bin/env bash
# NOT RUN in session 24 (the device time ran out before a machine started); ready for the next session.
# It first re-checks and sanitizes the four versions fadd21d changed (about 2 minutes).
# session 24, call 3 (H100): the power picture of both trainers. nvidia-smi logs the SM clock, power and
# throttle reasons every 100 ms while PyTorch's and our bf16 trainer run at B=32 (ours: this
# tree's promoted set); each run's window is marked so its samples can be told apart. Then, under the same
# log, the two MLP GEMMs' cuBLASLt fallbacks in the step's place (manifests made here from HEAD's, with
# matmul_forward_gelu's entry replaced by its fallback, version 5, or matmul_backward_dgelu's by version
# 7; the frozen fallback files are already in train/kernels), interleaved with HEAD's: is a kernel of our own that is faster alone also faster at the
# power cap?
set -u
o=$OUT; J=/tmp/c3train; mkdir -p $J; S_DIR=results/h100-session24-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
# the raw logs sit at $OUT's top (at most 8 files come back), so a run cut short still returns them
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $J/prepro.txt 2>&1
# first, the versions session 24 changed on the CPU (fadd21d: column_parts.cuh's eight-column warp sums)
# checked at their test sizes with 3 seeds, and sanitized, while nothing else runs
for fv in "matmul_backward_bias 8" "matmul_backward_bias 9" "qkv_bias_backward 2" "qkv_bias_backward 3"; do
  n=${fv// /-}; t timeout 120 $W run $fv --seeds 3 --budget 0.5 --json $J/run-$n.json > $J/run-$n.txt 2>&1
  t timeout 200 $W sanitize $fv --json $J/sanitize-$n.json > $J/sanitize-$n.txt 2>&1
done
grep -h "check " $J/run-*.txt > $o/checks.txt; grep -h "clean\|hazard\|error" $J/sanitize-*.txt | head -40 >> $o/checks.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > $o/smi.csv 2>&1 &
smi=$!
tr() { local name=$1; shift; echo "$name start $(date +%s.%N)" >> $o/marks.txt; echo "=== $name: $*" >> $o/train-log.txt
       t timeout 120 "$@" --json $J/$name.json >> $o/train-log.txt 2>&1; echo "$name end $(date +%s.%N)" >> $o/marks.txt; sleep 2; }
tr warm $W train --precision bf16 --steps 12 -v 0 -s 0 -b 32
tr ours_b32 $W train --precision bf16 --steps 60 -v 0 -s 0 -b 32
tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 40
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
for i in 1 2; do
  use /tmp/manifest_fg5.json; tr fg5_$i $W train --precision bf16 --steps 60 -v 0 -s 0 -b 32
  use /tmp/manifest_dg7.json; tr dg7_$i $W train --precision bf16 --steps 60 -v 0 -s 0 -b 32
  use /tmp/head.json; tr head_$i $W train --precision bf16 --steps 60 -v 0 -s 0 -b 32
done
kill $smi
python3 - $o $J > $o/power.txt 2>&1 <<'PY'
import sys, json, statistics as st, datetime as dt
o = sys.argv[1]
marks = {}
for line in open(f"{o}/marks.txt"):
    n, what, ts = line.split(); marks.setdefault(n, {})[what] = float(ts)
rows = []
for line in open(f"{o}/smi.csv"):
    p = [x.strip() for x in line.split(",")]
    try:
        ts = dt.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((ts, float(p[1].split()[0]), float(p[2].split()[0]), int(p[3], 16)))
    except Exception:
        pass
off = 0.0  # nvidia-smi prints local time; the machine runs UTC
for n, m in marks.items():
    if "end" not in m: continue
    busy = [r for r in rows if m["start"] + off <= r[0] <= m["end"] + off and r[2] > 300]
    try: ms = json.load(open(f"{sys.argv[2]}/{n}.json"))["median_ms"]
    except Exception: ms = None
    if not busy: print(n, "no busy samples"); continue
    pw = st.median(r[2] for r in busy); ck = st.median(r[1] for r in busy)
    capped = sum(1 for r in busy if r[3] & 0x4) / len(busy)
    e = f"{pw * ms / 1e3:.1f} J a step" if ms else "-"
    print(f"{n:10s} step {ms} ms  samples {len(busy):3d}  power median {pw:.0f} W  SM clock median {ck:.0f} MHz  "
          f"power-capped {100 * capped:.0f}% of samples  ~{e}")
PY
cat $o/power.txt; cat $o/times.txt
tar czf $OUT/train.tgz -C /tmp c3train  # the trainer JSONs, the runs and the sanitizer tables
