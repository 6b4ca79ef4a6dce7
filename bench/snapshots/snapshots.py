#!/usr/bin/env python3
"""In-memory checkpoints (memory_checkpoint_interval), measured on 2
namespace hosts (driven by bench/snapshots/snapshots.sh, which makes them).

usage: snapshots.py BIN WORK NS0 NS1 ADDR0 STEP_RUNS FAULT_RUNS

1. Step time with and without a snapshot every step, gpt-mini and gpt-small,
   dp=4 (2 ranks per host), runs alternating off/on STEP_RUNS times each,
   medians of the per-step times after the first 3 steps; the extra memory
   of the lead (peak RSS with minus without) and the snapshot's size.
2. Faults on gpt-mini (dp=4 on the 2 hosts), FAULT_RUNS times each: kill -9
   of rank 3, and host 1 lost whole (its dtrun and ranks killed, its memory
   wiped, a new dtrun started in its place), with snapshots every step, and
   both with the disk checkpoint alone (today: checkpoint_interval=10), and
   a rank and its buddy lost (every snapshot wiped: the disk is used);
   zhost, zboth (FAULT_KINDS): the same under ZeRO-1, whose shards each host
   keeps and copies to its buddy host; zboth wipes host 0's buddy copies.
   Steps lost = the last step logged at the fault - the step resumed;
   training again = from the kill to the first step logged after it.
Prints a markdown table per part; writes WORK/snapshots.json.
"""
import json, os, re, signal, statistics, subprocess, sys, time

BIN, WORK, NS, ADDR0 = sys.argv[1], sys.argv[2], sys.argv[3:5], sys.argv[5]
STEP_RUNS, FAULT_RUNS = int(sys.argv[6]), int(sys.argv[7])
# SNAP_EVERY=k: the step time with a snapshot every k steps (memory_checkpoint_interval=k): the mean of
# 4k steps after the first 3, since a median would leave out the steps that take one
SNAP_EVERY = int(os.environ.get("SNAP_EVERY", "1"))
# SNAP_COPIES="update background": each round runs off, then on once per DT_SNAPSHOT_COPY value named
# (default: auto alone), so that the copy's places are compared in the same rounds; SNAP_MODELS="gpt-small":
# those models only (default: both)
SNAP_COPIES = os.environ.get("SNAP_COPIES", "auto").split()
BASE = ["--set", "threads=1", "--set", "log_interval=1", "--set", "eval_interval=0", "--set", "eval_batches=1",
        "--set", "warmup_steps=2"]
# (smaller batches than the configs' 16, so that the runs fit the time; the snapshot's share of a step is then larger)
MODELS = {"gpt-mini": (["--config", "configs/gpt-mini.json", "--set", "batch_size=4"], 10),
          "gpt-small": (["--config", "configs/gpt-small.json", "--set", "batch_size=2"], 9)}
ENV = dict(os.environ, DT_HEARTBEAT_TIMEOUT="5", DT_TIMEOUT="120")
port = [29600]


def job(d, sets, roots=None, copy=None):
    """The 2 hosts' dtruns (2 ranks each); returns [node0, node1] and a starter for a replacement node 1.
    copy: DT_SNAPSHOT_COPY (None: unset)."""
    os.makedirs(d, exist_ok=True)
    open(f"{d}/tok", "w").write(f"snapbench-{os.getpid()}\n")
    os.chmod(f"{d}/tok", 0o600)
    port[0] += 1

    def node(i, mode="w"):
        env = dict(ENV, DT_SNAPSHOT_ROOT=roots[i]) if roots else dict(ENV)
        env["DT_RESTART_TRACE"] = f"{d}/phases"  # restart_phases.py reads it
        if copy:
            env["DT_SNAPSHOT_COPY"] = copy
        cmd = ["ip", "netns", "exec", NS[i], "taskset", "-c", str(i), f"{BIN}/dtrun", "--nnodes", "2",
               "--node-rank", str(i), "--master", f"{ADDR0}:{port[0]}", "--token-file", f"{d}/tok",
               "--join-timeout", "120", "--max-restarts", "1", "-n", "2", f"{BIN}/dtrain", "train", *sets,
               "--set", f"metrics_file={d}/metrics.jsonl"]
        return subprocess.Popen(cmd, stdout=open(f"{d}/node{i}", mode), stderr=subprocess.STDOUT, env=env)
    n1 = node(1)
    return [node(0), n1], node


def finish(d, procs, limit=900):
    for i, p in enumerate(procs):
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"{d}: node {i} still running after {limit} s")
        if rc != 0:
            sys.exit(f"{d}: node {i} exited {rc}\n{open(f'{d}/node{i}').read()[-3000:]}")


