"""The observer proof on a GPU machine: memscope_torch.observe() on varied jobs, recorded live.

Usage (from the repository root): python3 tools/gpu-proof/observe.py OUTDIR [correct] [timing] [trace] [ab]
Environment: MEMSCOPE_CLI (memscope-cli), MEMSCOPE_AGENT_LIB (libmemscope-agent.so), PYTHONPATH with agent/python.

correct: each workload of observe_workloads.py in a fresh process under observe() (Python stacks) with
`memscope-cli record` attached from the start (llama also with a second recorder joining while the job holds still
at step 12); each recording's final state is compared with torch.cuda.memory._snapshot() at the end (every
segment and block: address, size, state; requested size of active blocks), the late joiner's with the snapshot
taken when it joined, and the share of live bytes at the peak whose stack holds a frame of the job's own code or
its model library is computed.
timing: llama, vit and the 1 MiB alloc/free loop, each mode in a fresh process, modes alternating, two rounds:
native, native_hist (PyTorch's own history with Python stacks), observe_none, observe_python; the median step
time of steps 10 and later. OBSERVE_TIMED=w:steps,... picks the workloads, OBSERVE_ROUNDS the rounds (2),
OBSERVE_EAGER=1 adds observe() with contexts released on the publisher thread; OBSERVE_MODES=a,b picks the modes.
OBSERVE_ONLY=w1,w2 limits the correct phase to those workloads.
trace: torch_only and mempool under observe() with PyTorch's own whole trace kept beside; the recording's trace
equals PyTorch's entry by entry (action, address, size, frames).
ab: PyTorch's own history against observe() inside one process (observe_workloads.py observe_ab: memscope's
tracker off on even steps, on on odd ones), median of steps 10 and later and the median of adjacent pairs' ratios;
OBSERVE_AB=w:steps[:none],... (llama:60,loop:30; ":none" compares PyTorch alone with observe(stacks=None)), OBSERVE_SLOTS=n,... runs each once per MEMSCOPE_OBSERVER_SLOTS value. Prints a summary and writes
OUTDIR/observe-results.json.
"""
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

OUT = sys.argv[1]
PHASES = sys.argv[2:] or ["correct", "timing"]
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
    if not (os.path.exists(recorded_path) and os.path.exists(expected_path)):
        results[name] = {"missing": [os.path.exists(recorded_path), os.path.exists(expected_path)]}
        print(name, results[name], flush=True)
        return None
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


MARKERS = {"llama": ["transformers/"], "lora": ["transformers/", "peft/"], "vit": ["timm/"],
           "compile_ro": ["transformers/"]}
ENV = {"vit": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}


