"""memscope_torch.observe()'s path for Python stacks, in a real python3 process, without torch.

The observed allocator's contexts hold Python frames unnamed (code object, instruction offset), as PyTorch's
CapturedTraceback does; memscope names them on a symboliser thread of its own, which takes the interpreter lock only
for frames it has not seen (agent/src/pythonsymboliser.h). tests/agent/fakeobservedhost.cpp plays the torch
extension (agent/python/memscope_observer.cpp) around memscope's own allocator; a job (this file run with --job)
loads it with ctypes, allocates from Python functions handing over the frames of the caller, and writes down the
stack each allocation was made under. `memscope-cli record` records the job; the test compares each allocation's
frames in the recording with what the job wrote, and the recording's end state with the allocator's.

Jobs, each a shape that recorded nothing before memscope named frames itself:
- quick: the first allocation right after observing starts, 20 steps of 70 allocations and frees, exit well within
  a second; the recorder attached from the start (the job waits for it: MEMSCOPE_WAIT_FOR_VIEWER).
- shapes: a block used on a side stream (record_stream), one allocated there, allocations doubling until a capped
  allocator says out of memory, all freed, the cache emptied, 20 times: the recording's end state equals the
  allocator's, segment for segment and block for block.
- held: a thread of the job keeps the interpreter lock for 3 s (a long C call) while a native thread allocates from
  frames never seen: the events go out anyway, without stacks, and the job says so on stderr; once the lock is
  free, the same frames are named. A second recorder joins while blocks are live and gets their stacks in its
  state. Generated code's lines carry the frames the host says they stand for (torch.compile's code cache).

Run by CTest: python3 -m unittest test_observer_python (MEMSCOPE_FAKE_OBSERVED_LIB and MEMSCOPE_CLI name the built
files).
"""
import ctypes
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import unittest

MiB = 1 << 20


class Host:
    def __init__(self, library):
        self.lib = ctypes.CDLL(library)  # calls release the interpreter lock, as torch's ops do
        self.held = ctypes.PyDLL(library)  # keeps it
        u64p, i32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int32)
        for name in ("fake_alloc", "fake_alloc_on_native_thread"):
            f = getattr(self.lib, name)
            f.restype = ctypes.c_uint64
            f.argtypes = [ctypes.c_size_t, u64p, i32p, ctypes.c_size_t]
        self.lib.fake_alloc_on.restype = ctypes.c_uint64
        self.lib.fake_alloc_on.argtypes = [ctypes.c_size_t, ctypes.c_uint64, u64p, i32p, ctypes.c_size_t]
        self.lib.fake_record_stream.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
        self.lib.fake_set_fraction.argtypes = [ctypes.c_double]
        self.lib.fake_describe_state.restype = ctypes.c_size_t
        self.lib.fake_describe_state.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.fake_free.argtypes = [ctypes.c_uint64]
        self.lib.fake_alloc_series.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_size_t,
                                               ctypes.c_size_t, u64p, i32p, ctypes.c_size_t]
        self.lib.fake_series_join.restype = ctypes.c_size_t
        self.lib.fake_series_join.argtypes = [u64p, ctypes.c_size_t]
        self.lib.fake_start.argtypes = [ctypes.c_char_p]
        for name in ("fake_outstanding", "fake_twice", "fake_handed", "fake_released"):
            getattr(self.lib, name).restype = ctypes.c_uint64
        self.held.fake_hold_interpreter_lock.argtypes = [ctypes.c_int]
        self.expected = []  # [size, frames]
        self.size = 3 * MiB

    def next_size(self):
        self.size += 4096
        return self.size

    @staticmethod
    def frames_of_caller(depth=2):
        """The caller's caller's frames, innermost first: (code objects and instruction offsets, as a context
        holds them) and (function, file, line), as the recording must name them."""
        f = sys._getframe(depth)
        codes, lastis, named = [], [], []
        while f is not None:
            codes.append(id(f.f_code))
            lastis.append(f.f_lasti)
            named.append([f.f_code.co_name, f.f_code.co_filename, f.f_lineno])
            f = f.f_back
        n = len(codes)
        return (ctypes.c_uint64 * n)(*codes), (ctypes.c_int32 * n)(*lastis), n, named

    def alloc(self, native=False, size=None, stream=0):
        size = size or self.next_size()
        codes, lastis, n, named = self.frames_of_caller()
        if stream:
            p = self.lib.fake_alloc_on(size, stream, codes, lastis, n)
        else:
            f = self.lib.fake_alloc_on_native_thread if native else self.lib.fake_alloc
            p = f(size, codes, lastis, n)
        if p:
            self.expected.append([size, named])
        return p

    def state(self):
        n = self.lib.fake_describe_state(None, 0)
        buffer = ctypes.create_string_buffer(n + 1)
        self.lib.fake_describe_state(buffer, n + 1)
        return buffer.value.decode()