def step_times(d):
    rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"loss"' in l]
    t = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows, rows[1:])]
    return t[3:]


def peak_rss(d):
    m = re.search(r"peak RSS ([0-9.]+) MiB", open(f"{d}/node0").read())
    return float(m.group(1)) if m else float("nan")


def snapshot_ms(d):
    """The lead's end line: ms per snapshot on the training thread and in the background."""
    m = re.search(r"each ([0-9.]+) ms on the training thread.* and ([0-9.]+) ms in the background",
                  open(f"{d}/node0").read())
    return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))


def last_step(d):
    try:
        return max((int(m.group(1)) for m in re.finditer(r'"step": (\d+), "loss"', open(f"{d}/metrics.jsonl").read())),
                   default=0)
    except OSError:
        return 0


results = {"step": {}, "faults": []}
# ---- 1. step time and memory ----
chosen = os.environ.get("SNAP_MODELS", " ".join(MODELS)).split()
for name, (cfg, steps) in [(m, MODELS[m]) for m in chosen] if STEP_RUNS > 0 else ():
    modes = ["off"] + [f"on:{c}" for c in SNAP_COPIES]
    per = {m: [] for m in modes}
    rss = {m: [] for m in modes}
    cost = {m: [] for m in modes}
    size = 0
    if SNAP_EVERY > 1:
        steps = 3 + 4 * SNAP_EVERY
    for k in range(STEP_RUNS):
        for mode in modes:
            d = f"{WORK}/{name}-{mode.replace(':', '-')}-{k}"
            sets = [*cfg, *BASE, "--set", f"steps={steps}", "--set", f"checkpoint_dir={d}/ck"]
            if mode != "off":
                sets += ["--set", f"memory_checkpoint_interval={SNAP_EVERY}"]
            procs, _ = job(d, sets, copy=mode[3:] or None)
            finish(d, procs)
            per[mode].append((statistics.mean if SNAP_EVERY > 1 else statistics.median)(step_times(d)))
            rss[mode].append(peak_rss(d))
            size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(f"{d}/ck/step-{steps:08d}")
                       for f in fs)
            if mode != "off":
                cost[mode].append(snapshot_ms(d))
            print(f"{name} {mode} run {k}: {'mean' if SNAP_EVERY > 1 else 'median'} step {per[mode][-1]:.3f} s, peak RSS rank 0 {rss[mode][-1]:.0f} MiB"
                  + (f", a snapshot {cost[mode][-1][0]:.1f} ms on the training thread, {cost[mode][-1][1]:.1f} ms in the background"
                     if mode != "off" else ""), flush=True)
    for mode in modes[1:]:
        off, on = statistics.median(per["off"]), statistics.median(per[mode])
        ratios = [b / a for a, b in zip(per["off"], per[mode])]
        label = name if len(modes) == 2 else f"{name}, copy {mode[3:]}"
        results["step"][label] = {"off_s": off, "on_s": on, "ratio_median": statistics.median(ratios),
                                  "ratios": ratios, "rss_off": statistics.median(rss["off"]),
                                  "rss_on": statistics.median(rss[mode]), "snapshot_bytes": size,
                                  "thread_ms": statistics.median(c[0] for c in cost[mode]),
                                  "background_ms": statistics.median(c[1] for c in cost[mode])}

# ---- 2. faults ----
mini, _ = MODELS["gpt-mini"]
FSTEPS, KILL_AT = 20, 14


