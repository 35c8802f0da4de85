"""The agent's CUDA backend under use(): tensors made, written and read back (run with MEMSCOPE_AGENT_BACKEND=cuda,
MEMSCOPE_AGENT_LIB and PYTHONPATH=agent/python; once as is and once with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which maps with cuMemCreate/cuMemMap/cuMemSetAccess)."""
import os, sys, torch
import memscope_torch
memscope_torch.use(stacks=None)
torch.manual_seed(0)
xs = [torch.randn(n, device="cuda") for n in (1 << 10, 3 << 20, 50 << 20, 7, 200 << 20)]
total = sum(float(x.double().sum()) for x in xs)
ref = sum(float(x.cpu().double().sum()) for x in xs)
del xs[2]
ys = [torch.ones(n, device="cuda") * 2 for n in (40 << 20, 5 << 20)]
s2 = sum(float(y.sum()) for y in ys)
torch.cuda.synchronize()
print("conf", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "backend ok", abs(total - ref) < 1e-3 * max(1, abs(ref)),
      "ones", s2 == 2 * ((40 << 20) + (5 << 20)), flush=True)
