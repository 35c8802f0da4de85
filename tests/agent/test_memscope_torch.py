"""memscope_torch's own logic without torch (CI has no torch): a fake ``torch`` package stands in, so what is tested
is memscope_torch's decisions: observe() never stops a job (no CUDA, no compiler: one line, None), it starts the
extension with the endpoint asked for, switches PyTorch's memory history on only for stacks, wraps
torch.autograd.backward once and always ends what it began, and ``python -m memscope_torch`` parses its options and
runs the script as __main__ with the script's own argv.

Run by CTest: python3 -m unittest test_memscope_torch (MEMSCOPE_SOURCE_DIR names the source tree).
"""
import io
import os
import sys
import tempfile
import types
import unittest
from contextlib import redirect_stderr

SOURCE = os.environ.get("MEMSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "agent", "python"))


class FakeExtension:
    def __init__(self):
        self.calls = []
        self.next_token = 7

    def start(self, endpoint, free_contexts=False):
        self.calls.append(("start", endpoint, free_contexts))
        return endpoint or "ipc:///tmp/fake-default"

    def stop(self):
        self.calls.append(("stop",))

    def backward_begin(self):
        self.calls.append(("begin",))
        return self.next_token

    def backward_end(self, token):
        self.calls.append(("end", token))


def fake_torch(cuda=True):
    torch = types.ModuleType("torch")
    torch.history = []
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: cuda,
        init=lambda: None,
        memory=types.SimpleNamespace(_record_memory_history=lambda **kw: torch.history.append(kw)),
    )

    def real_backward(*args, **kwargs):
        torch.backward_args = (args, kwargs)
        if kwargs.get("fail"):
            raise RuntimeError("backward failed")
        return "done"

    class record_function:  # torch.autograd.profiler.record_function's shape
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            torch.history.append(("enter", self.name))
            return self

        def __exit__(self, *exc):
            torch.history.append(("exit", self.name))
            return False

    torch.autograd = types.SimpleNamespace(backward=real_backward,
                                           profiler=types.SimpleNamespace(record_function=record_function))
    torch.cuda.is_initialized = lambda: True
    torch.cuda.current_device = lambda: 3
    return torch


