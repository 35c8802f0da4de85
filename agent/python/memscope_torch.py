"""memscope_torch: show a PyTorch job's GPU memory in memscope, live.

Two ways, both publishing to every memscope viewer (``memscope --attach``, ``memscope-cli record``):

``observe()`` (or ``python -m memscope_torch train.py ARGS``)
    PyTorch's own caching allocator stays in charge; memscope attaches a trace tracker to it (a small torch
    extension, ``memscope_observer.cpp`` beside this file, built by ``torch.utils.cpp_extension`` the first time:
    it needs a C++ compiler and the CUDA toolkit) and publishes every event with the user's Python call stacks
    (``stacks="python"``, PyTorch's own memory history with ``max_entries=1``). CUDA graphs, private pools,
    expandable segments and every allocator setting behave exactly as without memscope. Choose it for any PyTorch
    job. The job's threads do no more than PyTorch's own history makes them do (capture each allocation's
    context); memscope names the frames on threads of its own, each distinct line once, and takes the interpreter
    lock only for lines it has not seen. Should a thread of the job keep that lock for long, events go out
    without their stacks meanwhile and one line on stderr says so; ``observer_stats()`` tells what observing cost.
``use()`` (or ``python -m memscope_torch --use train.py ARGS``)
    memscope's own allocator (the same decisions as PyTorch's) replaces PyTorch's through
    ``CUDAPluggableAllocator``; the agent reads the Python frames of each allocation and free itself
    (``stacks="python"``; ``"all"`` adds native frames). Choose it where there is no compiler, for programs that
    are not PyTorch, or for the agent's dumps; torch cannot run CUDA graphs (``mode="reduce-overhead"``) on a
    pluggable allocator.

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
``MEMSCOPE_STACKS``
    ``python`` (use()'s default), ``all``, ``N`` (N native frames) or ``0`` (none).
``MEMSCOPE_ALLOC_CONF``
    allocator settings, PYTORCH_CUDA_ALLOC_CONF's syntax (falls back to PYTORCH_ALLOC_CONF, then
    PYTORCH_CUDA_ALLOC_CONF), e.g. ``expandable_segments:True,max_split_size_mb:128``.
``MEMSCOPE_DUMP_ON``
    ``oom``, ``exit`` or both (``oom,exit``): write a snapshot pickle (torch.cuda.memory._snapshot()'s format)
    when an allocation fails / at exit. SIGUSR2 always writes one (unless the process handles SIGUSR2 itself).
``MEMSCOPE_DUMP_PATH``
    the snapshot file, or a folder that gets ``memscope-<pid>-<n>.pickle`` (default: the current folder).
``MEMSCOPE_COMPRESS``
    ``lz4`` or ``none``: LZ4-compressed event batches (default: on for ``tcp://`` endpoints, off for ``ipc://``).
``MEMSCOPE_CURVE_SECRET``, ``MEMSCOPE_CURVE_CLIENTS``
    the agent's CURVE secret key file (mode 0600) and the authorised viewers' public keys; required for a
    ``tcp://`` endpoint that is not loopback (``tcp://:PORT`` binds 127.0.0.1, which every local user can reach:
    without keys only with ``MEMSCOPE_INSECURE_TCP=1``). See docs/protocol.md.
``MEMSCOPE_RING_RECORDS``
    records buffered per device between the allocator and the publisher thread (default 131072, 9 MiB).

Out of memory: torch's ``CUDAPluggableAllocator`` does not check the pointer its malloc function returns
(torch/csrc/cuda/CUDAPluggableAllocator.cpp, ``CUDAPluggableAllocator::malloc`` stores it and ``allocate`` wraps
it in a ``DataPtr``), so a NULL from ``memscope_malloc`` would become a tensor at address 0 and crash the job at its
first kernel. ``use()`` therefore installs ``memscope_malloc_raising`` by default (``oom="raise"``): on out of
memory the agent publishes the oom event, writes the snapshot if ``MEMSCOPE_DUMP_ON`` contains ``oom``, prints one
line on stderr (device, requested bytes, free device memory) and throws a C++ ``std::bad_alloc`` carrying
PyTorch's "CUDA out of memory. Tried to allocate ..." message, which torch's bindings raise as a Python
``RuntimeError`` (not ``torch.OutOfMemoryError``: torch makes that only from its own ``c10::OutOfMemoryError``;
pytorch/pytorch#133280 describes the same for the RAPIDS allocator). Catch ``RuntimeError`` and look for "out of
memory" in the message. ``oom="null"`` installs ``memscope_malloc`` instead, which returns NULL (the C contract,
as ``cudaMalloc``), for callers that check it themselves.

Checked on an NVIDIA H200 with torch 2.11.0+cu130 (2026-11-21), asking for twice the GPU's memory: with
``oom="raise"`` torch raised ``RuntimeError: CUDA out of memory. Tried to allocate 279.60 GiB. GPU 0 has a total
capacity of 139.80 GiB ...`` and the job went on allocating; with ``oom="null"`` ``torch.empty`` returned a tensor
whose ``data_ptr()`` is 0, the first kernel on it failed with "an illegal memory access was encountered", and every
CUDA call after that failed too (the context is lost).

Only torch is needed; ``dump_snapshot()`` uses ctypes from the standard library.
"""

