"""dtrun jobs on the namespace cluster dt0..dt(N-1), for the Python test drivers
(chaos.py, elastic.py): start nodes, find their ranks, watch their logs."""
import os, re, subprocess, sys, time


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def tail(path, n=3000):
    try:
        return open(path).read()[-n:]
    except OSError:
        return f"({path} missing)"


def start_node(d, i, nnodes, dtrun_args, program, env):
    """One dtrun in namespace dt<i>; its output goes to d/node.<i> (appended)."""
    cmd = ["ip", "netns", "exec", f"dt{i}", dtrun_args[0], "--nnodes", str(nnodes), "--node-rank", str(i),
           "--master", "10.77.0.1:29500", "--token-file", f"{d}/tok", "--join-timeout", "60", *dtrun_args[1:],
           *program]
    return subprocess.Popen(cmd, stdout=open(f"{d}/node.{i}", "a"), stderr=subprocess.STDOUT, env=env)


def start_job(d, hosts, nnodes, dtrun_args, program, env, token):
    """Every host's dtrun, the store's host (0) last; returns their Popens by host."""
    os.makedirs(d)
    with open(f"{d}/tok", "w") as f:
        f.write(token + "\n")
    procs = [None] * hosts
    for i in reversed(range(hosts)):
        procs[i] = start_node(d, i, nnodes, dtrun_args, program, env)
    return procs


def wait_nodes(d, procs, limit, hosts=None):
    """Wait for the given hosts' dtrun (default: all) to exit 0 within limit seconds."""
    end = time.time() + limit
    for i in (range(len(procs)) if hosts is None else hosts):
        try:
            rc = procs[i].wait(timeout=max(1, end - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            fail(f"{d}: node {i} still running after {limit} s\n{tail(f'{d}/node.0')}")
        if rc != 0:
            fail(f"{d}: node {i} exited with {rc}\n{tail(f'{d}/node.{i}')}")


def rank_pids(dtrun):
    """The ranks dtrun started (its children)."""
    with open(f"/proc/{dtrun.pid}/task/{dtrun.pid}/children") as f:
        return [int(p) for p in f.read().split()]


def last_step(metrics):
    try:
        steps = [int(m.group(1)) for m in re.finditer(r'"step": (\d+), "loss"', open(metrics).read())]
    except OSError:
        return 0
    return max(steps, default=0)


def wait_for(path, pattern, since_line=0, limit=120):
    """(time seen, match, line number) of the first line of path after since_line matching pattern."""
    rx = re.compile(pattern)
    deadline = time.time() + limit
    while time.time() < deadline:
        lines = open(path).read().splitlines()
        for n, line in enumerate(lines[since_line:], since_line):
            m = rx.search(line)
            if m:
                return time.time(), m, n
        time.sleep(0.02)
    fail(f"/{pattern}/ never appeared in {path} within {limit} s\n{tail(path)}")


def line_count(path):
    return len(open(path).read().splitlines())
