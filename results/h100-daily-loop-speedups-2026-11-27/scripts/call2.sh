#!/usr/bin/env bash
# session 4, call 2: cold/warm run, watch, bench --all after the speed-ups + compare, bench of 4 families before and
# after compileall, GPU tests touching the changes
set -u
o=$OUT/c2; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; env | grep -i "^python"; python3 -c "import sys; print('dont_write_bytecode', sys.flags.dont_write_bytecode, sys.pycache_prefix)"; ls -ld /tmp/gpu-site $PWD; ls /tmp/gpu-site/pycuda/__pycache__ 2>&1 | head -3; } > $o/env.txt 2>&1
t timeout 60 env PYTHONPATH="$PP" python3 scratch/trace_run.py run layernorm_forward 4 > $o/cold-trace.txt 2>&1
for i in 1 2; do t timeout 60 $W run layernorm_forward 4 > $o/warm$i.txt 2>&1; done
t timeout 90 python3 scratch/watch_timing.py /tmp/w > $o/watch.txt 2>&1
t timeout 280 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
t timeout 30 $W compare results/gpu-loop-fusions-closeout-2026-11-27/bench-all-after-6fac2c7-h100.json $o/bench-all.json > $o/compare.txt 2>&1
F="layernorm_forward attention_forward matmul_backward_dgelu matmul_forward"
t timeout 100 $W bench $F --json $o/bench4-before-compileall.json > $o/bench4-a.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 100 $W bench $F --json $o/bench4-after-compileall.json > $o/bench4-b.txt 2>&1
t timeout $(( 575 - SECONDS )) python3 -m pytest -m gpu -q -rs -p no:cacheprovider -x tests/test_gpu_loop.py tests/test_gpu_train.py "tests/test_gpu_trainer_runs.py::test_bf16_follows_fp32_within_two_percent_over_100_steps" tests/test_gpu.py -k "not every_version" --durations=15 > $o/pytest.txt 2>&1
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
