set -x
source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 120 python3 scratch/wg_debug.py 1 200 2 64 > $OUT/dbg.txt 2>&1
timeout 120 python3 scratch/wg_debug.py 2 1024 3 64 >> $OUT/dbg.txt 2>&1
cat $OUT/dbg.txt
timeout 300 python3 -m workbench run attention_forward 12 > $OUT/run12.txt 2>&1; tail -30 $OUT/run12.txt
for v in 9 11 12; do timeout 200 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; grep -E "µs|us |fail|FAIL|pass" $OUT/run$v-b16.txt | head -8; done
timeout 300 python3 -m workbench sanitize attention_forward 12 --tool memcheck --tool racecheck > $OUT/sanitize12.txt 2>&1; tail -15 $OUT/sanitize12.txt
