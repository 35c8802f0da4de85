"""Make memscope's wider corpus of real PyTorch snapshots on a GPU machine, with PyTorch's own outputs beside them.

Usage: python3 tools/corpus/make_corpus.py OUTDIR [--only a,b] [--jobs N]

Each workload runs in a fresh process (allocator settings are read once per process), with the memory history
switched on before its first CUDA allocation, so every trace is complete. For every X.pickle the folder gets
X.meta.json (the allocator settings asked for, the memory fraction, the device's total memory, PyTorch's version)
and PyTorch's own `_memory_viz` outputs: X.segsum.txt, X.trace.txt, X.segments.folded, X.memory.folded
(tools/corpus/README.md). Workloads that fail are logged and the rest go on.
"""
import contextlib, io, json, os, random, subprocess, sys, time, traceback

OUT = sys.argv[1]
ARGS = sys.argv[2:]
os.makedirs(OUT, exist_ok=True)

WORKLOADS = {}


def workload(env=None, fraction=None):
    def wrap(fn):
        fn.env = env or {}
        fn.fraction = fraction
        WORKLOADS[fn.__name__] = fn
        return fn
    return wrap


def record(torch, stacks='python', max_entries=1_000_000):
    torch.cuda.memory._record_memory_history(enabled='all', context='all', stacks=stacks, max_entries=max_entries)


def dump(torch, name):
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(f'{OUT}/{name}.pickle')


# --- real jobs ----------------------------------------------------------------------------------------------------

def tiny_transformer(torch, d=256, layers=2):
    layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=4 * d, batch_first=True)
    return torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=layers), torch.nn.Linear(d, d)).cuda()


@workload()
def compile_default(torch):
    record(torch)
    m = tiny_transformer(torch)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    cm = torch.compile(m)
    for i in range(4):
        with torch.profiler.record_function(f'step_{i}'):
            x = torch.randn(8, 64, 256, device='cuda')
            loss = cm(x).pow(2).mean()
            loss.backward()
            opt.step(); opt.zero_grad(set_to_none=True)
    dump(torch, 'compile_default')


@workload()
def compile_reduce_overhead(torch):
    record(torch)
    m = tiny_transformer(torch)
    cm = torch.compile(m, mode='reduce-overhead')
    x = torch.randn(8, 64, 256, device='cuda')
    with torch.no_grad():
        for i in range(6):
            with torch.profiler.record_function(f'infer_{i}'):
                y = cm(x)
                s = y.sum().item()
    dump(torch, 'compile_reduce_overhead')


@workload()
def hf_gpt2(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    record(torch)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=2048, n_positions=256)
    m = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for i in range(3):
        with torch.profiler.record_function(f'step_{i}'):
            ids = torch.randint(0, 2048, (4, 128), device='cuda')
            with torch.autocast('cuda', dtype=torch.bfloat16):
                out = m(input_ids=ids, labels=ids)
            out.loss.backward()
            opt.step(); opt.zero_grad(set_to_none=True)
    dump(torch, 'hf_gpt2')


@workload()
def checkpointing(torch):
    from torch.utils.checkpoint import checkpoint
    record(torch)
    blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                                      torch.nn.Linear(2048, 512)) for _ in range(4)]).cuda()
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    for i in range(3):
        with torch.profiler.record_function(f'step_{i}'):
            x = torch.randn(64, 128, 512, device='cuda', requires_grad=True)
            for b in blocks:
                x = checkpoint(b, x, use_reentrant=False)
            x.pow(2).mean().backward()
            opt.step(); opt.zero_grad(set_to_none=True)
    dump(torch, 'checkpointing')


