#!/usr/bin/env bash
# session 6, call 2: bench --all first on a fresh machine (torch warm-ups, numpy.ma, ln4 without cg); watch; sanitize ln4; torch first calls; GPU loop tests; the device's site-packages compiled
set -u
o=$OUT/c14; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 260 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
t timeout 30 $W compare results/h100-session5-2026-11-27/call8-bench-all-dd677cf-h100.json $o/bench-all.json > $o/compare-dd677cf.txt 2>&1
t timeout 120 python3 scratch/watch_timing.py /tmp/wt > $o/watch.txt 2>&1
python3 - > /tmp/ln4.cu <<'P'
import sys; sys.path.insert(0,'.')
from workbench import compile as c; from pathlib import Path
print(c.source_for(Path('kernels/layernorm_forward/4_one_pass.cu')))
P
for i in 1 2 3; do nvcc -cubin -arch=sm_90 -O3 --use_fast_math -Ikernels/layernorm_forward -Ikernels/common /tmp/ln4.cu -o /tmp/ln4.cubin -time $o/nvcc-time.csv; done
t timeout 200 $W sanitize layernorm_forward 4 --json $o/sanitize-ln4.json > $o/sanitize-ln4.txt 2>&1
t timeout 60 python3 scratch/torch_probe2.py > $o/torch-probe2-a.txt 2>&1
t timeout 60 python3 scratch/torch_probe2.py > $o/torch-probe2-b.txt 2>&1
du -sh ~/.nv/ComputeCache > $o/computecache.txt 2>&1
t timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_loop.py > $o/pytest-gpu-loop.txt 2>&1
for i in 1 2; do t python3 -c "import torch"; t python3 -c "import workbench.cli.app"; done
find /opt/torch/.venv/lib/python3.12/site-packages/numpy -name '*.pyc' | wc -l > $o/pyc-count-before.txt
t python3 -m compileall -q -j 16 /opt/torch/.venv/lib/python3.12/site-packages > $o/compileall-venv.txt 2>&1
for i in 1 2; do t python3 -c "import torch"; t python3 -c "import workbench.cli.app"; done
t env WORKBENCH_CACHE=/tmp/wbc-x COLUMNS=200 python3 scratch/trace_run.py run layernorm_forward 4 > $o/run-pyc-fresh-cache.txt 2>&1
cd $OUT && tar czf c14.tgz c14 && rm -rf c14
