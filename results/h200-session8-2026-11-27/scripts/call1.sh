source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
cp scratch/next/13_variant_wait_at_once.cu kernels/attention_forward/14_wait.cu
cp scratch/next/13_variant_dowhile_1block.cu kernels/attention_forward/15_dowhile1.cu
cp scratch/next/13_variant_dowhile_2blocks_c7512.cu kernels/attention_forward/16_dowhile2.cu
mkdir -p $OUT/t
S=$(date +%s)
for v in 9 13 14 15 16 13 14 15 16 9; do timeout 120 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|fail|rror|C75" $OUT/t/run$v-*.txt | tail -3; done
timeout 200 python3 -m pytest -m gpu -q tests/test_gpu_loop.py -p no:cacheprovider > $OUT/t/pytest-loop.txt 2>&1; echo "loop rc=$? $(( $(date +%s) - S ))s"; tail -5 $OUT/t/pytest-loop.txt
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
