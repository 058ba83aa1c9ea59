#!/usr/bin/env bash
set -u
export WORKBENCH_COMMIT=$(cat scratch/commit)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > $OUT/gpu.txt
bash scratch/next/call_fwd15.sh
mkdir -p $OUT/dg
for v in 5 3; do timeout 150 python3 scratch/s11/dgelu_probe.py $v 16 > $OUT/dg/probe$v.txt 2>&1; done
cat $OUT/dg/probe*.txt
cd $OUT && tar czf dg.tgz dg && rm -rf dg
