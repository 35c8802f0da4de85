"""`python3 -m memscope_torch [--use] SCRIPT ARGS...` for the installed package: memscope_torch/__init__.py is
agent/python/memscope_torch.py, whose own ``if __name__ == "__main__"`` block runs only when it is a lone module."""
import sys

from memscope_torch import _main

sys.exit(_main(sys.argv[1:]))
