import json, sys, os
w = sys.argv[1]
rows = []
for n in ["native1", "agent_nopub", "agent_pub", "agent_rec", "native2", "native_hist"]:
    p = os.path.join(w, n + ".json")
    if not os.path.exists(p):
        print("%-12s MISSING" % n); continue
    rows.append((n, json.load(open(p))))
ref = dict(rows).get("native1")
print("%-12s %9s %9s %9s %9s  %-26s %-8s %-8s %s" % ("run", "median_ms", "mean_ms", "min_ms", "max_ms", "final_loss(hex)", "losses=", "params=", "warnings"))
for n, r in rows:
    same_l = ref and r["losses_hex_sha256"] == ref["losses_hex_sha256"]
    same_p = ref and r["params_sha256"] == ref["params_sha256"]
    print("%-12s %9.3f %9.3f %9.3f %9.3f  %-26s %-8s %-8s %s" % (n, r["median_ms"], r["mean_ms"], r["min_ms"], r["max_ms"], r["loss_final_hex"], same_l, same_p, len(r["warnings"])))
if ref:
    for n, r in rows:
        d = max(abs(a - b) for a, b in zip(r["losses"], ref["losses"]))
        print("%s: loss first %.6f final %.9f; max |loss - native1| over %d steps = %g" % (n, r["loss_first"], r["loss_final"], len(r["losses"]), d))
    print("warnings (native1):", ref["warnings"])
