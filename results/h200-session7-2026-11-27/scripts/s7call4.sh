source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
F=kernels/attention_forward
sed "s/#define QK_AHEAD 1/#define QK_AHEAD 0/" $F/12_flash_wgmma_bf16.cu | sed 's/shared = "1024 + 128 \* 128 + 5 \* 2/shared = "1024 + 128 * 128 + 4 * 2/' > $F/13_noahead.cu
grep -n "define QK_AHEAD\|shared =" $F/13_noahead.cu
timeout 120 python3 scratch/wg_debug.py 1 200 2 64 > $OUT/dbg.txt 2>&1
timeout 120 python3 scratch/wg_debug.py 2 1024 3 64 >> $OUT/dbg.txt 2>&1
cat $OUT/dbg.txt
for v in 9 12 13 9 12; do timeout 200 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v"; grep -E "max abs|best" $OUT/run$v-b16.txt | head -4; done
timeout 300 python3 -m workbench run attention_forward 12 > $OUT/run12.txt 2>&1; grep -E "check|max abs|best|torch" $OUT/run12.txt