class ObserveTest(unittest.TestCase):
    def setUp(self):
        import memscope_torch

        self.m = memscope_torch
        self.m._observer = None
        self.m._observer_endpoint = None
        self.saved = sys.modules.get("torch")
        self.library = tempfile.NamedTemporaryFile(suffix=".so", delete=False)
        self.library.close()
        self.restore = (self.m._build_observer, self.m.find_library, self.m.ctypes.CDLL, list(sys.argv))

    def tearDown(self):
        if self.saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self.saved
        os.unlink(self.library.name)
        self.m._build_observer, self.m.find_library, self.m.ctypes.CDLL, sys.argv[:] = self.restore
        self.m._observer = None
        self.m._observer_endpoint = None

    def observe(self, torch, build, **kwargs):
        sys.modules["torch"] = torch
        self.m._build_observer = build
        self.m.ctypes.CDLL = lambda *a, **k: None  # the fake library is not loaded
        err = io.StringIO()
        with redirect_stderr(err):
            endpoint = self.m.observe(path=self.library.name, **kwargs)
        return endpoint, err.getvalue()

    def test_no_cuda_runs_unobserved(self):
        endpoint, err = self.observe(fake_torch(cuda=False), lambda *a: self.fail("must not build"))
        self.assertIsNone(endpoint)
        self.assertEqual(err, "memscope: no CUDA device: the job runs unobserved\n")

    def test_build_failure_runs_unobserved(self):
        def build(library, verbose):
            raise RuntimeError("Error building extension 'memscope_observer'\nc++: not found")

        torch = fake_torch()
        endpoint, err = self.observe(torch, build)
        self.assertIsNone(endpoint)
        self.assertEqual(err.count("\n"), 1)
        self.assertIn("cannot build the observer (RuntimeError: c++: not found)", err)
        self.assertEqual(torch.history, [])

    def test_observe_with_stacks(self):
        ext = FakeExtension()
        torch = fake_torch()
        endpoint, err = self.observe(torch, lambda library, verbose: ext, endpoint="ipc:///tmp/job")
        self.assertEqual(endpoint, "ipc:///tmp/job")
        # Frees carry no contexts of their own with context="alloc" (the allocation's stands for them).
        self.assertEqual(ext.calls, [("start", "ipc:///tmp/job", False)])
        self.assertEqual(torch.history, [dict(enabled="all", context="alloc", stacks="python", max_entries=1)])
        self.assertIn("observing PyTorch's allocator at ipc:///tmp/job", err)
        # A second call changes nothing.
        self.assertEqual(self.m.observe(), "ipc:///tmp/job")
        self.assertEqual(len(ext.calls), 1)
        # backward is wrapped once: the caller's stack stands for the autograd engine's allocations.
        wrapped = torch.autograd.backward
        self.assertTrue(wrapped._memscope)
        self.assertEqual(wrapped("loss", retain_graph=True), "done")
        self.assertEqual(torch.backward_args, (("loss",), {"retain_graph": True}))
        self.assertEqual(ext.calls[-2:], [("begin",), ("end", 7)])
        with self.assertRaises(RuntimeError):
            wrapped(fail=True)
        self.assertEqual(ext.calls[-1], ("end", 7))
        self.m.stop_observing()
        self.assertEqual(ext.calls[-1], ("stop",))

    def test_observe_with_free_contexts(self):
        ext = FakeExtension()
        endpoint, _ = self.observe(fake_torch(), lambda library, verbose: ext, endpoint="ipc:///tmp/job",
                                   context="all")
        self.assertEqual(ext.calls[0], ("start", "ipc:///tmp/job", True))

    def test_observe_without_stacks(self):
        ext = FakeExtension()
        torch = fake_torch()
        before = torch.autograd.backward
        endpoint, _ = self.observe(torch, lambda library, verbose: ext, stacks=None)
        self.assertEqual(endpoint, "ipc:///tmp/fake-default")
        self.assertEqual(torch.history, [])
        self.assertIs(torch.autograd.backward, before)

    def test_header_is_found(self):
        self.assertTrue(os.path.exists(os.path.join(self.m._include_dir(), "memscope", "observe.h")))

    def test_main(self):
        ext = FakeExtension()
        sys.modules["torch"] = fake_torch()
        self.m._build_observer = lambda library, verbose: ext
        self.m.ctypes.CDLL = lambda *a, **k: None
        self.m.find_library = lambda path=None: self.library.name
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "train.py")
            out = os.path.join(d, "ran")
            with open(script, "w") as f:
                f.write("import sys\nopen(%r, 'w').write(__name__ + ' ' + ' '.join(sys.argv))\n" % out)
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(self.m._main(["--stacks", "none", "--endpoint", "ipc:///tmp/j", script, "--lr",
                                               "3"]), 0)
                self.assertEqual(self.m._main(["--bogus", script]), 2)
                self.assertEqual(self.m._main([]), 2)
            with open(out) as f:
                self.assertEqual(f.read(), "__main__ %s --lr 3" % script)
            self.assertEqual(ext.calls[0], ("start", "ipc:///tmp/j", False))
            self.assertEqual(err.getvalue().count("usage: python -m memscope_torch"), 2)



class FakeAgent:
    """ctypes.PyDLL's stand-in for libmemscope-agent.so: its backward functions."""

    def __init__(self, calls):
        class Function:
            def __init__(self, name):
                self.name = name
                self.restype = self.argtypes = None

            def __call__(self, *args):
                calls.append((self.name,) + args)
                return 5 if self.name == "begin" else None

        self.memscope_python_backward_begin = Function("begin")
        self.memscope_python_backward_end = Function("end")
        self.memscope_annotate = Function("annotate")


