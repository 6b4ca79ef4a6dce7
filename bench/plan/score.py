#!/usr/bin/env python3
"""Score the planner against step times already measured (issue 47).

    bench/plan/score.py [TABLE=bench/plan/round3.tsv] [--bin build/bin] [--old-bin DIR] [--anchor]
                        [--ranks 4] [--set K=V ...] [--markdown]

TABLE: one row per line, tab-separated: model (a configs/ name), layout (the
trainer's --set words, "default" for none), measured s/step, and optionally
the s/step predicted when it was measured; '#' lines are comments.  For
each row `dtrain plan --config configs/MODEL.json -n RANKS --layout LAYOUT
--json` predicts the step (with --set threads=1 --set batch_size=8 unless
--set is given: validate.sh's settings), and the script prints predicted,
measured, error (measured / predicted - 1), then the median and the worst
|error| per model and over all rows.  No training runs: only the profile,
measured once per model and cached in $XDG_CACHE_HOME/dtrain (set it to a
directory of your own to keep one profile across calls).

--anchor: a profile taken now is not the one the rows were predicted with
(on a shared machine they differ by up to 2x).  With --anchor each model's
cached profile is rescaled (every block's times and the optimizer's, by one
factor; the measured sharing figures kept) so that its `default` row
predicts, without the measured contention, what the table's 4th column says
was predicted then: the rows are scored against the machine's speed of
that day, and only the model's shape is tested.  Needs XDG_CACHE_HOME set.

--old-bin DIR: also predict each row with another build's dtrain (the model
before a change) on the same profile (rescaled with --anchor; the sharing
figures left out), for a before/after column.  Needs XDG_CACHE_HOME set.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SHARED_KEYS = ("shared_ranks", "contention", "sync_s")


def plan(binary, model, layout, ranks, sets):
    args = [os.path.join(binary, "dtrain"), "plan", "--config", f"configs/{model}.json", "-n", str(ranks), "--json",
            "--layout", "" if layout == "default" else layout]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit {r.returncode}"
    return json.loads(r.stdout), None


def profile_file(binary, model, ranks, sets):
    """The cache file `binary` reads for model (profiled now if it has none): dtrain plan names it."""
    args = [os.path.join(binary, "dtrain"), "plan", "--config", f"configs/{model}.json", "-n", str(ranks),
            "--layout", ""]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True)
    for line in (r.stdout + r.stderr).splitlines():
        for mark in ("the profile of this model from ", "profiled; cached in "):
            if mark in line:
                return line.split(mark, 1)[1].strip()
    sys.exit(f"{binary}: {model}: no cache file named: {r.stderr.strip()[-300:]}")


def scaled(profile, f, keep_shared=True):
    p = json.loads(json.dumps(profile))
    for b in p["blocks"]:
        for k in ("fwd_s", "bwd_s", "fwd_fixed_s", "bwd_fixed_s"):
            if k in b:
                b[k] *= f
    p["optimizer_s_per_param"] *= f
    if not keep_shared:
        for k in SHARED_KEYS:
            p.pop(k, None)
    return p


def anchor(a, model, target, sets):
    """Rescale model's cached profile(s) so that `default` predicts target without the contention (target
    None: as measured), and give --old-bin the same profile."""
    path = profile_file(a.bin, model, a.ranks, sets)
    orig = path + ".measured"
    if not os.path.exists(orig):
        os.replace(path, orig)
    base = json.load(open(orig))
    kappa = base.get("contention", 1) if base.get("shared_ranks") == a.ranks else 1
    f = 1.0
    for _ in range(3 if target else 0):  # the dp part does not scale: a few rounds converge
        json.dump(scaled(base, f), open(path, "w"))
        e, why = plan(a.bin, model, "default", a.ranks, sets)
        f *= target / (e["step_s"] / kappa)
    json.dump(scaled(base, f), open(path, "w"))
    if a.old_bin:
        old = profile_file(a.old_bin, model, a.ranks, sets)
        json.dump(scaled(base, f, keep_shared=False), open(old, "w"))
    print(f"{model}: profile x {f:.3f}" + (f" (default predicted {target} without the contention)" if target else "") +
          f"; measured sharing: contention {kappa:.3f}, barriers of 2 and 4 ranks "
          f"{[round(x * 1e3, 2) for x in base.get('sync_s', [])[:2]]} ms")


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table", nargs="?", default=os.path.join(root, "bench/plan/round3.tsv"))
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--old-bin")
    ap.add_argument("--anchor", action="store_true")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    sets = a.set or ["threads=1", "batch_size=8"]
    table = os.path.abspath(a.table)
    os.chdir(root)
    rows = []
    for line in open(table):
        if not line.strip() or line.startswith("#"):
            continue
        c = line.rstrip("\n").split("\t")
        rows.append((c[0], c[1], float(c[2]), float(c[3]) if len(c) > 3 and c[3] else None))
    if a.anchor or a.old_bin:
        if not os.environ.get("XDG_CACHE_HOME"):
            sys.exit("--anchor and --old-bin rewrite the cached profiles: set XDG_CACHE_HOME to a directory of your own")
        for model in dict.fromkeys(r[0] for r in rows):
            then = [r[3] for r in rows if r[0] == model and r[1] == "default" and r[3]]
            if a.anchor and not then:
                sys.exit(f"--anchor: no default row with a predicted figure for {model}")
            anchor(a, model, then[0] if a.anchor else None, sets)
    errs, old_errs = {}, {}
    if a.markdown:
        print("| model | layout | predicted s/step | measured s/step | error |" + (" before |" if a.old_bin else ""))
        print("| --- | --- | ---: | ---: | ---: |" + (" ---: |" if a.old_bin else ""))
    for model, layout, measured, _ in rows:
        e, why = plan(a.bin, model, layout, a.ranks, sets)
        if e is None:
            print(f"{model:10} {layout:46} refused: {why}")
            continue
        p = e["step_s"]
        err = measured / p - 1
        errs.setdefault(model, []).append(abs(err))
        before = ""
        if a.old_bin:
            o, _ = plan(a.old_bin, model, layout, a.ranks, sets)
            if o:
                old_errs.setdefault(model, []).append(abs(measured / o["step_s"] - 1))
                before = f"{100 * (measured / o['step_s'] - 1):+.0f}%"
        if a.markdown:
            print(f"| {model} | {layout} | {p:.4f} | {measured:.4f} | {100 * err:+.0f}% |" +
                  (f" {before} |" if a.old_bin else ""))
        else:
            parts = " ".join(f"{k[:-2]} {e[k]:.4f}" for k in ("compute_s", "bubble_s", "tp_s", "pp_s", "dp_s",
                                                               "recompute_s", "optimizer_s") if e.get(k))
            print(f"{model:10} {layout:46} predicted {p:7.4f} measured {measured:7.4f} error {100 * err:+5.0f}%"
                  f"{'  before ' + before if before else ''}   ({parts})")
    for name, table_errs in (("", errs), ("before: ", old_errs)):
        every = [x for v in table_errs.values() for x in v]
        for model, v in list(table_errs.items()) + ([("all", every)] if every else []):
            print(f"{name}{model}: {len(v)} rows, median |error| {100 * statistics.median(v):.1f}%, "
                  f"worst {100 * max(v):.1f}%")
    return 0 if errs else 1


if __name__ == "__main__":
    sys.exit(main())
