"""The observer proof on a GPU machine: memscope_torch.observe() on a GPT-2 training job, recorded live.

Usage (from the repository root): python3 tools/gpu-proof/observe.py OUTDIR
Environment: MEMSCOPE_CLI (memscope-cli), MEMSCOPE_AGENT_LIB (libmemscope-agent.so), PYTHONPATH with agent/python.

Runs observe_job.py in fresh processes: native, observed without stacks and with Python stacks (each with
`memscope-cli record` attached from the start; the one with stacks also with a second recorder that joins while
the job holds still at step 15), a torch.compile(mode="reduce-overhead") job (CUDA graphs, private pools), and the job under use() (memscope's
allocator) with and without the agent's own Python stacks.
Checks, as data: each recording's final state against torch.cuda.memory._snapshot() at the end (every segment and
block: address, size, state; requested size of active blocks; inactive blocks' requested sizes counted apart),
the late joiner's against the snapshot taken when it joined, the share of live bytes at the peak whose stack holds
a frame of the job's own code, and the step times. Prints a summary and writes OUTDIR/observe-results.json.
"""
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.environ.get("MEMSCOPE_CLI", "build/bin/memscope-cli")
results = {}


def state_of(snapshot):
    """Segments and blocks of a snapshot dict as comparable tuples."""
    segments = []
    for s in sorted(snapshot["segments"], key=lambda s: (s["device"], s["address"])):
        blocks, address = [], s["address"]
        for b in s["blocks"]:
            active = b["state"] != "inactive"
            blocks.append((address, b["size"], b["state"], b["requested_size"] if active else None))
            address += b["size"]
        segments.append((s["device"], s["address"], s["total_size"], s["stream"],
                         tuple(s.get("segment_pool_id", (0, 0))), tuple(blocks)))
    return segments


def inactive_requested(snapshot):
    return sorted((s["address"], i, b["requested_size"]) for s in snapshot["segments"]
                  for i, b in enumerate(s["blocks"]) if b["state"] == "inactive")


def compare(name, recorded_path, expected_path):
    rec = pickle.load(open(recorded_path, "rb"))
    exp = pickle.load(open(expected_path, "rb"))
    a, b = state_of(rec), state_of(exp)
    same = a == b
    first = None
    if not same:
        for x, y in zip(a, b):
            if x != y:
                first = {"recorded": str(x)[:600], "expected": str(y)[:600]}
                break
        if first is None:
            first = {"segments": [len(a), len(b)]}
    ir, ie = inactive_requested(rec), inactive_requested(exp)
    notes = rec.get("external_annotations") or []
    names = sorted({a["name"] for a in notes})
    results[name] = {"identical": same, "segments": len(b), "blocks": sum(len(s[5]) for s in b),
                     "inactive_requested_identical": ir == ie,
                     "inactive_requested_differing": sum(1 for x, y in zip(ir, ie) if x != y), "first": first,
                     "recording": (rec.get("memscope_recording") or {}),
                     # the allocator's settings (topic C) and record_function scopes (topic A) of the recording
                     "settings_identical": rec.get("allocator_settings") == exp.get("allocator_settings"),
                     "settings": None if rec.get("allocator_settings") == exp.get("allocator_settings")
                     else [rec.get("allocator_settings"), exp.get("allocator_settings")],
                     "notes": len(notes), "note_names": len(names), "some_note_names": names[:6],
                     "expected_notes": len(exp.get("external_annotations") or [])}
    print(name, json.dumps(results[name])[:900], flush=True)
    return rec


def user_share_at_peak(rec, markers):
    """Share of live bytes at the peak of allocated bytes whose stack holds a frame of the job's code."""
    trace = rec["device_traces"][0] if rec["device_traces"] else []
    live, allocated, peak, at_peak = {}, 0, -1, {}
    # The state at the recording's start: its blocks allocated at that point are unknown in the trace; only
    # trace allocations count (the recorder ran from the start).
    for e in trace:
        if e["action"] == "alloc":
            frames = e.get("frames", [])
            ours = any(any(m in f["filename"] for m in markers) for f in frames)
            live[e["addr"]] = (e["size"], ours)
            allocated += e["size"]
            if allocated > peak:
                peak, at_peak = allocated, dict(live)
        elif e["action"] == "free_completed" and e["addr"] in live:
            allocated -= live.pop(e["addr"])[0]
    total = sum(s for s, _ in at_peak.values())
    ours = sum(s for s, o in at_peak.values() if o)
    return {"peak_bytes": total, "user_bytes": ours, "share": ours / total if total else 0.0,
            "entries": len(trace)}