def run_job(workload, mode, steps, record=False, late_at=-1, tag=None):
    tag = tag or "%s.%s" % (workload, mode)
    env = dict(os.environ, **ENV.get(workload, {}))
    if mode.endswith("_eager"):  # contexts released on the publisher thread (memscope_observer.cpp)
        env["MEMSCOPE_OBSERVER_RELEASE"] = "publisher"
        mode = mode[:-len("_eager")]
    endpoint = "ipc:///tmp/ms-%s" % tag
    env["MEMSCOPE_ENDPOINT"] = endpoint
    recorders = []
    if record:
        env["MEMSCOPE_WAIT_FOR_VIEWER"] = "20"  # the job's first events come before a recorder could join
        recorders.append(subprocess.Popen([CLI, "record", endpoint, "-o", "%s/%s.rec.pickle" % (OUT, tag),
                                           "--timeout", "240"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        time.sleep(0.3)
    args = [sys.executable, os.path.join(HERE, "observe_workloads.py"), workload, mode, OUT, "--steps", str(steps)]
    if late_at >= 0:
        args += ["--pause-at", str(late_at)]
    t0 = time.time()
    job = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    late = None
    if late_at >= 0:
        flag = "%s/%s.%s.paused" % (OUT, workload, mode)
        while not os.path.exists(flag) and job.poll() is None:
            time.sleep(0.05)
        late = subprocess.Popen([CLI, "record", endpoint, "-o", "%s/%s.late.pickle" % (OUT, tag), "--duration", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_out = job.communicate(timeout=500)[0]
    r = {"rc": job.returncode, "secs": round(time.time() - t0, 1),
         "memscope_lines": [l for l in job_out.splitlines() if l.startswith("memscope:")][:8]}
    if job.returncode:
        r["tail"] = job_out[-2500:]
        print(job_out[-3000:], flush=True)
    for k, rec in enumerate(recorders + ([late] if late else [])):
        r["record%d" % k] = rec.communicate(timeout=120)[0].strip()[-700:]
    steps_path = "%s/%s.%s.steps.json" % (OUT, workload, mode)
    if job.returncode == 0 and os.path.exists(steps_path):
        steps_ms = json.load(open(steps_path))
        r["step_ms_median_10+"] = round(statistics.median(steps_ms[10:]), 3) if len(steps_ms) > 10 else None
    stats_path = "%s/%s.%s.stats.json" % (OUT, workload, mode)
    if os.path.exists(stats_path):
        r["observer_stats"] = json.load(open(stats_path))
    results[tag + ".job"] = r
    print(tag, json.dumps(r)[:1500], flush=True)
    return r


t0 = time.time()
import memscope_torch  # noqa: E402

try:
    memscope_torch._build_observer(memscope_torch.find_library(), verbose=False)
    results["extension_build_secs"] = round(time.time() - t0, 1)
except Exception as e:
    results["extension_build_error"] = str(e)[-4000:]
    print("extension build failed:", str(e)[-4000:], flush=True)
    json.dump(results, open("%s/observe-results.json" % OUT, "w"), indent=1)
    sys.exit(1)
print("extension built in", round(time.time() - t0, 1), "s", flush=True)

def compare_trace(name, recorded_path, expected_path):
    """The recording's whole trace against PyTorch's own, entry by entry: action, address, size, stream and the
    frames (what a user's stack names), for a job whose every allocation has Python frames (no backward)."""
    if not (os.path.exists(recorded_path) and os.path.exists(expected_path)):
        results[name] = {"missing": True}
        return
    rec = pickle.load(open(recorded_path, "rb"))["device_traces"][0]
    # PyTorch marks each state memscope took (a "snapshot" entry); the recording has none.
    exp = [e for e in pickle.load(open(expected_path, "rb"))["device_traces"][0] if e["action"] != "snapshot"]
    key = lambda e: (e["action"], e["addr"], e["size"], [(f["name"], f["filename"], f["line"])
                                                         for f in e.get("frames", [])])
    a, b = [key(e) for e in rec], [key(e) for e in exp]
    first = next(({"index": i, "recorded": str(x)[:500], "pytorch": str(y)[:500]}
                  for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    frees = sum(1 for e in exp if e["action"] in ("free_requested", "free_completed"))
    results[name] = {"identical": a == b, "entries": [len(a), len(b)], "frees": frees, "first": first}
    print(name, json.dumps(results[name])[:1200], flush=True)


if "trace" in PHASES:
    for workload, steps in [("torch_only", 6), ("mempool", 6)]:
        tag = "%s.observe_trace" % workload
        run_job(workload, "observe_trace", steps, record=True)
        compare_trace(tag + ".trace", "%s/%s.rec.pickle" % (OUT, tag), "%s/%s.final.pickle" % (OUT, tag))

if "correct" in PHASES:
    plan = [("torch_only", 20), ("mempool", 20), ("oom_retry", 12), ("llama", 24), ("vit", 20), ("lora", 20),
            ("compile_ro", 12)]
    only = os.environ.get("OBSERVE_ONLY", "").split(",") if os.environ.get("OBSERVE_ONLY") else None
    for workload, steps in plan:
        if only and workload not in only:
            continue
        tag = "%s.observe_python" % workload
        run_job(workload, "observe_python", steps, record=True, late_at=12 if workload == "llama" else -1)
        rec = compare(tag + ".final", "%s/%s.rec.pickle" % (OUT, tag), "%s/%s.final.pickle" % (OUT, tag))
        if rec is not None:
            results[tag + ".user_share_at_peak"] = user_share_at_peak(
                rec, ["observe_workloads.py"] + MARKERS.get(workload, []))
            print(tag, "user share", results[tag + ".user_share_at_peak"], flush=True)
            if workload == "compile_ro":
                results["compile_ro.pools"] = sorted({str(tuple(s.get("segment_pool_id", (0, 0))))
                                                      for s in rec["segments"]})
        if workload == "llama":
            compare(tag + ".late_at_step_12", "%s/%s.late.pickle" % (OUT, tag), "%s/%s.pause.pickle" % (OUT, tag))

if "timing" in PHASES:
    modes = os.environ.get("OBSERVE_MODES", "native,native_hist,observe_none,observe_python").split(",")
    if os.environ.get("OBSERVE_EAGER"):
        modes.append("observe_python_eager")
    rounds = int(os.environ.get("OBSERVE_ROUNDS", "2"))
    workloads = [(w, int(n)) for w, n in (x.split(":") for x in os.environ.get(
        "OBSERVE_TIMED", "llama:30,vit:30,loop:14").split(","))]
    for workload, steps in workloads:
        for rnd in range(rounds):
            order = modes if rnd == 0 else list(reversed(modes))
            for mode in order:
                run_job(workload, mode, steps, tag="%s.%s.r%d" % (workload, mode, rnd))
        for mode in modes:
            ms = [results.get("%s.%s.r%d.job" % (workload, mode, r), {}).get("step_ms_median_10+")
                  for r in range(rounds)]
            ms = [m for m in ms if m]
            if ms:
                results["%s.%s.step_ms" % (workload, mode)] = ms
        base = {m: statistics.median(results.get("%s.%s.step_ms" % (workload, m), [0]) or [0]) for m in modes}
        # Paired: the two modes' runs of one round ran next to each other (the order alternates by round), so
        # their ratio leaves out what drifts between rounds.
        if "observe_python" in modes and "native_hist" in modes:
            pairs = []
            for r in range(rounds):
                a = results.get("%s.observe_python.r%d.job" % (workload, r), {}).get("step_ms_median_10+")
                b = results.get("%s.native_hist.r%d.job" % (workload, r), {}).get("step_ms_median_10+")
                if a and b:
                    pairs.append(round(a / b, 4))
            if pairs:
                results["%s.paired_observe_python/native_hist" % workload] = {
                    "per_round": pairs, "median": round(statistics.median(pairs), 4)}
        if base.get("native") and base.get("native_hist") and base.get("observe_none") and base.get("observe_python"):
            results["%s.ratios" % workload] = {
                "observe_none/native": round(base["observe_none"] / base["native"], 4),
                "observe_python/native_hist": round(base["observe_python"] / base["native_hist"], 4),
                "native_hist/native": round(base["native_hist"] / base["native"], 4)}
            if base.get("observe_python_eager"):
                results["%s.ratios" % workload]["observe_python_eager/native_hist"] = round(
                    base["observe_python_eager"] / base["native_hist"], 4)
            if workload == "loop":  # 20,000 alloc/free pairs a step, 3 trace events each
                results["loop.ns_per_pair"] = {m: round(base[m] * 1e6 / 20000, 1) for m in modes}

if "ab" in PHASES:
    # One process a run: PyTorch's own history on every step, memscope's tracker on odd steps only
    # (observe_workloads.py observe_ab). Steps 10 and later; each odd step is paired with the even step before it.
    # OBSERVE_SLOTS=a,b runs each workload once per slot count (MEMSCOPE_OBSERVER_SLOTS; "" = the default).
    slots_list = os.environ.get("OBSERVE_SLOTS", "").split(",")
    # An entry W:STEPS:none compares PyTorch alone with observe(stacks=None) instead (observe_none_ab).
    for entry in [x.split(":") for x in os.environ.get("OBSERVE_AB", "llama:60,loop:30").split(",")]:
        workload, steps = entry[0], int(entry[1])
        mode = "observe_none_ab" if entry[2:] == ["none"] else "observe_ab"
        for rnd in range(int(os.environ.get("OBSERVE_ROUNDS", "1"))):
            for slots in slots_list:
                tag = "%s.%s.s%s.r%d" % (workload, "none_ab" if mode == "observe_none_ab" else "ab",
                                         slots or "default", rnd)
                if slots:
                    os.environ["MEMSCOPE_OBSERVER_SLOTS"] = slots
                else:
                    os.environ.pop("MEMSCOPE_OBSERVER_SLOTS", None)
                run_job(workload, mode, steps, record=True, tag=tag)  # a recorder attached, as a user runs it
                path = "%s/%s.%s.ab.json" % (OUT, workload, mode)
                if not os.path.exists(path):
                    continue
                ab = json.load(open(path))
                h, o = ab["off"][5:], ab["on"][5:]
                pairs = [b / a for a, b in zip(h, o)]
                base = "native_ms" if mode == "observe_none_ab" else "history_ms"
                results[tag] = {base: round(statistics.median(h), 3), "observe_ms": round(statistics.median(o), 3),
                                "ratio_of_medians": round(statistics.median(o) / statistics.median(h), 4),
                                "paired_median": round(statistics.median(pairs), 4), "pairs": len(pairs)}
                print(tag, results[tag], flush=True)
    os.environ.pop("MEMSCOPE_OBSERVER_SLOTS", None)

json.dump(results, open("%s/observe-results.json" % OUT, "w"), indent=1)
print(json.dumps({k: v for k, v in results.items() if not k.endswith(".job")}, indent=1)[:8000])