import atexit
import ctypes
import os
import sys

__all__ = ["find_library", "use", "observe", "observer_stats", "stop_observing", "dump_snapshot"]

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


_MALLOC_BY_POLICY = {"raise": "memscope_malloc_raising", "null": "memscope_malloc"}


_STACKS = {"python": "python", "all": "all", None: "0"}


def use(path=None, oom="raise", stacks="python"):
    """Installs memscope's allocator as torch's CUDA allocator; returns the CUDAPluggableAllocator.

    Must run before anything allocates CUDA memory. Calling it again returns the allocator already installed.
    ``oom``: ``"raise"`` (an allocation that fails raises RuntimeError) or ``"null"`` (it returns NULL, which torch
    does not check); see the module's docstring. ``stacks``: ``"python"`` (each event carries the Python frames of
    the code that allocated or freed: function, file, line), ``"all"`` (native frames too, then the Python ones) or
    ``None`` (no stacks: the cheapest); ``$MEMSCOPE_STACKS``, when set, wins.
    """
    global _allocator, _library_path
    if _allocator is not None:
        return _allocator
    if oom not in _MALLOC_BY_POLICY:
        raise ValueError("memscope_torch.use: oom must be 'raise' or 'null', not %r" % (oom,))
    if stacks not in _STACKS:
        raise ValueError("memscope_torch.use: stacks must be 'python', 'all' or None, not %r" % (stacks,))
    import torch

    library = find_library(path)
    # The agent reads its environment when torch first allocates, after this.
    os.environ.setdefault("MEMSCOPE_STACKS", _STACKS[stacks])
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library, _MALLOC_BY_POLICY[oom], "memscope_free")
    torch.cuda.memory.change_current_allocator(allocator)
    _allocator = allocator
    _library_path = library
    agent = ctypes.CDLL(library)
    agent.memscope_annotate.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    agent.memscope_annotate.restype = ctypes.c_int
    _annotate_record_function(torch, agent.memscope_annotate)
    if os.environ["MEMSCOPE_STACKS"] in ("python", "all") and not getattr(torch.autograd.backward, "_memscope", False):
        # PyDLL: the calls keep the GIL, which memscope_python_backward_begin needs to read the caller's frames.
        agent = ctypes.PyDLL(library)
        agent.memscope_python_backward_begin.restype = ctypes.c_int
        agent.memscope_python_backward_end.argtypes = [ctypes.c_int]
        _attribute_backward(torch, agent.memscope_python_backward_begin, agent.memscope_python_backward_end)
    return allocator


_observer = None  # the built extension, once observe() ran
_observer_endpoint = None