ONLY = os.environ.get("OBSERVE_ONLY", "").split(",") if os.environ.get("OBSERVE_ONLY") else None


def run_job(mode, record=True, late=False, steps=40):
    if ONLY and mode not in ONLY:
        return
    env = dict(os.environ)
    endpoint = "ipc:///tmp/ms-%s" % mode
    env["MEMSCOPE_ENDPOINT"] = endpoint
    if mode.startswith("use"):
        env["MEMSCOPE_DUMP_ON"] = "exit"
        env["MEMSCOPE_DUMP_PATH"] = "%s/%s.final.pickle" % (OUT, mode)
    recorders = []
    if record:
        recorders.append(subprocess.Popen([CLI, "record", endpoint, "-o", "%s/%s.rec.pickle" % (OUT, mode),
                                           "--timeout", "240"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    args = [sys.executable, os.path.join(HERE, "observe_job.py"), mode, OUT, "--steps", str(steps)]
    if late:
        args += ["--pause-at", "15"]
    t0 = time.time()
    job = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    late_rec = None
    if late:
        flag = "%s/%s.paused" % (OUT, mode)
        while not os.path.exists(flag) and job.poll() is None:
            time.sleep(0.05)
        late_rec = subprocess.Popen([CLI, "record", endpoint, "-o", "%s/%s.late.pickle" % (OUT, mode),
                                     "--duration", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_out = job.communicate(timeout=500)[0]
    results[mode + ".job"] = {"rc": job.returncode, "secs": round(time.time() - t0, 1), "tail": job_out[-1500:]}
    print(mode, "job rc", job.returncode, round(time.time() - t0, 1), "s", flush=True)
    if job.returncode:
        print(job_out[-3000:], flush=True)
    for r in recorders + ([late_rec] if late_rec else []):
        out = r.communicate(timeout=60)[0]
        print("  record:", out.strip()[-600:], flush=True)
    steps_ms = json.load(open("%s/%s.steps.json" % (OUT, mode))) if job.returncode == 0 else []
    results[mode + ".step_ms_median_10+"] = statistics.median(steps_ms[10:]) if len(steps_ms) > 10 else None


# The extension is built once (cached for the jobs).
t0 = time.time()
import memscope_torch  # noqa: E402

try:
    if not ONLY or any(m.startswith("observe") or m == "compile_ro" for m in ONLY):
        memscope_torch._build_observer(memscope_torch.find_library(), verbose=False)
    results["extension_build_secs"] = round(time.time() - t0, 1)
except Exception as e:
    results["extension_build_error"] = str(e)[-3000:]
    print("extension build failed:", str(e)[-3000:], flush=True)
print("extension built in", round(time.time() - t0, 1), "s", flush=True)

run_job("native", record=False)
run_job("observe_none")
run_job("observe_python", late=True)
run_job("native_hist", record=False)
run_job("native2", record=False)
run_job("compile_ro", steps=12)
run_job("use")
run_job("use_none")

for mode in ("observe_none", "observe_python", "compile_ro", "use", "use_none"):
    rec_path = "%s/%s.rec.pickle" % (OUT, mode)
    if os.path.exists(rec_path) and os.path.exists("%s/%s.final.pickle" % (OUT, mode)):
        rec = compare(mode + ".final", rec_path, "%s/%s.final.pickle" % (OUT, mode))
        if mode not in ("observe_none", "use_none"):
            results[mode + ".user_share_at_peak"] = user_share_at_peak(rec, ["observe_job.py", "transformers/"])
            print(mode, "user share", results[mode + ".user_share_at_peak"], flush=True)
        if mode == "compile_ro":
            pools = sorted({tuple(s.get("segment_pool_id", (0, 0))) for s in rec["segments"]})
            results["compile_ro.pools"] = [list(p) for p in pools]
if os.path.exists("%s/observe_python.late.pickle" % OUT):
    compare("observe_python.late_at_step_15", "%s/observe_python.late.pickle" % OUT,
            "%s/observe_python.pause.pickle" % OUT)
native = results.get("native.step_ms_median_10+")
for mode in ("observe_none", "observe_python", "native_hist", "native2", "use", "use_none"):
    m = results.get(mode + ".step_ms_median_10+")
    if native and m:
        results[mode + ".step_ratio"] = round(m / native, 4)
json.dump(results, open("%s/observe-results.json" % OUT, "w"), indent=1)
print(json.dumps({k: v for k, v in results.items() if not k.endswith(".job")}, indent=1)[:6000])
