"""A small transformer LM trained for a fixed number of steps; prints one JSON line of results.

usage: train.py MODE OUTJSON [SNAPSHOT]
  MODE: native | native_hist (native + PyTorch memory history, dumps SNAPSHOT) | agent (memscope_torch.use())
"""
import hashlib
import json
import os
import statistics
import sys
import time
import warnings

mode, outjson = sys.argv[1], sys.argv[2]
snapshot = sys.argv[3] if len(sys.argv) > 3 else None

if mode == "agent":
    sys.path.insert(0, os.path.join(os.getcwd(), "agent", "python"))
    import memscope_torch

    memscope_torch.use(os.path.join(os.environ.get("MEMSCOPE_LIBDIR", os.path.join(os.getcwd(), "build", "lib")), "libmemscope-agent.so"))

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

caught = []
warnings.showwarning = lambda m, c, f, l, *a, **k: caught.append("%s: %s" % (c.__name__, m))

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)

if mode == "native_hist":
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=5_000_000)

V, D, H, L, S, B = 8192, 512, 8, 6, 256, 32
STEPS, WARMUP = int(os.environ.get("STEPS", "100")), int(os.environ.get("WARMUP", "20"))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(S, D) * 0.02)
        layer = nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.1, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, x):
        h = self.emb(x) + self.pos[: x.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        h = self.enc(h, mask=mask, is_causal=True)
        return self.head(self.ln(h))


torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
# Data: a copy task (second half repeats the first), generated on the CPU with its own generator.
g = torch.Generator().manual_seed(1234)
half = torch.randint(0, V, (STEPS, B, (S + 1) // 2 + 1), generator=g)
data = torch.cat([half, half], dim=2)[:, :, : S + 1].contiguous()

model = LM().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)

if mode == "agent" and os.environ.get("WAIT_FOR_VIEWER"):
    time.sleep(float(os.environ["WAIT_FOR_VIEWER"]))  # the agent is bound now; let the recorder join

losses, times = [], []
with sdpa_kernel(SDPBackend.MATH):
    for step in range(STEPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        batch = data[step].cuda()
        x, y = batch[:, :-1], batch[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lv = loss.item()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(lv)

h = hashlib.sha256()
for name, p in model.named_parameters():
    h.update(p.detach().cpu().numpy().tobytes())

if snapshot:
    torch.cuda.memory._dump_snapshot(snapshot)
    torch.cuda.memory._record_memory_history(enabled=None)

meas = times[WARMUP:]
res = {
    "mode": mode,
    "publish": os.environ.get("MEMSCOPE_PUBLISH", "(default)") if mode == "agent" else None,
    "steps": STEPS,
    "warmup": WARMUP,
    "median_ms": statistics.median(meas) * 1e3,
    "mean_ms": statistics.mean(meas) * 1e3,
    "min_ms": min(meas) * 1e3,
    "max_ms": max(meas) * 1e3,
    "first_step_ms": times[0] * 1e3,
    "loss_first": losses[0],
    "loss_final": losses[-1],
    "loss_final_hex": float(losses[-1]).hex(),
    "losses_hex_sha256": hashlib.sha256(",".join(float(v).hex() for v in losses).encode()).hexdigest(),
    "params_sha256": h.hexdigest(),
    "warnings": sorted(set(caught))[:10],
    "losses": losses,
    "times_ms": [t * 1e3 for t in times],
}
with open(outjson, "w") as f:
    json.dump(res, f)
print(json.dumps({k: v for k, v in res.items() if k not in ("losses", "times_ms")}))