@workload()
def streams_record_stream(torch):
    record(torch)
    streams = [torch.cuda.Stream() for _ in range(3)]
    keep = []
    for i in range(60):
        s = streams[i % 3]
        with torch.cuda.stream(s):
            a = torch.randn(512 + 7 * i, 384, device='cuda')
            b = a @ a.T
        if i % 3 == 0:
            b.record_stream(torch.cuda.current_stream())
            a.record_stream(streams[(i + 1) % 3])
        if i % 5 == 0:
            keep.append(b)
        if len(keep) > 6:
            keep.pop(0)
        del a, b
    torch.cuda.synchronize()
    dump(torch, 'streams_record_stream')


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True'})
def expandable_empty_cache(torch):
    record(torch)
    live = []
    random.seed(5)
    for i in range(400):
        if live and random.random() < 0.45:
            live.pop(random.randrange(len(live)))
        else:
            live.append(torch.empty(random.choice([700, 4096, 300_000, 2**20 + 3, 3 * 2**20, 11 * 2**20, 40 * 2**20]),
                                    dtype=torch.uint8, device='cuda'))
        if i % 97 == 96:
            torch.cuda.empty_cache()
    del live
    torch.cuda.empty_cache()
    keep = [torch.empty(2**20 * k, dtype=torch.uint8, device='cuda') for k in (5, 9, 33)]
    dump(torch, 'expandable_empty_cache')


# --- scripted traces, one per allocator setting -------------------------------------------------------------------

def scripted(torch, name, steps=2500, seed=1, streams=2, sizes=None, empty_cache_every=0, big=False):
    """Random allocs and frees of awkward sizes, on several streams with record_stream, OOMs caught and survived."""
    record(torch, max_entries=2_000_000)
    rng = random.Random(seed)
    side = [torch.cuda.Stream() for _ in range(streams - 1)]
    sizes = sizes or [1, 511, 512, 513, 4096, 2**20 - 1, 2**20, 2**20 + 1, 3 * 2**20, 5 * 2**20, 10 * 2**20 + 1,
                      25 * 2**20, 70 * 2**20, 130 * 2**20] + ([300 * 2**20] if big else [])
    live = []
    ooms = 0
    for i in range(steps):
        if live and (rng.random() < 0.47 or len(live) > 400):
            t, s = live.pop(rng.randrange(len(live)))
            if s is not None and rng.random() < 0.5:
                t.record_stream(torch.cuda.current_stream())  # freed while in use on another stream
            del t
        else:
            n = int(rng.choice(sizes) * rng.uniform(0.75, 1.25)) or 1
            s = side[rng.randrange(len(side))] if side and rng.random() < 0.35 else None
            try:
                if s is None:
                    t = torch.empty(n, dtype=torch.uint8, device='cuda')
                else:
                    with torch.cuda.stream(s):
                        t = torch.empty(n, dtype=torch.uint8, device='cuda')
                        t.fill_(1)
                live.append((t, s))
            except torch.cuda.OutOfMemoryError:
                ooms += 1
                # drop a third of what we hold, as a job that catches OOM and sheds work would
                rng.shuffle(live)
                live = live[len(live) // 3:]
        if empty_cache_every and i % empty_cache_every == empty_cache_every - 1:
            torch.cuda.empty_cache()
        if i % 200 == 199:
            torch.cuda.synchronize()
    print(name, 'ooms', ooms, flush=True)
    dump(torch, name)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'garbage_collection_threshold:0.5,max_split_size_mb:100'}, fraction=0.004)
def gc05_fraction(torch):
    scripted(torch, 'gc05_fraction', steps=2000, seed=2)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'garbage_collection_threshold:0.7,max_split_size_mb:64'}, fraction=0.006)
def gc07_fraction(torch):
    scripted(torch, 'gc07_fraction', steps=2000, seed=3, big=True)


@workload(fraction=0.003)
def oom_retry(torch):
    scripted(torch, 'oom_retry', steps=1500, seed=4, big=True)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'max_split_size_mb:20'})
def max_split(torch):
    scripted(torch, 'max_split', steps=2000, seed=5, empty_cache_every=700)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'max_split_size_mb:40,max_non_split_rounding_mb:32'})
def max_non_split_rounding(torch):
    scripted(torch, 'max_non_split_rounding', steps=1500, seed=6)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'roundup_power2_divisions:4'})
def roundup_single(torch):
    scripted(torch, 'roundup_single', steps=2000, seed=7)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'roundup_power2_divisions:[256:1,512:2,1024:4,>:8]'})
def roundup_list(torch):
    scripted(torch, 'roundup_list', steps=2000, seed=8)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True'})