def step(host, keep):
    """70 allocations and frees of one training step."""
    blocks = [layer(host) for _ in range(35)]
    for p in blocks[:30]:
        host.lib.fake_free(p)
    keep.extend(blocks[30:])
    more = [host.alloc() for _ in range(35)]
    for p in more:
        host.lib.fake_free(p)


def layer(host):
    return host.alloc()


def job_stuck(host, endpoint, out):
    """The quick job, whose host symbolize hook does not return for 4.5 s at first (MEMSCOPE_FAKE_STUCK_SYMBOLIZE_MS,
    set by the test), and which lives on until that is over."""
    return job_quick(host, endpoint, out, linger=6.0)


def job_stuck_state(host, endpoint, out):
    """The quick job's steps, paused after ten while a second viewer joins (its state is the host's state hook's
    third call, which MEMSCOPE_FAKE_STUCK_STATE_MS makes take 4.5 s), then the ten others."""
    if host.lib.fake_start(endpoint.encode()) != 0:
        raise SystemExit("fake_start failed")
    keep = []
    for i in range(20):
        if i == 10:
            open(os.path.join(out, "paused"), "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(out, "joined")) and time.monotonic() < deadline:
                time.sleep(0.05)
        step(host, keep)
        while len(keep) > 20:
            host.lib.fake_free(keep.pop(0))
    for p in keep:
        host.lib.fake_free(p)
    host.lib.fake_stop()
    return {}


def job_quick(host, endpoint, out, linger=0.0):
    if host.lib.fake_start(endpoint.encode()) != 0:
        raise SystemExit("fake_start failed")
    started = time.monotonic()  # the recorder has the state: from here on the job runs as it would alone
    keep = []
    for _ in range(20):
        step(host, keep)
        while len(keep) > 20:
            host.lib.fake_free(keep.pop(0))
    for p in keep:
        host.lib.fake_free(p)
    time.sleep(linger)
    host.lib.fake_stop()
    return {"seconds": time.monotonic() - started}


GENERATED = "def call(host):\n    return host.alloc()\n"


def job_held(host, endpoint, out):
    if host.lib.fake_start(endpoint.encode()) != 0:
        raise SystemExit("fake_start failed")
    live = [layer(host) for _ in range(5)]
    # Frames never seen before (a function made now), gathered here with the lock as PyTorch's capture does; a
    # native thread allocates with them while this thread keeps the interpreter lock for 3 s.
    captured = {}

    def capture():
        captured["frames"] = Host.frames_of_caller(2)

    namespace = {"capture": capture}
    exec(compile("def fresh():\n    capture()\n", os.path.join(out, "fresh.py"), "exec"), namespace)
    namespace["fresh"]()
    codes, lastis, n, named = captured["frames"]
    lib = host.lib
    held_sizes = [host.next_size() for _ in range(10)]
    lib.fake_alloc_series(300, len(held_sizes), 50, held_sizes[0], 4096, codes, lastis, n)
    host.held.fake_hold_interpreter_lock(3000)  # the series runs meanwhile, on a native thread
    addresses = (ctypes.c_uint64 * len(held_sizes))()
    natives = list(addresses[:lib.fake_series_join(addresses, len(held_sizes))])
    # The same frames again, the lock free: named now.
    after_sizes = [host.next_size() for _ in range(3)]
    time.sleep(0.3)
    for size in after_sizes:
        natives.append(lib.fake_alloc(size, codes, lastis, n))
    # Generated code: its line stands for a line of model.py.
    generated = {}
    exec(compile(GENERATED, os.path.join(out, "fx_generated.py"), "exec"), generated)
    live.append(generated["call"](host))
    time.sleep(0.3)
    # A second recorder joins now, while these blocks are live.
    open(os.path.join(out, "paused"), "w").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(out, "joined")) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in natives + live:
        host.lib.fake_free(p)
    host.lib.fake_stop()
    return {"held_sizes": held_sizes, "after_sizes": after_sizes, "held_frames": named,
            "live_sizes": [e[0] for e in host.expected[:5]] + [host.expected[-1][0]]}


