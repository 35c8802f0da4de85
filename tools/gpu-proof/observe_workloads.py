"""One job of the observer proof (observe.py runs each in a fresh process).

Usage: python3 observe_workloads.py WORKLOAD MODE OUTDIR [--steps N] [--pause-at STEP]

WORKLOAD:
  torch_only  imports only torch; ~70 tensors allocated and freed per step; exits right after its last step
  mempool     torch.cuda.MemPool + use_mem_pool, a side stream with record_stream, empty_cache every step
  oom_retry   set_per_process_memory_fraction(0.02); each step allocates until an OOM, frees, empty_cache, again
  llama       transformers.LlamaConfig (hidden 1024, 8 layers, 16 heads / 4 KV heads), gradient checkpointing,
              bf16 autocast, AdamW, batch 8 x 1024
  vit         timm vit_base_patch16_224 (no weights), bf16 autocast, batch 96, run with expandable_segments:True
  lora        peft LoRA (r 16) on transformers.GPT2LMHeadModel(GPT2Config()), batch 8 x 512
  compile_ro  GPT-2 (4 layers) under torch.compile(mode="reduce-overhead"): CUDA graphs, private pools
  loop        a tight loop of 1 MiB alloc/free pairs (the per-event cost; steps are 20,000 pairs each)
MODE: native, native_hist (PyTorch's own _record_memory_history(stacks="python")), observe_none
(memscope_torch.observe(stacks=None)), observe_python (memscope_torch.observe()), observe_trace (observe() with
PyTorch's own whole trace kept too: the final pickle holds it), observe_ab (observe(), with
memscope's tracker switched off on even steps and on on odd ones: PyTorch's own history against observe() in one
process, step by step, free of what differs between processes; OUTDIR/W.M.ab.json holds both lists),
observe_none_ab (the same with observe(stacks=None): PyTorch alone against observe(stacks=None); the steps "off"
still call the attached tracker, which returns at once).

Writes OUTDIR/W.M.steps.json (per-step milliseconds), OUTDIR/W.M.final.pickle (torch.cuda.memory._snapshot() at the
end) and, observed, OUTDIR/W.M.stats.json (memscope_torch.observer_stats()). With --pause-at, at that step it saves
OUTDIR/W.M.pause.pickle, writes OUTDIR/W.M.paused and holds still for 4 s so that a viewer can join.
"""
import json
import os
import pickle
import sys
import time

workload, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 30
pause_at = int(sys.argv[sys.argv.index("--pause-at") + 1]) if "--pause-at" in sys.argv else -1
name = "%s/%s.%s" % (out, workload, mode)

import torch  # noqa: E402

if mode == "native_hist":
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=1)
if mode.startswith("observe"):
    import memscope_torch

    endpoint = os.environ["MEMSCOPE_ENDPOINT"]
    got = memscope_torch.observe(endpoint=endpoint,
                                 stacks=None if mode in ("observe_none", "observe_none_ab") else "python")
    assert got == endpoint, got
    set_tracking = memscope_torch._observer._set_tracking if mode.endswith("_ab") else None
    if mode == "observe_trace":  # PyTorch keeps its own whole trace beside: the oracle of the recording's
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=1_000_000)

torch.manual_seed(0)
dev = "cuda"


def make_step():
    """The workload's model and one step of it, as a function of the step number."""
    if workload == "torch_only":
        w = torch.randn(512, 512, device=dev)

        def step(i):
            kept = []
            for k in range(35):
                a = torch.randn(256 + k, 512, device=dev)
                b = a @ w
                kept.append(torch.relu(b).sum(0))
            return torch.stack(kept).sum().item()
        return step
    if workload == "mempool":
        pool = torch.cuda.MemPool()
        side = torch.cuda.Stream()

        def step(i):
            with torch.cuda.use_mem_pool(pool):
                x = torch.randn(1 << 20, device=dev)
            y = torch.empty(3 << 20, device=dev)
            with torch.cuda.stream(side):
                z = y * 2
            y.record_stream(side)
            del y
            side.synchronize()
            r = (x.sum() + z.sum()).item()
            del x, z
            torch.cuda.empty_cache()
            return r
        return step
    if workload == "oom_retry":
        torch.cuda.set_per_process_memory_fraction(0.02)

        def step(i):
            held, size = [], 64 << 20
            while True:
                try:
                    held.append(torch.empty(size, dtype=torch.uint8, device=dev))
                    size = int(size * 1.5)
                except torch.OutOfMemoryError:
                    break
            n = len(held)
            del held
            torch.cuda.empty_cache()
            return n
        return step
    if workload == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                          num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
        model = LlamaForCausalLM(cfg).to(dev)
        model.gradient_checkpointing_enable()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(i):
            ids = torch.randint(0, 32000, (8, 1024), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()
        return step
    if workload == "vit":
        import timm

        model = timm.create_model("vit_base_patch16_224", pretrained=False).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(i):
            x = torch.randn(96, 3, 224, 224, device=dev)
            y = torch.randint(0, 1000, (96,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()
        return step
    if workload == "lora":
        from peft import LoraConfig, get_peft_model
        from transformers import GPT2Config, GPT2LMHeadModel

        model = get_peft_model(GPT2LMHeadModel(GPT2Config()),
                               LoraConfig(r=16, lora_alpha=32, target_modules=["c_attn"], lora_dropout=0.0)).to(dev)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

        def step(i):
            ids = torch.randint(0, 50257, (8, 512), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()
        return step
    if workload == "compile_ro":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(n_layer=4)).to(dev).eval()
        run = torch.compile(model, mode="reduce-overhead")
        ids = torch.randint(0, 50257, (4, 256), device=dev)

        def step(i):
            with torch.no_grad():
                return run(input_ids=ids).logits.sum().item()
        return step
    if workload == "loop":
        def step(i):
            for _ in range(20000):
                x = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
                del x
            return 0
        return step
    raise SystemExit("unknown workload " + workload)


step = make_step()
times = []
for i in range(steps):
    if set_tracking:
        set_tracking(i % 2 == 1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.profiler.record_function("step_%d" % i):
        step(i)
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1000)
    if i == pause_at:
        pickle.dump(torch.cuda.memory._snapshot(), open(name + ".pause.pickle", "wb"))
        open(name + ".paused", "w").write("1")
        time.sleep(4)
json.dump(times, open(name + ".steps.json", "w"))
if set_tracking:
    set_tracking(True)
    json.dump({"off": times[0::2], "on": times[1::2]}, open(name + ".ab.json", "w"))
pickle.dump(torch.cuda.memory._snapshot(), open(name + ".final.pickle", "wb"))
if mode.startswith("observe"):
    json.dump(memscope_torch.observer_stats(), open(name + ".stats.json", "w"))
print(workload, mode, "done", len(times), "steps", flush=True)
