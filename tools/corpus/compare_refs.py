"""PyTorch's own `_memory_viz.compare` on pairs of corpus snapshots: the parity oracle of `memscope-cli compare`.

Usage: python3 tools/corpus/compare_refs.py CORPUSDIR OUTDIR
Writes OUTDIR/A__B.compare.folded for each pair below (segments only in A or only in B, as folded stacks).
"""
import os
import pickle
import sys

from torch.cuda import _memory_viz as mv

PAIRS = [
    ("gc05_fraction", "gc07_fraction"),
    ("compile_default", "compile_reduce_overhead"),
    ("hf_gpt2", "checkpointing"),
    ("expandable_scripted", "expandable_empty_cache"),
    ("max_split", "roundup_single"),
]

corpus, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for a, b in PAIRS:
    before = pickle.load(open(os.path.join(corpus, a + ".pickle"), "rb"))
    after = pickle.load(open(os.path.join(corpus, b + ".pickle"), "rb"))
    text = mv.compare(before["segments"], after["segments"], format_flamegraph=lambda s: s)
    open(os.path.join(out, "%s__%s.compare.folded" % (a, b)), "w").write(text)
    print(a, b, len(text))