def expandable_scripted(torch):
    scripted(torch, 'expandable_scripted', steps=2500, seed=9, empty_cache_every=600)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True,roundup_power2_divisions:4'}, fraction=0.004)
def expandable_fraction(torch):
    scripted(torch, 'expandable_fraction', steps=2000, seed=10, big=True)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF':
               'garbage_collection_threshold:0.6,max_split_size_mb:50,roundup_power2_divisions:[256:2,>:4]'},
          fraction=0.005)
def combined_fraction(torch):
    scripted(torch, 'combined_fraction', steps=2000, seed=11, big=True, empty_cache_every=900)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True,garbage_collection_threshold:0.6'},
          fraction=0.004)
def expandable_gc_fraction(torch):
    scripted(torch, 'expandable_gc_fraction', steps=2000, seed=12, big=True, empty_cache_every=800)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'garbage_collection_threshold:0.8'}, fraction=0.005)
def gc_alone_fraction(torch):
    scripted(torch, 'gc_alone_fraction', steps=2000, seed=13, big=True)


@workload(env={'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True,max_split_size_mb:64'})
def expandable_max_split(torch):
    scripted(torch, 'expandable_max_split', steps=2000, seed=14, empty_cache_every=650)


# --- what-if: one job, the same requests, under each allocator setting (issue: what-if replay) ---------------------

WHATIF_CAP = int(2.5 * 2**30)  # set_per_process_memory_fraction(WHATIF_CAP / total): a 2.5 GiB cap


def whatif_job(torch, name, seed):
    """Random 1-96 MiB tensors kept as a working set of about 1.6 GiB, and one 200-700 MiB temporary a step, under
    a 2.5 GiB cap. An OOM is caught and the tensor skipped; the random stream never depends on an outcome (a failed
    request keeps its place in the working set as None), so every run of a seed makes the same requests in the same
    order, whatever its allocator settings: the job that a what-if replay predicts."""
    record(torch, max_entries=2_000_000)
    rng = random.Random(seed)
    live, sizes, ooms = [], [], 0
    for step in range(80):
        for _ in range(rng.randint(3, 8)):
            n = rng.randint(1, 96) * 2**20 + rng.randint(0, 4095)
            try:
                t = torch.empty(n, dtype=torch.uint8, device='cuda')
            except torch.cuda.OutOfMemoryError:
                t, ooms = None, ooms + 1
            live.append(t)
            sizes.append(n)
        while sum(sizes) > 1.6 * 2**30 or (sizes and rng.random() < 0.3):
            k = rng.randrange(len(live))
            live.pop(k)
            sizes.pop(k)
        n = rng.randint(200, 700) * 2**20
        try:
            tmp = torch.empty(n, dtype=torch.uint8, device='cuda')
            del tmp
        except torch.cuda.OutOfMemoryError:
            ooms += 1
    print(name, 'ooms', ooms, 'peak reserved', torch.cuda.max_memory_reserved(), flush=True)
    dump(torch, name)


def whatif_workloads():
    settings = {'default': '', 'expandable': 'expandable_segments:True', 'max_split64': 'max_split_size_mb:64',
                'max_split128': 'max_split_size_mb:128', 'gc06': 'garbage_collection_threshold:0.6'}
    for seed in (0, 1):
        for tag, conf in settings.items():
            name = f'whatif_s{seed}_{tag}'

            def job(torch, name=name, seed=seed):
                whatif_job(torch, name, seed)
            job.__name__ = name
            job.env = {'PYTORCH_CUDA_ALLOC_CONF': conf} if conf else {}
            job.fraction = 'whatif'
            WORKLOADS[name] = job


whatif_workloads()


