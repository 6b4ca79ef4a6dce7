#!/usr/bin/env python3
"""Elastic membership on the namespace cluster (driven by elastic.sh).

usage: elastic.py BIN WORK

dtrun --nnodes 3:4 on 4 hosts, global batch 48 = 4 per rank x 4 ranks x 3
micro-batches.  Host 3 is removed for good (its dtrun and rank killed): after
--rejoin-timeout the job goes on with 3 nodes, gradient accumulation 4, the
global batch still 48.  Then host 3 comes back: node 0 restarts the job at the
next step boundary it sees, with 4 nodes and accumulation 3 again, and the
job finishes.
"""
import os, signal, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_jobs import fail, last_step, line_count, rank_pids, start_job, start_node, wait_for, wait_nodes

BIN, WORK = sys.argv[1], sys.argv[2]
d = f"{WORK}/elastic"
# Enough steps that the job still runs when host 3 is back: it rejoins about
# 3 s after the 3 nodes' first checkpoint (step 20), near step 60 at about 20
# steps a second (41 to 57 seen); the 560 steps after that took 25 of the
# test's 40 s with 600.
STEPS = 250
ENV = dict(os.environ, DT_HEARTBEAT_TIMEOUT="3", DT_TIMEOUT="60")
DTRUN = [f"{BIN}/dtrun", "--max-restarts", "3", "--rejoin-timeout", "5", "-n", "1"]
PROGRAM = [f"{BIN}/dtrain", "train", "--config", "configs/gpt-mini.json", "--set", "layers=2", "--set", "dim=64",
           "--set", "heads=2", "--set", "context=64", "--set", "batch_size=4", "--set", "grad_accumulation=3",
           "--set", f"steps={STEPS}", "--set", "log_interval=1", "--set", "eval_interval=0", "--set", "eval_batches=1",
           "--set", "threads=1", "--set", "checkpoint_interval=20", "--set", f"checkpoint_dir={d}/ck",
           "--set", f"metrics_file={d}/metrics.jsonl"]
log0 = f"{d}/node.0"

procs = start_job(d, 4, "3:4", DTRUN, PROGRAM, ENV, f"elastic-{os.getpid()}")
wait_for(log0, r"batch 4 x 4 ranks x 3 accumulation steps = 48")
while last_step(f"{d}/metrics.jsonl") < 10:
    time.sleep(0.02)

# -- remove host 3 for good
mark = line_count(log0)
t_gone = time.time()
for pid in rank_pids(procs[3]) + [procs[3].pid]:
    os.kill(pid, signal.SIGKILL)
procs[3].wait()
_, _, n = wait_for(log0, r"dtrun: generation \d+: 3 nodes, 3 ranks", mark)
wait_for(log0, r"elastic: 3 ranks now \(the checkpoint was written by 4\): gradient accumulation 3 -> 4", n)
wait_for(log0, r"batch 4 x 3 ranks x 4 accumulation steps = 48", n)
t_on3, _, n = wait_for(log0, r"^\[0\] (\S+Z )?step \d+/", n)
print(f"host 3 removed: training again on 3 nodes {t_on3 - t_gone:.1f} s later (includes --rejoin-timeout 5), "
      f"global batch 48 kept with accumulation 4", flush=True)

# -- host 3 comes back and joins at the next restart, once the 3 nodes wrote a
# checkpoint (else the restart resumes from the 4 nodes' and nothing changes)
wait_for(log0, r"^\[0\] (\S+Z )?checkpoint .*/step-\d+ \(", n)
mark = line_count(log0)
t_back = time.time()
procs[3] = start_node(d, 3, "3:4", DTRUN, PROGRAM, ENV)
_, _, n = wait_for(log0, r"dtrun: restarting: membership: a node is waiting to join", mark)
_, _, n = wait_for(log0, r"dtrun: generation \d+: 4 nodes, 4 ranks", n)
wait_for(log0, r"elastic: 4 ranks now \(the checkpoint was written by 3\): gradient accumulation 4 -> 3", n)
wait_for(log0, r"batch 4 x 4 ranks x 3 accumulation steps = 48", n)
t_on4, _, _ = wait_for(log0, r"^\[0\] (\S+Z )?step \d+/", n)
print(f"host 3 back: training on 4 nodes {t_on4 - t_back:.1f} s after it started", flush=True)
wait_nodes(d, procs, 300)
if last_step(f"{d}/metrics.jsonl") != STEPS:
    fail(f"the job ended at step {last_step(f'{d}/metrics.jsonl')}, not {STEPS}")
if not os.path.exists(f"{d}/ck/step-{STEPS:08d}/model.safetensors"):
    fail("no final checkpoint")
print("ok")