def fault_run(d, kind, snapshots):
    roots = [f"{d}/mem0", f"{d}/mem1"]
    for r in roots:
        os.makedirs(r, exist_ok=True)
    sets = [*mini, *BASE, "--set", f"steps={FSTEPS}", "--set", f"checkpoint_dir={d}/ck"]
    sets += ["--set", "memory_checkpoint_interval=1"] if snapshots else ["--set", "checkpoint_interval=10"]
    zero = kind.startswith("z")  # ZeRO-1: each host keeps its shards and copies them to its buddy host
    if zero:
        sets += ["--set", "zero_stage=1"]
        kind = kind[1:]
    procs, node = job(d, sets, roots)
    t0 = time.time()
    while last_step(d) < KILL_AT:
        if procs[0].poll() is not None or time.time() - t0 > 600:
            sys.exit(f"{d}: ended or stalled before step {KILL_AT}\n{open(f'{d}/node0').read()[-2000:]}")
        time.sleep(0.01)
    at = last_step(d)
    mark = len(open(f"{d}/node0").read())
    t_kill = time.time()
    with open(f"{d}/phases", "a") as f:
        f.write(f"{t_kill:.6f} kill\n")
    wipe = lambda root, what="step-* {r}/*/.step-* {r}/*/shards-* {r}/*/buddy-*": subprocess.run(
        ["sh", "-c", f'rm -rf "{root}"/*/' + what.format(r=f'"{root}"')], check=True)
    if kind == "rank":
        kids = open(f"/proc/{procs[1].pid}/task/{procs[1].pid}/children").read().split()
        # ip netns exec runs dtrun in place (exec), so these are its ranks
        os.kill(int(kids[-1]), signal.SIGKILL)
    else:
        kids = open(f"/proc/{procs[1].pid}/task/{procs[1].pid}/children").read().split()
        procs[1].kill()
        for p in kids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass
        procs[1].wait()
        wipe(roots[1])
        while "dtrun: restart 1 of 1" not in open(f"{d}/node0").read():
            time.sleep(0.01)
        if kind == "both":  # ZeRO: host 1's buddy (host 0) loses its copies of host 1's shards
            wipe(roots[0], "buddy-*" if zero else "step-* {r}/*/.step-*")
        procs[1] = node(1, "a")
    t_again = t_start = None
    while time.time() - t_kill < 300:
        text = open(f"{d}/node0").read()[mark:]
        m = re.search(r"resumed from (\S+) at step (\d+)|no checkpoint to resume from", text)
        if m and t_start is None and re.search(r"^\[0\] (\S+Z )?training gpt", text[m.end():], re.M):
            t_start = time.time() - t_kill  # the steps start
        if m and re.search(r"^\[0\] (\S+Z )?step \d+/", text[m.end():], re.M):
            t_again = time.time() - t_kill
            resumed = int(m.group(2) or 0)
            break
        time.sleep(0.01)
    finish(d, procs)
    r = {"fault": ("z" if zero else "") + kind, "snapshots": snapshots, "at": at, "resumed": resumed, "lost": at - resumed,
         "again_s": round(t_again, 2), "start_s": round(t_start if t_start is not None else t_again, 2)}
    print(f"fault {r['fault']} snapshots={snapshots}: after step {at}, resumed at {resumed} ({r['lost']} steps lost), "
          f"training again {r['start_s']} s after the kill, its first step done {r['again_s']} s after it", flush=True)
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "restart_phases.py"),
                    f"{d}/phases"])
    return r


KINDS = [(k, s == "snap") for k, s in (x.split(":") for x in os.environ.get(
    "FAULT_KINDS", "rank:snap,rank:disk,host:snap,host:disk,both:snap").split(","))]  # e.g. FAULT_KINDS=rank:snap
for k in range(FAULT_RUNS):
    for kind, snaps in KINDS:
        results["faults"].append(fault_run(f"{WORK}/fault-{kind}-{snaps}-{k}", kind, snaps))

json.dump(results, open(f"{WORK}/snapshots.json", "w"), indent=1)
print("\n| model | step, no snapshots | step, a snapshot every step | ratio (median of pairs) | rank 0 peak RSS off / on | one snapshot | rank 0's snapshot: training thread / background, ms |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name, s in results["step"].items():
    print(f"| {name} | {s['off_s']:.3f} s | {s['on_s']:.3f} s | {s['ratio_median']:.3f} ({', '.join(f'{x:.3f}' for x in s['ratios'])}) "
          f"| {s['rss_off']:.0f} / {s['rss_on']:.0f} MiB | {s['snapshot_bytes'] / 2**20:.1f} MiB | {s['thread_ms']:.1f} / {s['background_ms']:.1f} |")
print("\n| fault | resumed from | steps lost (each run) | fault to training again, s (each run) | fault to the first step done, s |")
print("| --- | --- | --- | --- | --- |")
for kind, snaps, label in (("rank", True, "kill -9 of rank 3"), ("rank", False, "kill -9 of rank 3"),
                           ("host", True, "host 1 lost, replaced"), ("host", False, "host 1 lost, replaced"),
                           ("both", True, "host 1 lost and host 0's snapshots"),
                           ("zhost", True, "ZeRO-1: host 1 lost, replaced"),
                           ("zboth", True, "ZeRO-1: host 1 lost and host 0's buddy copies")):
    rs = [r for r in results["faults"] if r["fault"] == kind and r["snapshots"] == snaps]
    if not rs:
        continue
    src = "memory snapshot" if snaps and "both" not in kind else "disk (checkpoint_interval=10)" if not snaps else "disk (initial weights)"
    src += " (node 0's buddy copy of host 1's shards)" if kind == "zhost" else ""
    print(f"| {label} | {src} | {', '.join(str(r['lost']) for r in rs)} | {', '.join(str(r['start_s']) for r in rs)} "
          f"| {', '.join(str(r['again_s']) for r in rs)} |")
