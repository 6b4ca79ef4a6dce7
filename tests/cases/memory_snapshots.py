#!/usr/bin/env python3
"""Memory snapshots (memory_checkpoint_interval) on one host, driven by
memory_snapshots.sh.

usage: memory_snapshots.py BIN WORK CASE...

A case is LAYOUT:FAULT.  LAYOUT: ddp (dp=4, the snapshot's copy in the
optimizer's update), ddpbg (the same, the copy on the writer thread), zero (ZeRO-1 over dp=4), tp
(tp=2 x dp=2), pp (pp=2 x dp=2), ps (3 workers and a parameter server,
which is the rank killed).  FAULT:
  kill      kill -9 of rank 2 (ps: 3) mid-run, snapshots every step and no disk
            checkpoint after step 0: the restart resumes from the memory
            snapshot of the step the job had reached (or of the step before,
            when the kill fell in that snapshot's background write)
  crc       the same, and the newest snapshot is damaged before the restart
            reads it: refused by its CRC, the other one resumed
  lost      the same with a disk checkpoint every 10 steps, and every
            snapshot removed before the restart: the disk checkpoint resumed,
            and the log says so
LAYOUT nodes: two dtrun nodes on localhost, 2 ranks each, each with a
snapshot root of its own (two hosts' memories); FAULT host: node 1 killed
whole and replaced by a fresh one (its ranks get the snapshot copied from
rank 0); both: node 0's snapshots wiped too (the disk checkpoint resumed);
kill: kill -9 of rank 3 (on node 1), which must have kept snapshots of the
replicated state in its own root (nothing to copy at the restart).
LAYOUT nodeszero: the same under ZeRO-1, whose shard files each node keeps
in its own memory and copies to its buddy node: host: node 1's shards are
taken from node 0's buddy copy; both: node 0's buddy copies wiped too (node
1 and its buddy lost): the disk checkpoint resumed, and the log says why.
Every faulted run's final weights must equal those of an uninterrupted run
without snapshots to the bit.  Prints, per case, the steps lost and the time
from the kill to the first step after the restart.
"""
import glob, hashlib, os, re, signal, subprocess, sys, time

BIN, WORK, CASES = sys.argv[1], sys.argv[2], sys.argv[3:]
STEPS, KILL_AT = 24, 13
GPT = ["--config", "configs/gpt-mini.json", "--set", "layers=2", "--set", "dim=32", "--set", "heads=2",
       "--set", "context=32", "--set", "batch_size=4", "--set", f"steps={STEPS}", "--set", "log_interval=1",
       "--set", "eval_interval=0", "--set", "eval_batches=1", "--set", "threads=1", "--set", "warmup_steps=5"]
LAYOUTS = {"ddp": [], "ddpbg": [], "zero": ["--set", "zero_stage=1"], "tp": ["--set", "tp=2"], "pp": ["--set", "pp=2"],
           "ps": ["--set", "servers=1"]}
