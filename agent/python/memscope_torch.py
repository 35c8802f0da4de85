"""memscope_torch: make memscope's agent (libmemscope-agent.so) PyTorch's CUDA allocator.

Call ``use()`` before the first CUDA allocation of the process (torch refuses to swap a CUDA allocator that has
already been used)::

    import memscope_torch
    memscope_torch.use()                      # or use("/opt/memscope/lib/libmemscope-agent.so")
    import torch
    x = torch.empty(1 << 20, device="cuda")   # allocated by memscope, published to memscope's viewer

The library is looked for at ``path``, else ``$MEMSCOPE_AGENT_LIB``, else beside this file, in ``../lib`` and
``../../lib`` from it (an installed share/memscope/ or a source tree's agent/python/ next to build/lib), else in
``build/lib`` under the current folder, else by name through the dynamic loader's search path.

The agent reads its environment when it is first used:

``MEMSCOPE_ENDPOINT``
    where events are published (``ipc:///path`` or ``tcp://host:port``; default
    ``ipc://$XDG_RUNTIME_DIR/memscope-<pid>``). ``MEMSCOPE_PUBLISH=0`` turns publishing off.
``MEMSCOPE_ALLOC_CONF``
    allocator settings, PYTORCH_CUDA_ALLOC_CONF's syntax (falls back to PYTORCH_ALLOC_CONF, then
    PYTORCH_CUDA_ALLOC_CONF), e.g. ``expandable_segments:True,max_split_size_mb:128``.
``MEMSCOPE_DUMP_ON``
    ``oom``, ``exit`` or both (``oom,exit``): write a snapshot pickle (torch.cuda.memory._snapshot()'s format)
    when an allocation fails / at exit. SIGUSR2 always writes one (unless the process handles SIGUSR2 itself).
``MEMSCOPE_DUMP_PATH``
    the snapshot file, or a folder that gets ``memscope-<pid>-<n>.pickle`` (default: the current folder).

Only torch is needed; ``dump_snapshot()`` uses ctypes from the standard library.
"""

import ctypes
import os

__all__ = ["find_library", "use", "dump_snapshot"]

_LIBRARY_NAME = "libmemscope-agent.so"
_allocator = None
_library_path = None


def find_library(path=None):
    """Returns the path of libmemscope-agent.so (see the module's docstring for the search order)."""
    if path:
        if not os.path.exists(path):
            raise FileNotFoundError("memscope agent library not found: %s" % path)
        return os.path.abspath(path)
    env = os.environ.get("MEMSCOPE_AGENT_LIB")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError("MEMSCOPE_AGENT_LIB names a missing file: %s" % env)
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.path.join(here, _LIBRARY_NAME),
        os.path.join(here, "..", "lib", _LIBRARY_NAME),
        os.path.join(here, "..", "..", "lib", _LIBRARY_NAME),
        os.path.join(here, "..", "..", "build", "lib", _LIBRARY_NAME),
        os.path.join(os.getcwd(), "build", "lib", _LIBRARY_NAME),
    ]
    for candidate in candidates:
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return _LIBRARY_NAME  # let the dynamic loader search (LD_LIBRARY_PATH, ldconfig)


def use(path=None):
    """Installs memscope's allocator as torch's CUDA allocator; returns the CUDAPluggableAllocator.

    Must run before anything allocates CUDA memory. Calling it again returns the allocator already installed.
    """
    global _allocator, _library_path
    if _allocator is not None:
        return _allocator
    import torch

    library = find_library(path)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library, "memscope_malloc", "memscope_free")
    torch.cuda.memory.change_current_allocator(allocator)
    _allocator = allocator
    _library_path = library
    return allocator


def dump_snapshot(path=None):
    """Writes the agent's snapshot pickle now (memscope_dump_snapshot); returns 0, or raises OSError."""
    library = ctypes.CDLL(_library_path or find_library())
    library.memscope_dump_snapshot.argtypes = [ctypes.c_char_p]
    library.memscope_dump_snapshot.restype = ctypes.c_int
    library.memscope_last_error.restype = ctypes.c_char_p
    if library.memscope_dump_snapshot(path.encode() if path else None) != 0:
        raise OSError(library.memscope_last_error().decode(errors="replace"))
    return 0
