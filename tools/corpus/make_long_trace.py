"""Make a long real snapshot for memscope's speed measurements: a GPT-2 training job recorded with a ring of
1,250,000 entries (as torchtitan records whole runs with a ring of a million), run long enough that the ring wraps,
so that the trace starts mid-run as real long recordings do.

Usage (on a GPU machine with PyTorch and transformers): python3 tools/corpus/make_long_trace.py OUTDIR [STEPS]

Writes OUTDIR/gpt2_long.pickle (about 1.25 M entries), OUTDIR/gpt2_long.segsum.txt (PyTorch's own `_memory_viz`
segsum of it: the parity oracle of `memscope-cli stats`) and OUTDIR/gpt2_long.meta.json (the job, PyTorch's
version, the GPU, the trace's length). The file is too large for the checkout: keep it where the benchmarks look
(build/bench-data/), README "Speed" says how it is used.
"""
import json, os, sys, time

import torch
from torch.cuda import _memory_viz
from transformers import GPT2Config, GPT2LMHeadModel

OUT = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 0
RING = 1_250_000
os.makedirs(OUT, exist_ok=True)

torch.cuda.init()
torch.cuda.memory._record_memory_history(enabled='all', context='all', stacks='python', max_entries=RING)
torch.manual_seed(0)
cfg = GPT2Config(n_layer=6, n_embd=384, n_head=6, vocab_size=8192, n_positions=512)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def step(i):
    with torch.profiler.record_function(f'step_{i}'):
        ids = torch.randint(0, cfg.vocab_size, (8, 256), device='cuda')
        with torch.autocast('cuda', dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


t0 = time.time()
# Entries per step, counted on a few steps, decide how many steps wrap the ring about 1.3 times.
for i in range(3):
    step(i)
torch.cuda.synchronize()
per_step = len(torch.cuda.memory._snapshot()['device_traces'][0]) / 3
steps = STEPS or int(RING * 1.3 / per_step) + 1
for i in range(3, steps):
    step(i)
torch.cuda.synchronize()
path = f'{OUT}/gpt2_long.pickle'
torch.cuda.memory._dump_snapshot(path)
secs = time.time() - t0

import pickle
t1 = time.time()
data = pickle.load(open(path, 'rb'))
load_secs = time.time() - t1
open(f'{OUT}/gpt2_long.segsum.txt', 'w').write(_memory_viz.segsum(data))
json.dump({
    'job': f'GPT-2 ({cfg.n_layer} layers, n_embd {cfg.n_embd}, vocab {cfg.vocab_size}), batch 8 x 256, bf16 autocast, '
           f'AdamW, {steps} steps, record_function step_N',
    'max_entries': RING,
    'entries': len(data['device_traces'][0]),
    'entries_per_step': per_step,
    'bytes': os.path.getsize(path),
    'torch': torch.__version__,
    'device_name': torch.cuda.get_device_name(),
    'job_secs': round(secs, 1),
    'pickle_load_secs_there': round(load_secs, 2),
}, open(f'{OUT}/gpt2_long.meta.json', 'w'), indent=1)
print(open(f'{OUT}/gpt2_long.meta.json').read(), flush=True)
