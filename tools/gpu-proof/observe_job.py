"""One training job for the observer proof (observe.py runs it in fresh processes).

Usage: python3 observe_job.py MODE OUTDIR [--steps N] [--pause-at STEP]

MODE: use (memscope_torch.use(): the agent is the allocator, with the Python frames of each event; its exit dump is
the final state), use_none (the same without stacks), native and native2 (PyTorch alone), native_hist (PyTorch's memory history with Python stacks, no memscope), observe_none (memscope_torch.observe(stacks=None)), observe_python
(stacks="python"), compile_ro (a smaller GPT-2 under torch.compile(mode="reduce-overhead"), observed with stacks).
GPT-2 small from transformers.GPT2Config() (no download), bf16 autocast, AdamW, batch 8 x 1024, fixed seed.
Writes OUTDIR/MODE.steps.json (per-step milliseconds) and OUTDIR/MODE.final.pickle (torch.cuda.memory._snapshot()
at the end); with --pause-at, at that step it saves OUTDIR/MODE.pause.pickle, writes OUTDIR/MODE.paused and holds
still (no allocation) for 5 s so that a viewer can join and see exactly that state.
"""
import json
import os
import pickle
import sys
import time

mode, out = sys.argv[1], sys.argv[2]
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 40
pause_at = int(sys.argv[sys.argv.index("--pause-at") + 1]) if "--pause-at" in sys.argv else -1

import torch  # noqa: E402

if mode == "native_hist":  # PyTorch's own history with Python stacks: what gathering them costs without memscope
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=1)
if mode.startswith("use"):  # memscope's own allocator (the agent) in place of PyTorch's; it dumps its state at exit
    import memscope_torch

    memscope_torch.use(stacks=None if mode == "use_none" else "python")
if mode.startswith("observe") or mode == "compile_ro":
    import memscope_torch

    endpoint = os.environ["MEMSCOPE_ENDPOINT"]
    got = memscope_torch.observe(endpoint=endpoint, stacks=None if mode == "observe_none" else "python")
    assert got == endpoint, got

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.manual_seed(0)
times = []
if mode == "compile_ro":
    model = GPT2LMHeadModel(GPT2Config(n_layer=4)).cuda().eval()
    run = torch.compile(model, mode="reduce-overhead")
    ids = torch.randint(0, 50257, (4, 256), device="cuda")
    with torch.no_grad():
        for step in range(steps):
            t0 = time.perf_counter()
            with torch.profiler.record_function("infer_%d" % step):
                logits = run(input_ids=ids).logits
                logits.sum().item()
            times.append((time.perf_counter() - t0) * 1000)
else:
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.profiler.record_function("step_%d" % step):
            ids = torch.randint(0, 50257, (8, 1024), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        if step == pause_at:
            pickle.dump(torch.cuda.memory._snapshot(), open("%s/%s.pause.pickle" % (out, mode), "wb"))
            open("%s/%s.paused" % (out, mode), "w").write("1")
            time.sleep(5)
torch.cuda.synchronize()
json.dump(times, open("%s/%s.steps.json" % (out, mode), "w"))
if not mode.startswith("use"):  # under use() the agent's exit dump (MEMSCOPE_DUMP_ON=exit) is the final state
    pickle.dump(torch.cuda.memory._snapshot(), open("%s/%s.final.pickle" % (out, mode), "wb"))
print(mode, "done", len(times), "steps", flush=True)
