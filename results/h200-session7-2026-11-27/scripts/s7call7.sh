source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
F=kernels/attention_forward
sed 's/#define PRODUCERS 32 /#define PRODUCERS 64 /; s/^block = 288/block = 320/' $F/13_flash_wgmma_producer.cu > $F/14_p64.cu; grep -n "^block\|define PRODUCERS" $F/14_p64.cu
export WG_VERSION=13
timeout 60 python3 scratch/wg_debug.py 1 200 2 64 > $OUT/dbg.txt 2>&1
timeout 60 python3 scratch/wg_debug.py 1 960 2 64 >> $OUT/dbg.txt 2>&1
cat $OUT/dbg.txt
for v in 9 12 13 14 12 13 14; do timeout 120 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v"; grep -E "max abs|best|FAIL|fail|rror" $OUT/run$v-b16.txt | head -4; done
timeout 200 python3 -m workbench run attention_forward 13 > $OUT/run13.txt 2>&1; grep -E "check|max abs|best|torch" $OUT/run13.txt
