#!/usr/bin/env python3
"""Chaos runs of dtrain on the namespace cluster (driven by chaos.sh).

usage: chaos.py BIN WORK RUNS SEED

One uninterrupted reference run, then RUNS runs that each suffer one fault at
a random step: kill -9 or SIGSTOP of a random rank, or (every third run) the
link of a random host other than the store's taken down for 6 s.  dtrun
--max-restarts restarts the job from the newest complete checkpoint.  Every
run must finish, and its final weights must equal the reference's to the bit.
Prints, per run, the time from the fault to its detection (the first rank or
dtrun reporting the failure), from detection to training again (the first
step after the restart) and the steps of work lost; writes WORK/chaos.json.
"""
import hashlib, json, os, random, re, signal, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_jobs import fail, last_step, line_count, rank_pids, start_job, tail, wait_for, wait_nodes

BIN, WORK, RUNS, SEED = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
HOSTS, STEPS, INTERVAL = 4, 30, 5
GPT = ["--config", "configs/gpt-mini.json", "--set", "layers=1", "--set", "dim=32", "--set", "heads=2",
       "--set", "context=32", "--set", "batch_size=4", "--set", f"steps={STEPS}", "--set", "log_interval=1",
       "--set", "eval_interval=0", "--set", "eval_batches=1", "--set", "threads=1", "--set", "warmup_steps=5",
       "--set", f"checkpoint_interval={INTERVAL}", "--set", "checkpoint_keep=2"]
ENV = dict(os.environ, DT_HEARTBEAT_TIMEOUT="3", DT_TIMEOUT="60")
rng = random.Random(SEED)


def start(d):
    program = [f"{BIN}/dtrain", "train", *GPT, "--set", f"checkpoint_dir={d}/ck",
               "--set", f"metrics_file={d}/metrics.jsonl"]
    return start_job(d, HOSTS, HOSTS, [f"{BIN}/dtrun", "--max-restarts", "3", "-n", "1"], program, ENV,
                     f"chaos-{os.getpid()}-{rng.random()}")


def weights(d):
    path = f"{d}/ck/step-{STEPS:08d}/model.safetensors"
    if not os.path.exists(path):
        fail(f"{d}: no final checkpoint {path}")
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def detection(d, t_fault):
    """Time the first rank (or a dtrun, for its own rank's death) reported the failure."""
    rx = re.compile(r"dtrain: rank \d+: step \d+ failed|dtrun: rank \d+ .*(killed|exited)")
    while time.time() < t_fault + 60:
        if any(rx.search(open(f"{d}/node.{i}").read()) for i in range(HOSTS)):
            return time.time()
        time.sleep(0.02)
    fail(f"{d}: no rank reported the failure within 60 s")


t0 = time.time()
ref = f"{WORK}/reference"
wait_nodes(ref, start(ref), 240)
ref_weights = weights(ref)
print(f"reference: {STEPS} steps on {HOSTS} hosts in {time.time() - t0:.1f} s, weights {ref_weights[:16]}", flush=True)

results = []
for run in range(RUNS):
    d = f"{WORK}/run{run}"
    kind = "link-down" if run % 3 == 2 else rng.choice(["kill -9", "SIGSTOP"])
    victim = rng.randrange(1, HOSTS) if kind == "link-down" else rng.randrange(HOSTS)
    at = rng.randrange(3, STEPS - 6)
    procs = start(d)
    while last_step(f"{d}/metrics.jsonl") < at:
        if any(p.poll() is not None for p in procs):
            fail(f"{d}: a node ended before step {at}\n{tail(f'{d}/node.0')}")
        time.sleep(0.01)
    mark = line_count(f"{d}/node.0")
    step_at_fault = last_step(f"{d}/metrics.jsonl")
    t_fault = time.time()
    if kind == "kill -9":
        os.kill(rank_pids(procs[victim])[0], signal.SIGKILL)
    elif kind == "SIGSTOP":
        os.kill(rank_pids(procs[victim])[0], signal.SIGSTOP)  # dtrun ends it at the restart
    else:
        subprocess.run(["ip", "-n", f"dt{victim}", "link", "set", "eth0", "down"], check=True)
    t_detect = detection(d, t_fault)
    step_done = max(last_step(f"{d}/metrics.jsonl"), step_at_fault)  # finished before the job stopped
    if kind == "link-down":
        time.sleep(max(0, t_fault + 6 - time.time()))
        subprocess.run(["ip", "-n", f"dt{victim}", "link", "set", "eth0", "up"], check=True)
    _, m, n = wait_for(f"{d}/node.0", r"resumed from .* at step (\d+)|no checkpoint to resume from", mark)
    resumed = int(m.group(1)) if m.group(1) else 0
    t_train, _, _ = wait_for(f"{d}/node.0", r"^\[0\] (\S+Z )?step \d+/", n)
    wait_nodes(d, procs, 240)
    if weights(d) != ref_weights:
        fail(f"{d}: final weights differ from the uninterrupted run's ({kind} of rank {victim} at step {at})")
    r = {"run": run, "fault": kind, "rank": victim, "step": step_done, "resumed_at": resumed,
         "steps_lost": step_done - resumed, "detect_s": round(t_detect - t_fault, 2),
         "restart_s": round(t_train - t_detect, 2), "restarts": open(f"{d}/node.0").read().count("dtrun: restart ")}
    results.append(r)
    print(f"run {run}: {kind} of rank {victim} after step {step_at_fault}: detected in {r['detect_s']} s, "
          f"training again {r['restart_s']} s later (step {step_done} done, resumed at step {resumed}: "
          f"{r['steps_lost']} steps lost); final weights equal the reference's", flush=True)
json.dump(results, open(f"{WORK}/chaos.json", "w"), indent=1)
for kind in ("kill -9", "SIGSTOP", "link-down"):
    rs = [r for r in results if r["fault"] == kind]
    if rs:
        mean = lambda k: sum(r[k] for r in rs) / len(rs)
        print(f"{kind}: {len(rs)} runs, detection {mean('detect_s'):.2f} s, training again {mean('restart_s'):.2f} s "
              f"later, {mean('steps_lost'):.1f} steps lost (mean)")
print("ok")