def gpt2_varlen_job(torch, name, skip_ooms=False):
    """A real model's training under each allocator setting: GPT-2 (transformers, from its config) with a batch of
    another sequence length every step (padding-free batching), the same seed. Without a cap it meets no OOM, and its
    requests do not depend on the allocator, so the what-if replay of one run predicts the others' peak reservation
    exactly or not. With skip_ooms (and a cap) a step that runs out of memory is skipped (its tensors dropped, its
    gradients zeroed) and training goes on, the way training loops survive a too-long batch."""
    from transformers import GPT2Config, GPT2LMHeadModel
    record(torch)
    torch.manual_seed(0)
    rng = random.Random(5)
    cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192, n_positions=1024)
    m = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    skipped = []
    for i in range(12):
        n = rng.choice([96, 200, 333, 512, 700, 1000])
        ids = torch.randint(0, 8192, (8, n), device='cuda')
        if not skip_ooms:  # the order the gpt2_varlen_* files were recorded in
            with torch.autocast('cuda', dtype=torch.bfloat16):
                loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step(); opt.zero_grad(set_to_none=True)
            del loss, ids
            continue
        try:
            with torch.autocast('cuda', dtype=torch.bfloat16):
                loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            del loss
        except torch.OutOfMemoryError:
            skipped.append(i)
        opt.zero_grad(set_to_none=True)
        del ids
    print(name, 'skipped steps', skipped, 'peak reserved', torch.cuda.max_memory_reserved(), flush=True)
    dump(torch, name)


for _tag, _conf in {'default': '', 'expandable': 'expandable_segments:True', 'max_split128': 'max_split_size_mb:128',
                    'roundup4': 'roundup_power2_divisions:4'}.items():
    def _job(torch, name='gpt2_varlen_' + _tag):
        gpt2_varlen_job(torch, name)
    _job.__name__ = 'gpt2_varlen_' + _tag
    _job.env = {'PYTORCH_CUDA_ALLOC_CONF': _conf} if _conf else {}
    _job.fraction = None
    WORKLOADS[_job.__name__] = _job


# The same training under memory caps between the default's and expandable segments' peaks, so that one run of a
# pair fails steps the other does not (tests/data/corpus/gpt2_oom2850_*).
for _cap in (2850, 2950, 3050):
    for _tag, _conf in {'default': '', 'expandable': 'expandable_segments:True'}.items():
        def _job(torch, name=f'gpt2_oom{_cap}_{_tag}'):
            gpt2_varlen_job(torch, name, skip_ooms=True)
        _job.__name__ = f'gpt2_oom{_cap}_{_tag}'
        _job.env = {'PYTORCH_CUDA_ALLOC_CONF': _conf} if _conf else {}
        _job.fraction = ('bytes', _cap * 1_000_000)
        WORKLOADS[_job.__name__] = _job


# --- private pools: MemPool, CUDA graphs, torch.compile's CUDA graphs in training -----------------------------------

@workload()
def mempool(torch):
    record(torch)
    keep, pooled = [], []
    pool = torch.cuda.MemPool()
    for i in range(40):
        with torch.cuda.use_mem_pool(pool):
            a = torch.empty((i % 7 + 1) * 3 * 2**20 + 17, dtype=torch.uint8, device='cuda')
        b = torch.empty((i % 5 + 1) * 2**20, dtype=torch.uint8, device='cuda')
        (pooled if i % 3 == 0 else keep).append(a)
        if i % 4 == 0:
            keep.append(b)
        del a, b
        if len(keep) > 8:
            keep.pop(0)
    del pooled
    del pool  # the pool's last user gone: its segments go back at the next empty_cache
    torch.cuda.empty_cache()
    pool2 = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool2):
        c = [torch.empty(k * 2**20, dtype=torch.uint8, device='cuda') for k in (1, 3, 30)]
    d = torch.empty(5 * 2**20, dtype=torch.uint8, device='cuda')
    dump(torch, 'mempool')


@workload()
def graph_pool(torch):
    record(torch)
    m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    x = torch.randn(64, 1024, device='cuda')
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = m(x)
    for _ in range(5):
        x.copy_(torch.randn_like(x))
        g.replay()
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2, pool=g.pool()):
        z = m(y)
    g2.replay()
    out = z.clone()
    del g, g2, y, z
    torch.cuda.empty_cache()  # the private pool's last graph gone: its segments are released
    after = [torch.empty(k * 2**20, dtype=torch.uint8, device='cuda') for k in (2, 21, 40)]
    dump(torch, 'graph_pool')