class UseTest(unittest.TestCase):
    """use(): the allocator is swapped, MEMSCOPE_STACKS is set for the agent unless the user set it, and backward
    is wrapped with the agent's own begin/end (through ctypes.PyDLL, which keeps the GIL)."""

    def setUp(self):
        import memscope_torch

        self.m = memscope_torch
        self.m._allocator = None
        self.saved = sys.modules.get("torch")
        self.saved_env = os.environ.get("MEMSCOPE_STACKS")
        os.environ.pop("MEMSCOPE_STACKS", None)
        self.library = tempfile.NamedTemporaryFile(suffix=".so", delete=False)
        self.library.close()
        self.restore = self.m.ctypes.PyDLL
        self.calls = []
        self.loaded = []

        def pydll(path):
            self.loaded.append(path)
            return FakeAgent(self.calls)

        self.m.ctypes.PyDLL = pydll
        self.restore_cdll = self.m.ctypes.CDLL
        self.m.ctypes.CDLL = lambda path, *a, **k: FakeAgent(self.calls)
        torch = fake_torch()
        torch.cuda.memory.CUDAPluggableAllocator = lambda lib, malloc, free: ("allocator", lib, malloc, free)
        torch.cuda.memory.change_current_allocator = lambda a: self.calls.append(("installed", a[2]))
        sys.modules["torch"] = torch
        self.torch = torch

    def tearDown(self):
        self.m.ctypes.PyDLL = self.restore
        self.m.ctypes.CDLL = self.restore_cdll
        self.m._allocator = None
        if self.saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self.saved
        if self.saved_env is None:
            os.environ.pop("MEMSCOPE_STACKS", None)
        else:
            os.environ["MEMSCOPE_STACKS"] = self.saved_env
        os.unlink(self.library.name)

    def test_python_stacks_by_default(self):
        self.m.use(self.library.name)
        self.assertEqual(os.environ["MEMSCOPE_STACKS"], "python")
        self.assertEqual(self.calls, [("installed", "memscope_malloc_raising")])
        self.assertEqual(self.loaded, [os.path.abspath(self.library.name)])
        wrapped = self.torch.autograd.backward
        self.assertTrue(wrapped._memscope)
        self.assertEqual(wrapped("loss"), "done")
        self.assertEqual(self.calls[-2:], [("begin",), ("end", 5)])
        with self.assertRaises(RuntimeError):
            wrapped(fail=True)
        self.assertEqual(self.calls[-1], ("end", 5))

    def test_record_function_scopes_are_published(self):
        self.m.use(self.library.name)
        rf = self.torch.autograd.profiler.record_function
        with rf("step_7"):
            self.calls.append(("inside",))
        self.assertEqual(self.calls[-3:], [("annotate", b"step_7", 1, 3), ("inside",), ("annotate", b"step_7", 0, 3)])
        self.assertEqual(self.torch.history[-2:], [("enter", "step_7"), ("exit", "step_7")])  # the real ones ran
        # A second use() (another allocator module, say) does not wrap twice.
        self.m._allocator = None
        self.m.use(self.library.name)
        before = len(self.calls)
        with rf("x"):
            pass
        self.assertEqual(len([c for c in self.calls[before:] if c[0] == "annotate"]), 2)

    def test_user_setting_wins(self):
        os.environ["MEMSCOPE_STACKS"] = "16"
        before = self.torch.autograd.backward
        self.m.use(self.library.name, stacks="all")
        self.assertEqual(os.environ["MEMSCOPE_STACKS"], "16")
        self.assertIs(self.torch.autograd.backward, before)  # native frames only: nothing to attribute

    def test_no_stacks(self):
        before = self.torch.autograd.backward
        self.m.use(self.library.name, stacks=None)
        self.assertEqual(os.environ["MEMSCOPE_STACKS"], "0")
        self.assertIs(self.torch.autograd.backward, before)
        self.assertEqual(self.loaded, [])

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            self.m.use(self.library.name, stacks="native")
        with self.assertRaises(ValueError):
            self.m.use(self.library.name, oom="ignore")
        self.assertEqual(self.calls, [])


if __name__ == "__main__":
    unittest.main()
