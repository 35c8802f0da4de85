#!/bin/bash
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=${MEMSCOPE_LIBDIR:-$PWD/build/lib} CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
CLI=${MEMSCOPE_CLI:-$PWD/build/bin/memscope-cli}
W=/tmp/w; rm -rf $W; mkdir -p $W
O=${OUT:-/tmp/out}; mkdir -p $O
{
echo "== date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import torch;print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
echo "== ldd (missing):"; ldd $LD_LIBRARY_PATH/libmemscope-agent.so $CLI | grep -i "not found" || echo none
T="timeout 180"
echo "== native1";    $T python3 tools/gpu-proof/train.py native $W/native1.json
echo "== agent_nopub"; MEMSCOPE_PUBLISH=0 $T python3 tools/gpu-proof/train.py agent $W/agent_nopub.json
echo "== agent_pub (publishing, no viewer)"; MEMSCOPE_ENDPOINT=ipc:///tmp/ms-noviewer $T python3 tools/gpu-proof/train.py agent $W/agent_pub.json
echo "== agent_rec (memscope-cli record attached)"
$CLI record ipc:///tmp/msjob -o $W/rec.pickle --timeout 90 >$W/record.out 2>&1 & RP=$!
MEMSCOPE_ENDPOINT=ipc:///tmp/msjob WAIT_FOR_VIEWER=1 $T python3 tools/gpu-proof/train.py agent $W/agent_rec.json
wait $RP; echo "record rc=$?"; cat $W/record.out
echo "== native2";    $T python3 tools/gpu-proof/train.py native $W/native2.json
echo "== native_hist"; $T python3 tools/gpu-proof/train.py native_hist $W/native_hist.json $W/native.pickle
ls -la $W
echo "== allocator-replay native.pickle"; timeout 120 $CLI allocator-replay $W/native.pickle; echo "rc=$?"
echo "== info native.pickle"; $CLI info $W/native.pickle
echo "== info rec.pickle"; $CLI info $W/rec.pickle; echo "rc=$?"
echo "== stats rec.pickle"; $CLI stats $W/rec.pickle | head -30; echo "rc=${PIPESTATUS[0]}"
echo "== allocator-replay rec.pickle"; timeout 120 $CLI allocator-replay $W/rec.pickle; echo "rc=$?"
echo "== summary"; python3 tools/gpu-proof/summary.py $W
} 2>&1 | tee $O/log.txt
cp $W/*.json $O/ 2>/dev/null
python3 - <<'PY'
import json,glob,os
O=os.environ.get("OUT","/tmp/out"); d={}
for p in sorted(glob.glob("/tmp/w/*.json")): d[os.path.basename(p)[:-5]]=json.load(open(p))
json.dump(d, open(O+"/results.json","w"))
PY
rm -f $O/native1.json $O/native2.json $O/agent_*.json $O/native_hist.json
for f in native.pickle rec.pickle; do [ -f $W/$f ] && xz -T0 -6 -c $W/$f > $O/$f.xz; done
ls -la $O