SIDE = 0x7000  # a side stream's handle


def job_shapes(host, endpoint, out):
    """torch.cuda.MemPool / side stream / empty_cache / OOM-and-retry shapes: 20 steps, each a block used on a side
    stream (record_stream) and freed, one allocated there, then allocations doubling until the capped allocator
    says out of memory, all freed, and the cache emptied; three blocks stay for the end state."""
    if host.lib.fake_start(endpoint.encode()) != 0:
        raise SystemExit("fake_start failed")
    host.lib.fake_set_fraction(0.001)  # about 82 MiB of the host backend's 80 GiB
    ooms = 0
    for _ in range(20):
        a = host.alloc()
        host.lib.fake_record_stream(a, SIDE)
        host.lib.fake_free(a)  # after record_stream: pending until the side stream's work is done
        host.lib.fake_free(host.alloc(stream=SIDE))
        held, size = [], 4 << 20
        while True:
            p = host.alloc(size=size)
            if not p:
                ooms += 1
                break
            held.append(p)
            size *= 2
        for p in held:
            host.lib.fake_free(p)
        host.lib.fake_empty_cache()
    live = [host.alloc(), host.alloc(stream=SIDE), host.alloc()]
    state = host.state()
    host.lib.fake_stop()
    return {"ooms": ooms, "state": state, "live": len(live)}


def run_job(kind, library, endpoint, out):
    host = Host(library)
    result = {"quick": job_quick, "held": job_held, "shapes": job_shapes, "stuck": job_stuck,
              "stuck_state": job_stuck_state}[kind](host, endpoint, out)
    result["expected"] = host.expected
    result["outstanding"] = host.lib.fake_outstanding()
    result["twice"] = host.lib.fake_twice()
    result["handed"] = host.lib.fake_handed()
    result["released"] = host.lib.fake_released()
    with open(os.path.join(out, kind + ".json"), "w") as f:
        json.dump(result, f)


def frames_of(entry):
    return [[f["name"], f["filename"], f["line"]] for f in entry.get("frames", [])]


class ObserverPythonStacksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.library = os.environ.get("MEMSCOPE_FAKE_OBSERVED_LIB")
        cls.cli = os.environ.get("MEMSCOPE_CLI")
        if not cls.library or not cls.cli:
            raise unittest.SkipTest("MEMSCOPE_FAKE_OBSERVED_LIB and MEMSCOPE_CLI name built files")
        cls.folder = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def run_kind(self, kind, late=False, env=None, late_seconds=1.5):
        out = os.path.join(self.folder.name, kind)
        os.makedirs(out)
        endpoint = "ipc://" + os.path.join(out, "job")
        recording = os.path.join(out, "recording.pickle")
        record = subprocess.Popen([self.cli, "record", endpoint, "-o", recording, "--timeout", "30"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # the recorder is there before the job starts
        # The job waits for the recorder started before it (MEMSCOPE_WAIT_FOR_VIEWER) and then allocates at once.
        job = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--job", kind, self.library, endpoint, out],
                               stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MEMSCOPE_WAIT_FOR_VIEWER="20",
                                        **(env or {})))
        late_record = None
        if late:
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(out, "paused")) and time.monotonic() < deadline:
                time.sleep(0.05)
            late_record = subprocess.run([self.cli, "record", endpoint, "-o", os.path.join(out, "late.pickle"),
                                          "--duration", str(late_seconds)], capture_output=True, text=True, timeout=60)
            open(os.path.join(out, "joined"), "w").close()
        job_err = job.communicate(timeout=120)[1]
        rec_out, rec_err = record.communicate(timeout=120)
        self.assertEqual(job.returncode, 0, job_err)
        self.assertEqual(record.returncode, 0, rec_err)
        with open(os.path.join(out, kind + ".json")) as f:
            result = json.load(f)
        with open(recording, "rb") as f:
            snapshot = pickle.load(f)
        late_snapshot = None
        if late_record is not None:
            self.assertEqual(late_record.returncode, 0, late_record.stderr)
            with open(os.path.join(out, "late.pickle"), "rb") as f:
                late_snapshot = pickle.load(f)
        return result, snapshot, rec_out, job_err, late_snapshot

    def check_complete(self, result, rec_out):
        self.assertIn("(the job said goodbye)", rec_out)
        self.assertIn("lost 0, gaps 0 (0 missing), inconsistent 0", rec_out)
        self.assertIn("records 1 to", rec_out)  # joined before the first event: the whole trace
        self.assertEqual(result["twice"], 0)  # no context released twice or asked about after its release

    def test_quick_job_records_every_event_with_its_stack(self):
        result, snapshot, rec_out, job_err, _ = self.run_kind("quick")
        self.check_complete(result, rec_out)
        self.assertNotIn("memscope:", job_err)  # nothing went wrong: nothing to say
        self.assertEqual(result["outstanding"], 0)  # every context handed back
        self.assertEqual(result["handed"], result["released"])
        allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(len(allocs), 20 * 70)
        by_size = {}
        for e in allocs:
            by_size.setdefault(e["size"], []).append(e)
        for size, frames in result["expected"]:
            with self.subTest(size=size):
                self.assertEqual([frames_of(e) for e in by_size[size]], [frames])
        self.assertEqual(result["expected"][0][1][0][0], "layer")
        # The host hands frees no context (PyTorch gives them the allocation's): the recording's frees carry the
        # stack of their allocation, as PyTorch's own trace does.
        live, frees = {}, 0
        for e in snapshot["device_traces"][0]:
            if e["action"] == "alloc":
                live[e["addr"]] = frames_of(e)
            elif e["action"] in ("free_requested", "free_completed"):
                frees += 1
                self.assertEqual(frames_of(e), live[e["addr"]])
        self.assertEqual(frees, 2 * 20 * 70)
        for segment in snapshot["segments"]:  # everything freed at the end
            for block in segment["blocks"]:
                self.assertEqual(block["state"], "inactive")

    def test_stuck_hook_is_reported_and_nothing_is_lost(self):
        # The publisher thread stays 4.5 s inside the host's symbolize hook: the job's stderr says so after 3 s
        # (the watchdog), the events wait in the ring meanwhile, and the recording is whole once the hook returns.
        result, snapshot, rec_out, job_err, _ = self.run_kind("stuck", env={"MEMSCOPE_FAKE_STUCK_SYMBOLIZE_MS": "4500"})
        self.check_complete(result, rec_out)
        self.assertIn("memscope: the publisher thread has been inside the host's symbolize hook for", job_err)
        self.assertEqual(job_err.count("inside the host's symbolize hook for"), 1)  # said once
        self.assertEqual(result["outstanding"], 0)
        allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(len(allocs), 20 * 70)
        self.assertTrue(all(frames_of(e) for e in allocs))

    def test_stuck_state_hook_keeps_the_job_heard(self):
        # A second viewer joins mid-run and the host's state hook takes 4.5 s to give its state (an allocator lock
        # held elsewhere): the publisher thread sends heartbeats meanwhile, so the first recorder does not take the
        # job for silent (2 s), the late one gets its state, and both recordings are whole.
        result, snapshot, rec_out, job_err, late = self.run_kind(
            "stuck_state", late=True,
            env={"MEMSCOPE_FAKE_STUCK_STATE_MS": "4500", "MEMSCOPE_FAKE_STUCK_STATE_CALL": "3"}, late_seconds=7)
        self.check_complete(result, rec_out)
        self.assertNotIn("went silent", rec_out)
        self.assertIn("inside the host's state hook for", job_err)
        self.assertEqual(job_err.count("inside the host's state hook for"), 1)
        self.assertEqual(result["outstanding"], 0)
        allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(len(allocs), 20 * 70)
        self.assertTrue(all(frames_of(e) for e in allocs))
        # The late viewer's state holds the 20 blocks kept alive at step 10, with their stacks.
        live = [b for s in late["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        self.assertEqual(len(live), 20)
        self.assertTrue(all(b.get("frames") for b in live))

    def test_held_lock_degrades_to_events_without_stacks_then_recovers(self):
        result, snapshot, rec_out, job_err, late = self.run_kind("held", late=True)
        self.check_complete(result, rec_out)
        self.assertIn("memscope: Python stacks are late", job_err)
        trace = snapshot["device_traces"][0]
        allocs = {e["size"]: e for e in trace if e["action"] == "alloc"}
        held, after = result["held_sizes"], result["after_sizes"]
        # Every event went out, none lost: those made while the lock was held without their stack...
        for size in held:
            self.assertIn(size, allocs)
        without = [size for size in held if not allocs[size].get("frames")]
        self.assertGreater(len(without), 0)
        # ... and the same frames named once it was free.
        for size in after:
            self.assertEqual(frames_of(allocs[size]), result["held_frames"])
        # Generated code: its frame, then the line it stands for.
        generated = [e for e in trace if e["action"] == "alloc" and any(
            f["filename"].endswith("fx_generated.py") for f in e.get("frames", []))]
        self.assertEqual(len(generated), 1)
        names = frames_of(generated[0])
        at = [i for i, f in enumerate(names) if f[1].endswith("fx_generated.py")][0]
        self.assertEqual(names[at + 1], ["forward", "model.py", 1000 + names[at][2]])
        # The late recorder's state: the live blocks with the stacks of their allocations.
        self.assertIsNotNone(late)
        expected = {size: frames for size, frames in result["expected"]}
        live = {}
        for segment in late["segments"]:
            address = segment["address"]
            for block in segment["blocks"]:
                if block["state"] == "active_allocated":
                    live[block["requested_size"]] = frames_of(block)
                address += block["size"]
        for size in result["live_sizes"]:
            with self.subTest(live=size):
                self.assertIn(size, live)
                want = expected[size]
                if any(f[1].endswith("fx_generated.py") for f in want):
                    at = [i for i, f in enumerate(want) if f[1].endswith("fx_generated.py")][0]
                    want = want[:at + 1] + [["forward", "model.py", 1000 + want[at][2]]] + want[at + 1:]
                self.assertEqual(live[size], want)


def describe(snapshot):
    """A recording's end state in fake_describe_state's lines."""
    lines = []
    for segment in sorted(snapshot["segments"], key=lambda s: s["address"]):
        lines.append("segment %d %d %d" % (segment["address"], segment["total_size"], segment["stream"]))
        address = segment["address"]
        for block in segment["blocks"]:
            active = block["state"] != "inactive"
            lines.append("block %d %d %s %s" % (address, block["size"], block["state"],
                                                block["requested_size"] if active else "-"))
            address += block["size"]
    return "\n".join(lines) + "\n" if lines else ""


class ObserverJobShapesTest(ObserverPythonStacksTest):
    """The shapes of MemPool, side-stream and OOM-and-retry jobs, observed with Python stacks."""

    def test_quick_job_records_every_event_with_its_stack(self):
        pass  # (ObserverPythonStacksTest's)

    def test_held_lock_degrades_to_events_without_stacks_then_recovers(self):
        pass  # (ObserverPythonStacksTest's)

    def test_stuck_hook_is_reported_and_nothing_is_lost(self):
        pass  # (ObserverPythonStacksTest's)

    def test_stuck_state_hook_keeps_the_job_heard(self):
        pass  # (ObserverPythonStacksTest's)

    def test_streams_empty_cache_and_oom_retry(self):
        result, snapshot, rec_out, job_err, _ = self.run_kind("shapes")
        self.check_complete(result, rec_out)
        self.assertNotIn("memscope:", job_err)
        self.assertEqual(result["outstanding"], 0)
        self.assertEqual(result["ooms"], 20)
        trace = snapshot["device_traces"][0]
        self.assertEqual(sum(1 for e in trace if e["action"] == "oom"), 20)
        self.assertGreater(sum(1 for e in trace if e["action"] == "segment_free"), 20)  # the emptied caches
        # The whole end state, every segment and block, free ones too, against the allocator's own.
        self.assertEqual(describe(snapshot), result["state"])
        self.assertEqual(sum(1 for s in snapshot["segments"] for b in s["blocks"]
                             if b["state"] == "active_allocated"), 3)
        # Every allocation that succeeded carries its exact stack.
        by_size = {}
        for e in trace:
            if e["action"] == "alloc":
                by_size.setdefault(e["size"], []).append(frames_of(e))
        for size, frames in result["expected"]:
            with self.subTest(size=size):
                self.assertIn(frames, by_size[size])


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--job":
        run_job(*sys.argv[2:])
    else:
        unittest.main()