@workload()
def gpt2_reduce_overhead_train(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    record(torch)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=4096, n_positions=256)
    m = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    step = torch.compile(lambda ids: m(input_ids=ids, labels=ids).loss, mode='reduce-overhead')
    for i in range(5):
        with torch.profiler.record_function(f'step_{i}'):
            ids = torch.randint(0, 4096, (4, 128), device='cuda')
            loss = step(ids)
            loss.backward()
            opt.step(); opt.zero_grad(set_to_none=True)
    del step, loss
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    dump(torch, 'gpt2_reduce_overhead_train')


# --- C++ stacks (PyTorch's default, stacks="all") on real models -------------------------------------------------

@workload()
def hf_gpt2_cpp(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    record(torch, stacks='all')
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=2048, n_positions=256)
    m = GPT2LMHeadModel(cfg).cuda()
    # Not with gradient_checkpointing_enable(): under stacks="all" its backward fails inside PyTorch 2.11
    # ("run_backward returned NULL without setting an exception"), with or without memscope.
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for i in range(2):
        ids = torch.randint(0, 2048, (4, 128), device='cuda')
        with torch.autocast('cuda', dtype=torch.bfloat16):
            out = m(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    dump(torch, 'hf_gpt2_cpp')


@workload()
def timm_cpp(torch):
    import timm
    record(torch, stacks='all')
    m = timm.create_model('resnet18', pretrained=False, num_classes=10).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for i in range(2):
        x = torch.randn(16, 3, 96, 96, device='cuda')
        loss = m(x).logsumexp(1).mean()
        loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    dump(torch, 'timm_cpp')


@workload()
def anomaly_forward_frames(torch):
    # Anomaly mode keeps each autograd node's forward traceback; whether the snapshot's backward allocations carry
    # it (forward_frames) is what this trace shows.
    record(torch)
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    with torch.autograd.set_detect_anomaly(True):
        for i in range(2):
            x = torch.randn(64, 256, device='cuda', requires_grad=True)
            m(x).pow(2).mean().backward()
    dump(torch, 'anomaly_forward_frames')


@workload()
def compile_fx_metadata(torch):
    # torch.compile's generated code with the FX node each line runs (_snapshot(augment_with_fx_traces=True) adds
    # fx_node_op / fx_node_name / fx_node_target / fx_original_trace to those frames), and user metadata set around
    # two phases (torch.cuda.memory._set_memory_metadata, where PyTorch has it): the keys PyTorch writes since 2025.
    import pickle
    record(torch)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net1 = torch.nn.Linear(512, 2048)
            self.relu = torch.nn.ReLU()
            self.net2 = torch.nn.Linear(2048, 512)

        def forward(self, x):
            a = self.net1(x)
            b = self.relu(a)
            c = self.net2(b)
            return c

    net = Net().cuda()
    compiled = torch.compile(net)
    set_metadata = getattr(torch.cuda.memory, '_set_memory_metadata', None)
    for phase in ('warmup', 'train'):
        if set_metadata:
            set_metadata(json.dumps({'phase': phase}))
        for _ in range(3):
            out = compiled(torch.randn(256, 512, device='cuda'))
            out.sum().item()
    if set_metadata:
        set_metadata('')
    keep = compiled(torch.randn(256, 512, device='cuda'))  # alive in the final state with its FX frames
    torch.cuda.synchronize()
    try:
        snapshot = torch.cuda.memory._snapshot(augment_with_fx_traces=True)
    except TypeError:  # a PyTorch without the augmentation
        snapshot = torch.cuda.memory._snapshot()
    with open(f'{OUT}/compile_fx_metadata.pickle', 'wb') as f:
        pickle.dump(snapshot, f)
    del keep


# --- skip_actions: the same job with and without free_requested entries -------------------------------------------

def skip_job(torch, name, skip):
    torch.cuda.memory._record_memory_history(enabled='all', context='all', stacks='python', max_entries=1_000_000,
                                             **({'skip_actions': ['free_requested']} if skip else {}))
    rng = random.Random(21)
    side = torch.cuda.Stream()
    live = []
    for i in range(300):
        if live and rng.random() < 0.45:
            t = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.5:
                t.record_stream(side)
            del t
        else:
            n = rng.choice([3, 11, 40, 90]) * 2**20 + rng.randint(0, 999)
            live.append(torch.empty(n, dtype=torch.uint8, device='cuda'))
        if i % 50 == 49:
            torch.cuda.synchronize()
    dump(torch, name)


@workload()
def skip_free_requested(torch):
    skip_job(torch, 'skip_free_requested', True)


@workload()
def skip_baseline(torch):
    skip_job(torch, 'skip_baseline', False)


# --- running ------------------------------------------------------------------------------------------------------

def reference_outputs(name):
    import pickle
    from torch.cuda import _memory_viz as mv
    path = f'{OUT}/{name}.pickle'
    data = pickle.load(open(path, 'rb'))
    ident = lambda s: s
    outs = {}
    for kind, ext, fn in [('segsum', 'txt', lambda: mv.segsum(data)),
                          ('trace', 'txt', lambda: mv.trace(data)),
                          ('segments', 'folded', lambda: mv.segments(data, format_flamegraph=ident)),
                          ('memory', 'folded', lambda: mv.memory(data, format_flamegraph=ident))]:
        try:
            text = fn()
            open(f'{OUT}/{name}.{kind}.{ext}', 'w').write(text)
            outs[kind] = len(text)
        except Exception as e:  # keep going: one failure must not hide the rest
            outs[kind] = f'ERROR {type(e).__name__}: {e}'
    return outs


def run_one(name):
    fn = WORKLOADS[name]
    import torch
    torch.cuda.init()
    fraction = fn.fraction
    if fraction == 'whatif':
        fraction = WHATIF_CAP / torch.cuda.mem_get_info()[1]
    elif isinstance(fraction, tuple):  # ('bytes', N): a cap of N bytes
        fraction = fraction[1] / torch.cuda.mem_get_info()[1]
    if fraction:
        torch.cuda.set_per_process_memory_fraction(fraction)
    t0 = time.time()
    fn(torch)
    free, total = torch.cuda.mem_get_info()
    meta = {
        'workload': name,
        'PYTORCH_CUDA_ALLOC_CONF': fn.env.get('PYTORCH_CUDA_ALLOC_CONF', ''),
        'memory_fraction': fraction,
        'device_total_memory': total,
        'allowed_memory_maximum': int(fraction * total) if fraction else None,
        'max_memory_reserved': torch.cuda.max_memory_reserved(),
        'torch': torch.__version__,
        'device_name': torch.cuda.get_device_name(),
        'secs': round(time.time() - t0, 2),
    }
    meta['reference'] = reference_outputs(name)
    json.dump(meta, open(f'{OUT}/{name}.meta.json', 'w'), indent=1)


def main():
    if ARGS[:1] == ['--one']:
        return run_one(ARGS[1])
    only = ARGS[ARGS.index('--only') + 1].split(',') if '--only' in ARGS else list(WORKLOADS)
    jobs = int(ARGS[ARGS.index('--jobs') + 1]) if '--jobs' in ARGS else 4
    log = {}
    running = []
    pending = list(only)
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            env = dict(os.environ, **WORKLOADS[name].env)
            env.pop('PYTORCH_ALLOC_CONF', None)
            if 'PYTORCH_CUDA_ALLOC_CONF' not in WORKLOADS[name].env:
                env.pop('PYTORCH_CUDA_ALLOC_CONF', None)
            p = subprocess.Popen([sys.executable, __file__, OUT, '--one', name], env=env,
                                 stdout=open(f'{OUT}/{name}.log', 'w'), stderr=subprocess.STDOUT)
            running.append((name, p, time.time()))
        time.sleep(0.5)
        for item in list(running):
            name, p, t0 = item
            rc = p.poll()
            if rc is None and time.time() - t0 > 300:
                p.kill(); rc = 'timeout'
            if rc is not None:
                running.remove(item)
                log[name] = {'rc': rc, 'secs': round(time.time() - t0, 1)}
                print(name, log[name], flush=True)
    json.dump(log, open(f'{OUT}/corpus_log.json', 'w'), indent=1)


if __name__ == '__main__':
    main()