# where the copy of DDP's replicated state runs (DT_SNAPSHOT_COPY), each forced once: ddp in the optimizer's
# update (the tee), ddpbg on the writer thread; the nodes layouts take auto
LAYOUT_ENV = {"ddp": {"DT_SNAPSHOT_COPY": "update"}, "ddpbg": {"DT_SNAPSHOT_COPY": "background"}}
VICTIM = {"ddp": 2, "ddpbg": 2, "zero": 2, "tp": 2, "pp": 2, "ps": 3}  # ps: the server (rank 3), its state in the snapshot
SNAP = os.environ.get("DT_SNAPSHOT_ROOT", "/dev/shm") + "/dtrain-"  # dtrun's snapshot directories
ENV = dict(os.environ, DT_HEARTBEAT_TIMEOUT="5", DT_TIMEOUT="60")
# generation 1's ranks: rank 0 damages or removes the snapshots first, the others wait for it
BEFORE = {
    "kill": "",
    "crc": 'if [ "$DT_RESTART" = 1 ]; then if [ "$DT_RANK" = 0 ]; then '
           'f=$(ls -d "$DT_SNAPSHOT_DIR"/step-* | sort | tail -1)/model.safetensors; '
           'printf "\\377\\377\\377\\377" | dd of="$f" bs=1 seek=200 conv=notrunc status=none; touch "$MARK"; '
           'else while [ ! -e "$MARK" ]; do sleep 0.05; done; fi; fi; ',
    "lost": 'if [ "$DT_RESTART" = 1 ]; then if [ "$DT_RANK" = 0 ]; then rm -rf "$DT_SNAPSHOT_DIR"/step-* '
            '"$DT_SNAPSHOT_DIR"/.step-*; touch "$MARK"; '
            'else while [ ! -e "$MARK" ]; do sleep 0.05; done; fi; fi; ',
}


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def last_step(path):
    try:
        return max((int(m.group(1)) for m in re.finditer(r'"step": (\d+), "loss"', open(path).read())), default=0)
    except OSError:
        return 0


def rank_pid(job, rank):
    for p in open(f"/proc/{job.pid}/task/{job.pid}/children").read().split():
        try:
            if f"DT_RANK={rank}" in open(f"/proc/{p}/environ").read().split("\0"):
                return int(p)
        except OSError:
            pass
    return None


def weights(d):
    path = f"{d}/ck/step-{STEPS:08d}/model.safetensors"
    if not os.path.exists(path):
        fail(f"{d}: no final checkpoint {path}\n{open(f'{d}/log').read()[-3000:]}")
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def run(d, layout, fault=None):
    os.makedirs(d)
    # (ddp, ddpbg: dim 128, so that the update writes whole 64 KiB pieces of the state: dim 32's tensors cut each)
    gpt = [("dim=128" if x == "dim=32" else x) for x in GPT] if layout in LAYOUT_ENV else GPT
    sets = [*gpt, *LAYOUTS[layout], "--set", f"checkpoint_dir={d}/ck", "--set", f"metrics_file={d}/metrics.jsonl"]
    if fault:
        sets += ["--set", "memory_checkpoint_interval=1"]
    if fault == "lost":
        sets += ["--set", "checkpoint_interval=10"]
    program = [f"{BIN}/dtrain", "train", *sets]
    if fault and BEFORE[fault]:
        program = ["sh", "-c", BEFORE[fault] + 'exec "$@"', "sh", *program]
    env = dict(ENV, MARK=f"{d}/mark", **LAYOUT_ENV.get(layout, {}))
    log = open(f"{d}/log", "w")
    t0 = time.time()
    job = subprocess.Popen([f"{BIN}/dtrun", "--max-restarts", "1", "-n", "4", *program], stdout=log,
                           stderr=subprocess.STDOUT, env=env)
    r = {}
    if fault:
        while last_step(f"{d}/metrics.jsonl") < KILL_AT:
            if job.poll() is not None or time.time() - t0 > 120:
                fail(f"{d}: the job ended or stalled before step {KILL_AT}\n{open(f'{d}/log').read()[-3000:]}")
            time.sleep(0.01)
        victim = rank_pid(job, VICTIM[layout])
        r["at"] = last_step(f"{d}/metrics.jsonl")
        # the disk checkpoints complete before the kill (renamed into place when whole): the background writer of
        # the newest may still be at work on a loaded machine
        done = [int(m.group(1)) for e in os.listdir(f"{d}/ck") if (m := re.fullmatch(r"step-(\d{8})", e))] \
            if os.path.isdir(f"{d}/ck") else []
        r["disk_done"] = max(done, default=0)
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        mark = None
        while time.time() - t_kill < 60:  # the first step logged after the restart
            text = open(f"{d}/log").read()
            m = re.search(r"resumed from (\S+) at step (\d+)", text)
            if m and re.search(r"^\[0\] (\S+Z )?step \d+/", text[m.end():], re.M):
                r["train_again_s"] = time.time() - t_kill
                r["resumed"], mark = int(m.group(2)), m.group(1)
                break
            time.sleep(0.01)
        r["from"] = mark
    try:
        rc = job.wait(timeout=240)
    except subprocess.TimeoutExpired:
        job.kill()
        fail(f"{d}: still running after 240 s")
    if rc != 0:
        fail(f"{d}: dtrun exited {rc}\n{open(f'{d}/log').read()[-3000:]}")
    return r


