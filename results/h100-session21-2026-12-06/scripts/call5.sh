#!/usr/bin/env bash
# session 21, call 5 (H100): version 14 kept (call 4: 5 no faster in the trainer). Which side stream,
# if any: --one-stream, the weight-gradient GEMMs only (call 2's form: SIDE_CALLS emptied in a copy
# of train/streams.py), and the GEMMs with the bias gradients (the tree's), interleaved, three each.
set -u
o=$OUT/c5; mkdir -p $o/train; S_DIR=results/h100-session21-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
cp train/streams.py /tmp/streams_all.py
sed 's/^SIDE_CALLS = frozenset({"matmul_backward_bias"})/SIDE_CALLS = frozenset()/' /tmp/streams_all.py > /tmp/streams_gemm.py
grep -c "^SIDE_CALLS = frozenset()" /tmp/streams_gemm.py > $o/gemm_variant_check.txt
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 60 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
for i in 1 2 3; do
  tr one_$i $W train $S --one-stream
  cp /tmp/streams_gemm.py train/streams.py; tr gemm_$i $W train $S
  cp /tmp/streams_all.py train/streams.py; tr all_$i $W train $S
done
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); print(os.path.basename(f)[:-5], round(j.get("median_ms") or 0, 2))
PY
cat $o/summary.txt $o/gemm_variant_check.txt; cat $o/times.txt | cut -c1-60
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
