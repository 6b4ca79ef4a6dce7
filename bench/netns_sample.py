#!/usr/bin/env python3
"""Bytes on the wire and CPU share of a training run across the netns hosts
(bench/parallel/pp_netns.sh, bench/zero/netns.sh): samples dt0's eth0
counters (through the /proc of a process held in dt0) at start, when the
metrics file reports step WARM and step WARM + STEPS, and when the file STOP
appears; prints one line of JSON: seconds per step, bytes sent and received
per step, the start-up's bytes, and the share of the CPUs other processes
than those in dt0 and dt1 took over the measured steps.

usage: netns_sample.py NAME METRICS PID WARM STEPS STOP   (NAME prefixes errors)"""
import json, os, subprocess, sys, time
who, metrics, pid, warm, steps, stop = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
def counters():
    if not os.path.exists(f"/proc/{pid}/net/dev"):
        raise SystemExit(f"{who}: the process holding dt0 is gone: someone took the namespaces down")
    for line in open(f"/proc/{pid}/net/dev"):
        name, _, rest = line.partition(":")
        if name.strip() == "eth0":
            f = rest.split()
            return int(f[8]), int(f[0])  # tx_bytes, rx_bytes
    raise SystemExit(f"{who}: no eth0 in dt0")
def ns_pids():
    return [p for ns in ("dt0", "dt1") for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                                               text=True).stdout.split()]
def cpu(pids):  # (ticks busy on every CPU, ticks of the processes in dt0 and dt1)
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    busy = sum(f) - f[3] - f[4]  # all but idle and iowait
    mine = 0
    for p in pids:
        try:
            st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            mine += int(st[11]) + int(st[12])  # utime, stime
        except (FileNotFoundError, ProcessLookupError):
            pass
    return busy, mine
def elapsed(step):
    for l in open(metrics):
        r = json.loads(l)
        if r.get("step") == step and "loss" in r:
            return r["elapsed_s"]
s = {"start": counters()}
want = [warm, warm + steps]
while True:
    done = os.path.exists(stop)
    try:
        n = sum(1 for l in open(metrics) if '"loss"' in l)
    except FileNotFoundError:
        n = 0
    while want and n >= want[0]:
        s[want.pop(0)] = counters()
        if len(want) == 1:
            pids = ns_pids()
            c0 = cpu(pids)
        elif not want:
            c1 = cpu(pids)
    if done:
        break
    if not os.path.exists(f"/proc/{pid}") or not os.path.isdir(os.path.dirname(stop)):
        raise SystemExit(f"{who}: gave up sampling: dt0 or the work folder is gone")
    time.sleep(0.005)
s["end"] = counters()
if warm + steps not in s:
    raise SystemExit(f"{who}: the run stopped before step {warm + steps}")
tx, rx = ((s[warm + steps][i] - s[warm][i]) / steps for i in (0, 1))
up = [s[warm][i] - s["start"][i] - warm * (tx, rx)[i] for i in (0, 1)]
wall = elapsed(warm + steps) - elapsed(warm)
hz = os.sysconf("SC_CLK_TCK")
others = ((c1[0] - c0[0]) - (c1[1] - c0[1])) / hz / (os.cpu_count() * wall)
print(json.dumps({"s_per_step": wall / steps, "tx": tx, "rx": rx, "startup_tx": up[0], "startup_rx": up[1],
                  "others_cpu": others}))