def expect(d, pattern):
    if not re.search(pattern, open(f"{d}/log").read(), re.M):
        fail(f"{d}: expected /{pattern}/ in the log\n{open(f'{d}/log').read()[-3000:]}")


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def run_nodes(d, fault=None, layout=(), zero=False):
    """Two dtrun nodes on localhost, 2 ranks each, each node with a snapshot
    root of its own (two hosts' memories).  fault "host": node 1 (its dtrun
    and ranks) killed with -9 after step KILL_AT, its memory wiped, and a
    fresh node 1 started in its place; "both": node 0's snapshots wiped too
    before the new node 1 joins.  Returns what run() does."""
    os.makedirs(d)
    roots = [f"{d}/mem0", f"{d}/mem1"]
    for r in roots:
        os.makedirs(r)
    port = free_port()
    open(f"{d}/tok", "w").write(f"snap-{os.getpid()}\n")
    sets = [*GPT, *layout, "--set", f"checkpoint_dir={d}/ck", "--set", f"metrics_file={d}/metrics.jsonl"]
    if fault:
        sets += ["--set", "memory_checkpoint_interval=1"]

    def node(i, log_mode="w"):
        return subprocess.Popen([f"{BIN}/dtrun", "--nnodes", "2", "--node-rank", str(i), "--master",
                                 f"127.0.0.1:{port}", "--token-file", f"{d}/tok", "--max-restarts", "1",
                                 "-n", "2", f"{BIN}/dtrain", "train", *sets],
                                stdout=open(f"{d}/log" if i == 0 else f"{d}/log1", log_mode),
                                stderr=subprocess.STDOUT, env=dict(ENV, DT_SNAPSHOT_ROOT=roots[i]))
    n1, n0 = node(1), node(0)
    t0, r = time.time(), {}
    if fault:
        while last_step(f"{d}/metrics.jsonl") < KILL_AT:
            if n0.poll() is not None or time.time() - t0 > 120:
                fail(f"{d}: the job ended or stalled before step {KILL_AT}\n{open(f'{d}/log').read()[-3000:]}")
            time.sleep(0.01)
        r["at"] = last_step(f"{d}/metrics.jsonl")
        # the disk checkpoints complete before the kill (renamed into place when whole): the background writer of
        # the newest may still be at work on a loaded machine
        done = [int(m.group(1)) for e in os.listdir(f"{d}/ck") if (m := re.fullmatch(r"step-(\d{8})", e))] \
            if os.path.isdir(f"{d}/ck") else []
        r["disk_done"] = max(done, default=0)
        t_kill = time.time()
        ranks = open(f"/proc/{n1.pid}/task/{n1.pid}/children").read().split()
        if fault == "kill":  # one rank of node 1: data parallelism's state is in node 1's own memory too
            r["own"] = sorted(glob.glob(f"{roots[1]}/*/step-*"))
            os.kill(int(ranks[-1]), signal.SIGKILL)
            ranks = []
        else:
            n1.kill()  # the host is gone: its dtrun and its ranks
        for p in ranks:
            try:
                os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass
        if fault != "kill":
            n1.wait()
        wipe = lambda root, what="step-* \"{root}\"/*/.step-* \"{root}\"/*/shards-* \"{root}\"/*/buddy-*": \
            subprocess.run(["sh", "-c", f'rm -rf "{root}"/*/' + what.format(root=root)], check=True)
        if fault != "kill":
            wipe(roots[1])  # its memory is gone with it
        while "dtrun: restart 1 of 1" not in open(f"{d}/log").read():  # (a dtrun joining before would join
            if time.time() - t_kill > 60:                                # generation 0, which node 1 had joined)
                fail(f"{d}: node 0 did not restart the job\n{open(f'{d}/log').read()[-3000:]}")
            time.sleep(0.01)
        if fault == "both":  # node 0's ranks have stopped: no snapshot write is in flight
            wipe(roots[0], "buddy-*" if zero else "step-* \"{root}\"/*/.step-*")  # ZeRO: node 0's buddy copies
        if fault != "kill":
            n1 = node(1, "a")  # the replacement host
        while time.time() - t_kill < 60:
            text = open(f"{d}/log").read()
            m = re.search(r"resumed from (\S+) at step (\d+)", text)
            if m and re.search(r"^\[0\] (\S+Z )?step \d+/", text[m.end():], re.M):
                r["train_again_s"] = time.time() - t_kill
                r["resumed"], r["from"] = int(m.group(2)), m.group(1)
                break
            time.sleep(0.01)
    for i, p in enumerate([n0, n1]):
        try:
            rc = p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            fail(f"{d}: node {i} still running after 240 s")
        if rc != 0:
            fail(f"{d}: node {i} exited {rc}\n{open(f'{d}/log' if i == 0 else f'{d}/log1').read()[-3000:]}")
    for root in roots:
        if os.listdir(root):
            fail(f"{d}: dtrun left {os.listdir(root)} in {root}")
    return r


