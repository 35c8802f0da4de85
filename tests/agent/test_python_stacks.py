"""The agent's Python call stacks (agent/src/pythonstacks.h, MEMSCOPE_STACKS=python) in a real python3 process.

A job (this file run with --job) loads libmemscope-agent.so with ctypes (the host backend: no GPU), allocates and
frees through memscope_malloc / memscope_free from Python functions, and writes down, for every allocation, the
Python stack it was made under (traceback.extract_stack on the same line as the call). `memscope-cli record`
records the job; the test reads the recording (a snapshot pickle, with Python's pickle) and compares every
allocation's frames with what the job wrote: function, file and line of each frame, innermost first.

What the job does, each a way the agent is called in a training job:
- calls with the GIL held (ctypes.PyDLL: a tensor freed by Python's reference counting) and released (ctypes.CDLL:
  torch's ops release the GIL), which the capture then takes;
- calls from a second Python thread (a data loader);
- a garbage collection that runs inside a capture and frees blocks from __del__ (gc.set_threshold(1)): the nested
  free is recorded, without a stack, and nothing deadlocks;
- memscope_python_backward_begin/end around an allocation from a native thread (tests/agent/nativethread.cpp, as
  the autograd engine's): it gets the stack of the backward() caller under an "<autograd engine>" frame; after end,
  none.

Run by CTest: python3 -m unittest test_python_stacks (MEMSCOPE_AGENT_LIB, MEMSCOPE_CLI and
MEMSCOPE_NATIVE_THREAD_LIB name the built files).
"""
import ctypes
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest

MiB = 1 << 20


def stack_here(depth=64):
    """The caller's stack as the agent names it: (function, file, line), innermost first."""
    frames = traceback.extract_stack()[:-1]  # without this function
    return [[f.name, f.filename, f.lineno] for f in reversed(frames)][:depth]


class Job:
    def __init__(self, library):
        # RTLD_GLOBAL: nativethread.cpp finds memscope_malloc by name.
        self.gil = ctypes.PyDLL(library, mode=ctypes.RTLD_GLOBAL)  # keeps the GIL during the call
        self.nogil = ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)  # releases it
        for lib in (self.gil, self.nogil):
            lib.memscope_malloc.restype = ctypes.c_void_p
            lib.memscope_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            lib.memscope_free.restype = None
            lib.memscope_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.expected = []  # [size, frames]
        self.size = 3 * MiB  # every allocation its own size, so that the test finds it again

    def next_size(self):
        self.size += 4096
        return self.size

    def alloc_with_gil(self):
        size = self.next_size()
        p = self.gil.memscope_malloc(size, 0, None); frames = stack_here()  # noqa: E702 (one line: one line number)
        self.expected.append([size, frames])
        return p

    def alloc_without_gil(self):
        size = self.next_size()
        p = self.nogil.memscope_malloc(size, 0, None); frames = stack_here()  # noqa: E702
        self.expected.append([size, frames])
        return p

    def free(self, p):
        self.gil.memscope_free(p, 0, 0, None)


class Activation:
    """Frees its block when collected, as a tensor does."""

    def __init__(self, job, p):
        self.job, self.p = job, p
        self.cycle = self  # only the garbage collector frees it

    def __del__(self):
        self.job.gil.memscope_free(self.p, 0, 0, None)


def activation(job, depth=3):
    if depth > 0:
        return activation(job, depth - 1)  # frames the capture is the first to make objects of
    Activation(job, job.gil.memscope_malloc(4096, 0, None))


def layer(job, gil):
    return job.alloc_with_gil() if gil else job.alloc_without_gil()


def forward(job, gil):
    return [layer(job, gil) for _ in range(3)]


def run_job(library, out):
    job = Job(library)
    job.gil.memscope_backend_name()  # sets the agent up: it publishes from now on
    time.sleep(float(os.environ.get("JOB_DELAY", "1.5")))  # the recorder joins
    kept = forward(job, gil=True) + forward(job, gil=False)

    def loader():
        kept.append(job.alloc_with_gil())
        kept.append(job.alloc_without_gil())

    t = threading.Thread(target=loader, name="loader")
    t.start()
    t.join()

    # The autograd engine: a native thread's allocation gets the stack of the backward() under way, and none
    # after it ended.
    native = ctypes.CDLL(os.environ["MEMSCOPE_NATIVE_THREAD_LIB"], mode=ctypes.RTLD_GLOBAL)
    native.memscope_test_malloc_on_native_thread.restype = ctypes.c_void_p
    native.memscope_test_malloc_on_native_thread.argtypes = [ctypes.c_size_t]
    token = job.gil.memscope_python_backward_begin(); engine_frames = stack_here()  # noqa: E702
    kept.append(job.alloc_with_gil())
    kept.append(native.memscope_test_malloc_on_native_thread(5 * MiB))
    job.gil.memscope_python_backward_end(token)
    kept.append(native.memscope_test_malloc_on_native_thread(5 * MiB + 4096))

    # Garbage collections inside captures: each allocation below comes from new calls of activation(), whose
    # frame objects the agent's capture makes (Python 3.11 makes frame objects on demand); with a threshold of 1
    # that starts a collection there, which frees earlier Activations' blocks from __del__, inside the capture.
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    for _ in range(200):
        activation(job)
    gc.set_threshold(*old)
    gc.collect()

    for p in kept:
        job.free(p)
    job.gil.memscope_publish_stop()
    with open(out, "w") as f:
        json.dump({"expected": job.expected, "token": token, "engine": engine_frames}, f)


class PythonStacksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.library = os.environ.get("MEMSCOPE_AGENT_LIB")
        cls.cli = os.environ.get("MEMSCOPE_CLI")
        if not cls.library or not cls.cli or not os.environ.get("MEMSCOPE_NATIVE_THREAD_LIB"):
            raise unittest.SkipTest("MEMSCOPE_AGENT_LIB, MEMSCOPE_CLI and MEMSCOPE_NATIVE_THREAD_LIB name built files")
        cls.folder = tempfile.TemporaryDirectory()
        endpoint = "ipc://" + os.path.join(cls.folder.name, "job")
        expected_file = os.path.join(cls.folder.name, "expected.json")
        recording = os.path.join(cls.folder.name, "recording.pickle")
        env = dict(os.environ, MEMSCOPE_AGENT_BACKEND="host", MEMSCOPE_STACKS="python",
                   MEMSCOPE_ENDPOINT=endpoint, PYTHONDONTWRITEBYTECODE="1")
        job = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--job", cls.library, expected_file],
                               env=env, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        record = subprocess.run([cls.cli, "record", endpoint, "-o", recording, "--timeout", "20"],
                                capture_output=True, text=True, timeout=120)
        cls.job_err = job.communicate(timeout=120)[1]
        cls.job_status = job.returncode
        cls.record = record
        cls.expected = None
        if os.path.exists(expected_file):
            with open(expected_file) as f:
                cls.expected = json.load(f)
        cls.snapshot = None
        if os.path.exists(recording):
            with open(recording, "rb") as f:
                cls.snapshot = pickle.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_job_and_recording_complete(self):
        self.assertEqual(self.job_status, 0, self.job_err)
        self.assertEqual(self.record.returncode, 0, self.record.stderr)
        self.assertIn("(the job said goodbye)", self.record.stdout)
        self.assertIn("lost 0, gaps 0 (0 missing), inconsistent 0", self.record.stdout)
        self.assertIn("records 1 to", self.record.stdout)  # joined before the first event: the whole trace
        self.assertNotIn("warning", self.record.stderr)
        self.assertIsNotNone(self.snapshot)
        self.assertIsNotNone(self.expected)

    def allocations(self):
        trace = self.snapshot["device_traces"][0]
        return {e["size"]: e for e in trace if e["action"] == "alloc"}

    def test_every_allocation_has_its_python_stack(self):
        by_size = self.allocations()
        self.assertEqual(len(self.expected["expected"]), 9)
        for size, frames in self.expected["expected"]:
            with self.subTest(size=size, where=frames[0]):
                self.assertIn(size, by_size)
                got = [[f["name"], f["filename"], f["line"]] for f in by_size[size]["frames"]]
                self.assertEqual(got, frames)

    def test_stacks_reach_the_script(self):
        by_size = self.allocations()
        this_file = os.path.abspath(__file__)
        kinds = {}
        for size, frames in self.expected["expected"]:
            names = [f["name"] for f in by_size[size]["frames"]]
            self.assertEqual(by_size[size]["frames"][0]["filename"], this_file)
            kinds.setdefault(names[0], set()).add(names[1])
        self.assertEqual(kinds["alloc_with_gil"], {"layer", "loader", "run_job"})
        self.assertEqual(kinds["alloc_without_gil"], {"layer", "loader"})
        loader = [self.expected["expected"][i][1] for i in (6, 7)]
        for frames in loader:
            self.assertEqual(frames[1][0], "loader")
            self.assertEqual(frames[2][0], "run")  # threading.Thread.run: the thread's own stack, not the main one

    def test_frees_nested_in_a_capture_are_recorded(self):
        trace = self.snapshot["device_traces"][0]
        small = [e for e in trace if e["size"] == 4096 and e["action"] in ("alloc", "free_requested")]
        allocs = [e for e in small if e["action"] == "alloc"]
        frees = [e for e in small if e["action"] == "free_requested"]
        self.assertEqual(len(allocs), 200)
        self.assertEqual(len(frees), 200)
        self.assertTrue(all(e["frames"] and e["frames"][0]["name"] == "activation" for e in allocs))
        # A free nested in a capture has no stack; the others name __del__. Python 3.12 and later run collections
        # between bytecodes only, never inside the capture.
        nested = [e for e in frees if not e["frames"]]
        self.assertTrue(all(e["frames"][0]["name"] == "__del__" for e in frees if e["frames"]))
        if sys.version_info < (3, 12):
            self.assertGreater(len(nested), 0)
        # Nothing left allocated: every block freed, blocks of the final state are all inactive.
        for segment in self.snapshot["segments"]:
            for block in segment["blocks"]:
                self.assertNotEqual(block["state"], "active_allocated")

    def test_autograd_engine_thread(self):
        self.assertGreaterEqual(self.expected["token"], 0)
        by_size = self.allocations()
        during = [[f["name"], f["filename"], f["line"]] for f in by_size[5 * MiB]["frames"]]
        self.assertEqual(during, [["backward", "<autograd engine>", 0]] + self.expected["engine"])
        self.assertEqual(by_size[5 * MiB + 4096]["frames"], [])  # after backward_end: a thread without Python


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--job":
        run_job(sys.argv[2], sys.argv[3])
    else:
        unittest.main()