def _include_dir():
    """The folder holding memscope/observe.h: a source tree's agent/include, or include/ beside this file."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "..", "include"), os.path.join(here, "include")):
        if os.path.exists(os.path.join(candidate, "memscope", "observe.h")):
            return os.path.abspath(candidate)
    raise FileNotFoundError("memscope/observe.h not found beside %s" % here)


def _build_observer(library, verbose):
    from torch.utils import cpp_extension

    here = os.path.dirname(os.path.abspath(__file__))
    return cpp_extension.load(
        name="memscope_observer",
        sources=[os.path.join(here, "memscope_observer.cpp")],
        extra_include_paths=[_include_dir()],
        extra_ldflags=[library, "-Wl,-rpath," + os.path.dirname(library)],
        with_cuda=True,
        verbose=verbose,
    )


def observe(endpoint=None, stacks="python", context="alloc", path=None, verbose=False):
    """Publishes PyTorch's own CUDA caching allocator's events to memscope's viewers; returns the endpoint.

    ``endpoint``: where (``ipc:///path`` or ``tcp://host:port``; default ``$MEMSCOPE_ENDPOINT``, else
    ``ipc://$XDG_RUNTIME_DIR/memscope-<pid>``). ``stacks``: ``"python"`` (the user's Python frames),
    ``"all"`` (Python and C++ frames, slower) or ``None`` (no stacks: the cheapest). ``context``: whose stacks
    PyTorch captures, ``"alloc"`` (allocations) or ``"all"`` (frees too). Without CUDA, a compiler or the CUDA
    toolkit it prints one line and returns None: the job runs on, unobserved. Calling it again returns the endpoint
    already in use.
    """
    global _observer, _observer_endpoint
    if _observer_endpoint is not None:
        return _observer_endpoint
    import torch

    if not torch.cuda.is_available():
        print("memscope: no CUDA device: the job runs unobserved", file=sys.stderr)
        return None
    try:
        library = find_library(path)
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
        if _observer is None:
            _observer = _build_observer(library, verbose)
    except Exception as e:  # a missing compiler or toolkit must not stop the job
        print("memscope: cannot build the observer (%s: %s): the job runs unobserved"
              % (type(e).__name__, str(e).strip().splitlines()[-1] if str(e).strip() else ""), file=sys.stderr)
        return None
    torch.cuda.init()
    if stacks:
        # PyTorch captures a context per event only while its memory history is on; one entry of its own trace
        # is kept (memscope keeps the history).
        torch.cuda.memory._record_memory_history(enabled="all", context=context, stacks=stacks, max_entries=1)
    if stacks and not getattr(torch.autograd.backward, "_memscope", False):
        _attribute_backward(torch, _observer.backward_begin, _observer.backward_end)
    # Frees carry stacks of their own only under context="all"; else the allocation's, which the viewers know.
    _observer_endpoint = _observer.start(endpoint or os.environ.get("MEMSCOPE_ENDPOINT", ""),
                                         bool(stacks) and context == "all")
    atexit.register(stop_observing)
    print("memscope: observing PyTorch's allocator at %s" % _observer_endpoint, file=sys.stderr)
    return _observer_endpoint


def _annotate_record_function(torch, annotate):
    """record_function scopes (torch.profiler.record_function is torch.autograd.profiler.record_function; the
    optimizers' ``Optimizer.step#...`` too) become notes for memscope's viewers, as PyTorch's own memory history
    keeps them. Under use() there is no extension to hook PyTorch's C++ RecordFunction, so the Python class is
    wrapped: scopes opened from C++ alone (torch.compile's generated code) are not seen."""
    cls = torch.autograd.profiler.record_function
    if getattr(cls, "_memscope", False):
        return
    enter, leave = cls.__enter__, cls.__exit__

    def device():
        return torch.cuda.current_device() if torch.cuda.is_initialized() else 0

    def __enter__(self):
        result = enter(self)
        annotate(str(self.name).encode("utf-8", "replace"), 1, device())
        return result

    def __exit__(self, *exc):
        annotate(str(self.name).encode("utf-8", "replace"), 0, device())
        return leave(self, *exc)

    cls.__enter__, cls.__exit__, cls._memscope = __enter__, __exit__, True


def _attribute_backward(torch, begin, end):
    """Allocations of the autograd engine's threads carry no Python frames; while torch.autograd.backward runs
    (Tensor.backward calls it), they get the frames of its caller, under an "<autograd engine>" frame."""
    real = torch.autograd.backward

    def backward(*args, **kwargs):
        token = begin()
        try:
            return real(*args, **kwargs)
        finally:
            end(token)

    backward._memscope = True
    backward.__wrapped__ = real
    torch.autograd.backward = backward


def observer_stats():
    """What observe() has cost so far, as a dict: records and drops, contexts, distinct stacks and Python frames,
    the symboliser's interpreter-lock takes, waits and hold times (ms), frames named late, records sent without
    their stack, and the publisher thread's time naming stacks. Empty before observe()."""
    return dict(_observer.stats()) if _observer is not None else {}


def stop_observing():
    """Publishes what is queued and a goodbye; called at exit by itself."""
    global _observer_endpoint
    if _observer is not None and _observer_endpoint is not None:
        _observer.stop()
        _observer_endpoint = None


def dump_snapshot(path=None):
    """Writes the agent's snapshot pickle now (memscope_dump_snapshot); returns 0, or raises OSError."""
    library = ctypes.CDLL(_library_path or find_library())
    library.memscope_dump_snapshot.argtypes = [ctypes.c_char_p]
    library.memscope_dump_snapshot.restype = ctypes.c_int
    library.memscope_last_error.restype = ctypes.c_char_p
    if library.memscope_dump_snapshot(path.encode() if path else None) != 0:
        raise OSError(library.memscope_last_error().decode(errors="replace"))
    return 0


def _main(argv):
    """python -m memscope_torch [--use] [--stacks python|all|none] [--endpoint E] SCRIPT [ARGS...]"""
    import runpy

    mode, stacks, endpoint = "observe", "python", None
    while argv and argv[0].startswith("--"):
        option = argv.pop(0)
        if option == "--use":
            mode = "use"
        elif option == "--stacks" and argv:
            stacks = None if argv[0] == "none" else argv[0]
            argv.pop(0)
        elif option == "--endpoint" and argv:
            endpoint = argv.pop(0)
        else:
            print("usage: python -m memscope_torch [--use] [--stacks python|all|none] [--endpoint E] SCRIPT [ARGS]",
                  file=sys.stderr)
            return 2
    if not argv:
        print("usage: python -m memscope_torch [--use] [--stacks python|all|none] [--endpoint E] SCRIPT [ARGS]",
              file=sys.stderr)
        return 2
    if mode == "use":
        if endpoint:
            os.environ["MEMSCOPE_ENDPOINT"] = endpoint
        use(stacks=stacks)
    else:
        observe(endpoint=endpoint, stacks=stacks)
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
