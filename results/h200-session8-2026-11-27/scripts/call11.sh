source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
echo "commit $(cat scratch/commit)" >> $OUT/gpu.txt
S=$(date +%s)
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=10 tests/test_gpu.py -k "attention or l2_flush or front_runner or faulty or copy_baseline or staged or library" > $OUT/pytest-gpu-attention-harness.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - S ))s" | tee -a $OUT/pytest-gpu-attention-harness.txt; tail -3 $OUT/pytest-gpu-attention-harness.txt
timeout 60 python3 -m workbench run attention_backward 13 --no-torch > $OUT/check13.txt 2>&1; echo "check rc=$?"; grep -E "check |best" $OUT/check13.txt | head -2
for v in 9 13; do timeout 45 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -E "best" $OUT/run$v-b16.txt; done
timeout 60 python3 -m workbench sanitize attention_backward 13 --tool memcheck --tool racecheck --tool synccheck > $OUT/sanitize13.txt 2>&1; echo "sanitize rc=$? $(( $(date +%s) - S ))s"; grep -E "runs clean|not clean" $OUT/sanitize13.txt
