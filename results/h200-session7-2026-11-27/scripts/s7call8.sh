source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
F=kernels/attention_forward
cp scratch/15_selfprod.cu $F/15_selfprod.cu
sed 's/#define PRODUCERS 64 /#define PRODUCERS 96 /; s/^block = 320/block = 352/; s/attention_forward13/attention_forward16/g' $F/13_flash_wgmma_producer.cu > $F/16_p96.cu
for V in 15 16; do export WG_VERSION=$V; timeout 60 python3 scratch/wg_debug.py 1 200 2 64; timeout 60 python3 scratch/wg_debug.py 1 960 2 64; timeout 60 python3 scratch/wg_debug.py 2 1024 3 64; done > $OUT/dbg.txt 2>&1
cat $OUT/dbg.txt | grep -v Resources
for v in 9 12 13 15 16 12 13 15 16; do timeout 120 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v"; grep -E "best|FAIL|fail|rror" $OUT/run$v-b16.txt | head -3; done
for v in 13 15; do timeout 200 python3 -m workbench run attention_forward $v > $OUT/run$v.txt 2>&1; grep -E "check |best|torch" $OUT/run$v.txt; done
