#!/usr/bin/env python3
"""Chaos runs of dtrain on the namespace cluster (driven by chaos.sh).

usage: chaos.py BIN WORK RUNS SEED

One uninterrupted reference run, then RUNS runs that each suffer one fault at
a random step: kill -9 or SIGSTOP of a random rank, or (every third run) the
link of a random host other than the store's taken down for 6 s.  dtrun
--max-restarts restarts the job from the newest complete checkpoint.  Every
run must finish, and its final weights must equal the reference's to the bit.
Prints, per run, the time from the fault to its detection (the first rank
reporting the failure), from detection to training again (the first step
after the restart) and the steps of work lost; writes them to WORK/chaos.json.
"""
import hashlib, json, os, random, re, signal, subprocess, sys, time

BIN, WORK, RUNS, SEED = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
HOSTS, STEPS, INTERVAL = 4, 30, 5
GPT = ["--config", "configs/gpt-mini.json", "--set", "layers=1", "--set", "dim=32", "--set", "heads=2",
       "--set", "context=32", "--set", "batch_size=4", "--set", f"steps={STEPS}", "--set", "log_interval=1",
       "--set", "eval_interval=0", "--set", "eval_batches=1", "--set", "threads=1", "--set", "warmup_steps=5",
       "--set", f"checkpoint_interval={INTERVAL}", "--set", "checkpoint_keep=2"]
ENV = dict(os.environ, DT_HEARTBEAT_TIMEOUT="3", DT_TIMEOUT="60")
rng = random.Random(SEED)


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def start(d):
    os.makedirs(d)
    with open(f"{d}/tok", "w") as f:
        f.write(f"chaos-{os.getpid()}-{rng.random()}\n")
    procs = []
    for i in reversed(range(HOSTS)):
        cmd = ["ip", "netns", "exec", f"dt{i}", f"{BIN}/dtrun", "--nnodes", str(HOSTS), "--node-rank", str(i),
               "--master", "10.77.0.1:29500", "--token-file", f"{d}/tok", "--join-timeout", "60",
               "--max-restarts", "3", "-n", "1", f"{BIN}/dtrain", "train", *GPT,
               "--set", f"checkpoint_dir={d}/ck", "--set", f"metrics_file={d}/metrics.jsonl"]
        procs.insert(0, subprocess.Popen(cmd, stdout=open(f"{d}/node.{i}", "w"), stderr=subprocess.STDOUT,
                                         env=ENV))
    return procs