refs = {}
for case in CASES:
    layout, fault = case.split(":")
    if layout.startswith("nodes"):  # two nodes with separate memories: a host lost and replaced
        sets = LAYOUTS[layout[5:] or "ddp"]
        if layout not in refs:
            run_nodes(f"{WORK}/{layout}-ref", None, sets)
            refs[layout] = weights(f"{WORK}/{layout}-ref")
        d = f"{WORK}/{layout}-{fault}"
        r = run_nodes(d, fault, sets, layout == "nodeszero")
        if "resumed" not in r:
            fail(f"{d}: no step after the restart within 60 s\n{open(f'{d}/log').read()[-3000:]}")
        if weights(d) != refs[layout]:
            fail(f"{d}: the final weights differ from the uninterrupted run's")
        zero = layout == "nodeszero"
        if fault == "kill":  # node 1 kept snapshots of its own: nothing to copy unless its newest was behind node 0's
            if not r["own"]:
                fail(f"{d}: node 1's snapshot root {d}/mem1 held no snapshot of its own at the kill")
            expect(d, r"restart 1: resuming from the memory snapshot of step \d+ ")
            if r["resumed"] < r["at"] - 1:
                fail(f"{d}: resumed at step {r['resumed']} (step {r['at']} was done at the kill)")
            copied = re.search(r"restart 1: resuming from the memory snapshot.*; copied from rank", open(f"{d}/log").read())
            print(f"2 nodes: rank 3 killed after step {r['at']}: resumed at step {r['resumed']} from the memory "
                  f"snapshot, {'copied to node 1 (its newest was behind)' if copied else 'each node its own (no copy)'}, "
                  f"training again {r['train_again_s']:.2f} s after the kill; final weights equal the uninterrupted "
                  f"run's", flush=True)
            continue
        if fault == "host":
            expect(d, r"restart 1: resuming from the memory snapshot of step \d+ .*; copied from rank 0 to the "
                      r"nodes that had none")
            if zero:  # node 1's shards from node 0's buddy copy
                expect(d, r"restart 1: the memory snapshot of step \d+ put together from the shards of 2 ranks held "
                          r"on other nodes")
            # ZeRO: the buddy copy of the step logged last may still have been on its way at the kill
            if r["resumed"] < r["at"] - 1 - zero or not r["from"].startswith(f"{d}/mem0/dtrain-"):
                fail(f"{d}: resumed at step {r['resumed']} from {r['from']} (step {r['at']} was done at the kill)")
        elif zero:
            expect(d, r"restart 1: the memory snapshot of step \d+ lacks rank [23]'s shard: neither its node \(1\) nor "
                      r"its buddy node \(0\) has a copy \(both lost\)")
            expect(d, r"restart 1: no memory snapshot is complete \(a node and its buddy node were both lost: above\); "
                      r"resuming from the disk")
            if r["resumed"] != 0 or not r["from"].startswith(f"{d}/ck/"):
                fail(f"{d}: resumed at step {r['resumed']} from {r['from']}; expected the disk's step 0")
        else:
            expect(d, r"restart 1: no memory snapshot is left \(lost or damaged\); resuming from the disk")
            if r["resumed"] != 0 or not r["from"].startswith(f"{d}/ck/"):
                fail(f"{d}: resumed at step {r['resumed']} from {r['from']}; expected the disk's step 0")
        print(f"2 nodes{' ZeRO-1' if zero else ''} {fault}: node 1 killed after step {r['at']} (its memory wiped{', and node 0' if fault == 'both' else ''}) "
              f"and replaced: resumed at step {r['resumed']} from {'the memory snapshot' if fault == 'host' else 'disk'}, "
              f"training again {r['train_again_s']:.2f} s after the kill; final weights equal the uninterrupted run's",
              flush=True)
        continue
    layout, fault = case.split(":")
    if layout not in refs:
        run(f"{WORK}/{layout}-ref", layout)
        refs[layout] = weights(f"{WORK}/{layout}-ref")
    d = f"{WORK}/{layout}-{fault}"
    r = run(d, layout, fault)
    if "resumed" not in r:
        fail(f"{d}: no step after the restart within 60 s\n{open(f'{d}/log').read()[-3000:]}")
    if weights(d) != refs[layout]:
        fail(f"{d}: the final weights differ from the uninterrupted run's")
    if fault == "kill":
        expect(d, r"restart 1: resuming from the memory snapshot of step \d+")
        if layout == "ddp":  # the tee did copy most of it
            expect(d, r"the copy in the update \((?:[5-9]\d|100)% of it\)")
        # the step logged last at the kill, or (the kill fell in its snapshot's background write) the one before
        if r["resumed"] < r["at"] - 1 or not r["from"].startswith(SNAP):
            fail(f"{d}: resumed at step {r['resumed']} from {r['from']}, but step {r['at']} was done at the kill")
    elif fault == "crc":
        expect(d, r"skipping checkpoint \S+/step-\d+ \(see above\); falling back to the previous one")
        expect(d, r"restart 1: resuming from the memory snapshot of step \d+")
        if r["resumed"] < r["at"] - 2 or not r["from"].startswith(SNAP):
            fail(f"{d}: resumed at step {r['resumed']} from {r['from']} (step {r['at']} was done at the kill)")
    else:
        expect(d, r"restart 1: no memory snapshot is left \(lost or damaged\); resuming from the "
                  r"disk checkpoint")
        # the newest disk checkpoint whole at the kill: the one of step 10 * (at // 10), or the one before it when
        # its background write had not ended (seen at the kill)
        newest = {10 * (r["at"] // 10), r["disk_done"]}
        if r["resumed"] not in newest or not r["from"].startswith(f"{d}/ck/"):
            fail(f"{d}: resumed at step {r['resumed']} from {r['from']}; expected the disk checkpoint of step "
                 f"{' or '.join(map(str, sorted(newest)))}")
    print(f"{layout} {fault}: kill -9 of rank {VICTIM[layout]} after step {r['at']}: resumed at step {r['resumed']} "
          f"({r['at'] - r['resumed']} whole steps lost), training again {r['train_again_s']:.2f} s after the kill; "
          f"final weights equal the uninterrupted run's", flush=True)
print("ok")
