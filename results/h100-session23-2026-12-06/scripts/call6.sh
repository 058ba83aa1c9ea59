#!/usr/bin/env bash
# session 23, call 6 (H100): after build_plan's ops/touched were hoisted out of its three branches
# (workbench/launch.py): the GPU tests that run the side stream (it orders launches by them) and
# the new family's GPU checks.
set -u
o=$OUT/c6; mkdir -p $o
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 200"
timeout 210 $P tests/test_gpu_train.py -k "recompute or qkv_bias" > $o/gpu_train.txt 2>&1
timeout 100 $P tests/test_gpu.py -k "qkv_bias or dgelu" > $o/gpu_versions.txt 2>&1
for f in $o/*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -5; tail -n 1 $f; done