def finish(d, procs, limit):
    end = time.time() + limit
    for i, p in enumerate(procs):
        try:
            rc = p.wait(timeout=max(1, end - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail(f"{d}: node {i} still running after {limit} s\n" + open(f"{d}/node.0").read()[-3000:])
        if rc != 0:
            fail(f"{d}: node {i} exited with {rc}\n" + open(f"{d}/node.{i}").read()[-3000:])


def last_step(d):
    try:
        steps = [json.loads(l)["step"] for l in open(f"{d}/metrics.jsonl") if '"loss"' in l]
    except (OSError, ValueError):
        return 0
    return max(steps, default=0)


def weights(d):
    path = f"{d}/ck/step-{STEPS:08d}/model.safetensors"
    if not os.path.exists(path):
        fail(f"{d}: no final checkpoint {path}")
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def rank_pid(dtrun):
    with open(f"/proc/{dtrun.pid}/task/{dtrun.pid}/children") as f:
        kids = f.read().split()
    if len(kids) != 1:
        fail(f"expected one rank under dtrun {dtrun.pid}, found {kids}")
    return int(kids[0])


def first_after(d, pattern, since_line):
    """(time seen, match) of the first line matching pattern in node.0 after line since_line, polling."""
    rx = re.compile(pattern)
    deadline = time.time() + 120
    while time.time() < deadline:
        lines = open(f"{d}/node.0").read().splitlines()
        for n, line in enumerate(lines[since_line:], since_line):
            m = rx.search(line)
            if m:
                return time.time(), m, n
        time.sleep(0.02)
    fail(f"{d}: /{pattern}/ never appeared in node.0\n" + open(f"{d}/node.0").read()[-3000:])


def detection(d, t_fault):
    """Time the first rank reported the failure (any node's log), polling."""
    deadline = t_fault + 60
    while time.time() < deadline:
        for i in range(HOSTS):
            if re.search(r"dtrain: rank \d+: step \d+ failed|dtrun: rank \d+ .*(killed|exited)",
                         open(f"{d}/node.{i}").read()):
                return time.time()
        time.sleep(0.02)
    fail(f"{d}: no rank reported the failure within 60 s")


t0 = time.time()
ref = f"{WORK}/reference"
finish(ref, start(ref), 240)
ref_weights = weights(ref)
print(f"reference: {STEPS} steps on {HOSTS} hosts in {time.time() - t0:.1f} s, weights {ref_weights[:16]}", flush=True)

results = []
for run in range(RUNS):
    d = f"{WORK}/run{run}"
    kind = "link-down" if run % 3 == 2 else rng.choice(["kill -9", "SIGSTOP"])
    victim = rng.randrange(1, HOSTS) if kind == "link-down" else rng.randrange(HOSTS)
    at = rng.randrange(3, STEPS - 6)
    procs = start(d)
    while last_step(d) < at:
        if any(p.poll() is not None for p in procs):
            fail(f"{d}: a node ended before step {at}\n" + open(f"{d}/node.0").read()[-3000:])
        time.sleep(0.01)
    mark = len(open(f"{d}/node.0").read().splitlines())
    step_at_fault = last_step(d)
    t_fault = time.time()
    if kind == "kill -9":
        os.kill(rank_pid(procs[victim]), signal.SIGKILL)
    elif kind == "SIGSTOP":
        os.kill(rank_pid(procs[victim]), signal.SIGSTOP)  # dtrun's SIGKILL ends it at the restart
    else:
        subprocess.run(["ip", "-n", f"dt{victim}", "link", "set", "eth0", "down"], check=True)
    t_detect = detection(d, t_fault)
    step_done = max(last_step(d), step_at_fault)  # the last step finished before the job stopped
    if kind == "link-down":
        time.sleep(max(0, t_fault + 6 - time.time()))
        subprocess.run(["ip", "-n", f"dt{victim}", "link", "set", "eth0", "up"], check=True)
    _, m, n = first_after(d, r"resumed from .* at step (\d+)|no checkpoint to resume from", mark)
    resumed = int(m.group(1)) if m.group(1) else 0
    t_train, _, _ = first_after(d, r"^\[0\] step \d+/", n)
    finish(d, procs, 240)
    w = weights(d)
    if w != ref_weights:
        fail(f"{d}: final weights differ from the uninterrupted run's ({kind} of rank {victim} at step {at})")
    r = {"run": run, "fault": kind, "rank": victim, "step": step_done, "resumed_at": resumed,
         "steps_lost": step_done - resumed, "detect_s": round(t_detect - t_fault, 2),
         "restart_s": round(t_train - t_detect, 2), "restarts": open(f"{d}/node.0").read().count("dtrun: restart ")}
    results.append(r)
    print(f"run {run}: {kind} of rank {victim} after step {step_at_fault}: detected in {r['detect_s']} s, "
          f"training again {r['restart_s']} s later (step {step_done} done, resumed at step {resumed}: {r['steps_lost']} steps lost); "
          "final weights equal the reference's", flush=True)
json.dump(results, open(f"{WORK}/chaos.json", "w"), indent=1)
for kind in ("kill -9", "SIGSTOP", "link-down"):
    rs = [r for r in results if r["fault"] == kind]
    if rs:
        mean = lambda k: sum(r[k] for r in rs) / len(rs)
        print(f"{kind}: {len(rs)} runs, detection {mean('detect_s'):.2f} s, training again {mean('restart_s'):.2f} s "
              f"later, {mean('steps_lost'):.1f} steps lost (mean)")
print("ok")
