#!/usr/bin/env bash
# examples/k8s/entrypoint.sh runs a 2-pod Indexed Job's training with the
# environment Kubernetes gives each pod (docs/launching.md, "Kubernetes").  No
# Kubernetes here: the pods are network namespaces dt0 and dt1
# (scripts/netns-cluster.sh), each under its own UTS namespace with the pod's
# host name dtrain-K, and the headless Service's DNS records are
# /etc/netns/dtK/hosts (ip netns exec mounts it over /etc/hosts):
# dtrain-0.dtrain -> 10.77.0.1, dtrain-1.dtrain -> 10.77.0.2.
# Each pod's environment is only what Kubernetes would set: the env list of
# examples/k8s/dtrain-job.yaml's container (read from the manifest, which is
# also checked for agreement: completions = parallelism = DT_NNODES, the
# subdomain = the Service = DT_SERVICE, the Job's name = DT_JOB_NAME = the
# Service's selector, the Secret's mount = DT_TOKEN_FILE), JOB_COMPLETION_INDEX,
# HOSTNAME, PATH and HOME, and the Service variables of the API server; the
# one change is DT_TOKEN_FILE, which names a file here instead of the Secret's
# mount at /etc/dtrain/token.  The container's args (the manifest's) get small
# training settings appended.
#   1. refusals: JOB_COMPLETION_INDEX unset, not a number, out of range;
#      DT_NNODES unset; the placeholder token; no token file; no command;
#   2. pod 1 starts first, while pod 0's name does not resolve yet (as before
#      the Service publishes it): it waits, then both pods train together
#      (world size 2), each on its own host;
#   3. the dtrun command line it runs (a stand-in DTRUN prints it), the Job's
#      name taken from the host name dtrain-1 when DT_JOB_NAME is unset, and
#      a master name that never resolves: exit 1 after DT_JOIN_TIMEOUT.
# Skips (exit 77) without root or network namespaces.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "needs root for network namespaces"; exit 77; }
ip netns add dtkprobe$$ 2>/dev/null || { echo "cannot create network namespaces here"; exit 77; }
ip netns del dtkprobe$$
. "$(dirname "$0")/netns_common.sh"
entry=examples/k8s/entrypoint.sh
yaml=examples/k8s/dtrain-job.yaml

# ---- the manifest: its pod environment, args, and names that must agree ----
python3 - "$yaml" >"$WORK/manifest" <<'PY' || fail "$yaml: the names above disagree"
import json, re, sys
text = open(sys.argv[1]).read()
docs = {}
for d in re.split(r"^---$", text, flags=re.M):
    m = re.search(r"^kind: (\w+)$", d, re.M)
    if m:
        docs[m.group(1)] = d
bad = []
def get(kind, pattern):
    m = re.search(pattern, docs.get(kind, ""), re.M)
    if not m:
        bad.append(f"{kind}: nothing matches /{pattern}/")
        return None
    return m.group(1)
job = get("Job", r"^metadata:\n  name: (\S+)$")
mode = get("Job", r"^  completionMode: (\S+)$")
completions = get("Job", r"^  completions: (\d+)$")
parallelism = get("Job", r"^  parallelism: (\d+)$")
subdomain = get("Job", r"^      subdomain: (\S+)$")
command = get("Job", r"^ +command: (\[.*\])$")
args = get("Job", r"^ +args: (\[.*\])$")
mount = get("Job", r"^ +mountPath: (\S+)$")
item = get("Job", r"^ +items:\n +- key: token\n +path: (\S+)$")
secret_ref = get("Job", r"^ +secretName: (\S+)$")
service = get("Service", r"^metadata:\n  name: (\S+)$")
cluster_ip = get("Service", r"^  clusterIP: (\S+)$")
selector = get("Service", r"^  selector:\n    job-name: (\S+)$")
secret = get("Secret", r"^metadata:\n  name: (\S+)$")
env = dict(re.findall(r'^ +- name: (\w+)\n +value: "([^"]*)"$', docs.get("Job", ""), re.M))
def same(what, *values):
    if len(set(values)) != 1:
        bad.append(f"{what} disagree: {values}")
if not bad:
    same("completionMode / Indexed", mode, "Indexed")
    same("clusterIP / None (a headless Service)", cluster_ip, "None")
    same("completions / parallelism / DT_NNODES", completions, parallelism, env.get("DT_NNODES"))
    same("subdomain / the Service's name / DT_SERVICE", subdomain, service, env.get("DT_SERVICE"))
    same("the Job's name / DT_JOB_NAME / the Service's selector", job, env.get("DT_JOB_NAME"), selector)
    same("the token mount / DT_TOKEN_FILE", f"{mount}/{item}", env.get("DT_TOKEN_FILE"))
    same("the Secret / the volume's secretName", secret, secret_ref)
    same("the container's command / entrypoint.sh", json.loads(command)[-1].split("/")[-1], "entrypoint.sh")
for b in bad:
    print(b, file=sys.stderr)
if bad:
    sys.exit(1)
for k, v in env.items():
    print(f"env {k}={v}")
print("args " + " ".join(json.loads(args)))
PY
podenv=()
while read -r kind rest; do
    case $kind in
        env) podenv+=("$rest") ;;
        args) read -ra args <<<"$rest" ;;
    esac
done <"$WORK/manifest"
echo "the manifest's pod environment: ${podenv[*]}"
echo "the manifest's container args: ${args[*]}"
nnodes=$(sed -n 's/^env DT_NNODES=//p' "$WORK/manifest")
[ "$nnodes" = 2 ] || fail "this test runs 2 pods; $yaml has DT_NNODES=$nnodes"

# What Kubernetes adds for every pod, besides the manifest's env.
mkdir -p "$WORK/secret"
echo "k8s-test-token-$$-$RANDOM" >"$WORK/secret/token"
k8s=(PATH="$(cd "$BIN" && pwd):/usr/local/bin:/usr/bin:/bin" HOME=/root KUBERNETES_SERVICE_HOST=10.96.0.1
     KUBERNETES_SERVICE_PORT=443 KUBERNETES_PORT=tcp://10.96.0.1:443)
# pod_env K: the environment of pod K into the array pod (the token at a
# file of the test's).
pod_env() { pod=("${k8s[@]}" "${podenv[@]}" DT_TOKEN_FILE="$WORK/secret/token" JOB_COMPLETION_INDEX="$1" HOSTNAME="dtrain-$1"); }

# ---- 1. refusals (exit 2, naming what is wrong) ----
# refused LOG PATTERN ENV...: the entry script, run with only ENV, exits 2
# with PATTERN in its message.
refused() {
    local log=$1 pattern=$2 rc
    shift 2
    env -i "$@" "$entry" "${args[@]}" >"$WORK/$log" 2>&1
    rc=$?
    [ $rc = 2 ] || { cat "$WORK/$log"; fail "$log: expected exit 2, got $rc"; }
    expect_grep "$WORK/$log" "$pattern"
    echo "$log: $(tail -n 1 "$WORK/$log")"
}
pod_env 0
pod0=("${pod[@]}")
no_index=()
for e in "${pod0[@]}"; do [[ $e == JOB_COMPLETION_INDEX=* ]] || no_index+=("$e"); done
refused no-index "^entrypoint.sh: JOB_COMPLETION_INDEX is not set" "${no_index[@]}"
refused index-2-of-2 "^entrypoint.sh: JOB_COMPLETION_INDEX=2 is out of range: expected 0..1" "${pod0[@]}" JOB_COMPLETION_INDEX=2
refused index-not-a-number "^entrypoint.sh: JOB_COMPLETION_INDEX='x1' is not a whole number" "${pod0[@]}" JOB_COMPLETION_INDEX=x1
refused index-empty "^entrypoint.sh: JOB_COMPLETION_INDEX is empty" "${pod0[@]}" JOB_COMPLETION_INDEX=
no_nnodes=()
for e in "${pod0[@]}"; do [[ $e == DT_NNODES=* ]] || no_nnodes+=("$e"); done
refused no-nnodes "^entrypoint.sh: DT_NNODES is not set" "${no_nnodes[@]}"
refused port "^entrypoint.sh: DT_MASTER_PORT=70000 is out of range: expected 1..65535" "${pod0[@]}" DT_MASTER_PORT=70000
echo replace-with-a-random-token >"$WORK/placeholder"
refused placeholder-token "^entrypoint.sh: DT_TOKEN_FILE: .* is still the example's placeholder token" "${pod0[@]}" DT_TOKEN_FILE="$WORK/placeholder"
refused no-token-file "^entrypoint.sh: DT_TOKEN_FILE: no token file at /nonexistent/token" "${pod0[@]}" DT_TOKEN_FILE=/nonexistent/token
env -i "${pod0[@]}" "$entry" >"$WORK/no-command" 2>&1 && fail "ran without a command"
expect_grep "$WORK/no-command" "^entrypoint.sh: no command to run"
"$entry" --help | grep -q "JOB_COMPLETION_INDEX" || fail "--help does not describe JOB_COMPLETION_INDEX"

# ---- 2. two pods on two namespace hosts ----
scripts/netns-cluster.sh up 2 || fail "cannot build the namespace cluster"
made_dirs=()
cleanup_hosts() {
    local k
    for k in 0 1; do rm -f "/etc/netns/dt$k/hosts"; done
    for d in "${made_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
}
trap 'cleanup_hosts; scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
for k in 0 1; do
    [ -d "/etc/netns/dt$k" ] || { mkdir -p "/etc/netns/dt$k" && made_dirs+=("/etc/netns/dt$k"); }
done
printf '127.0.0.1\tlocalhost\n10.77.0.1\tdtrain-0.dtrain\n10.77.0.2\tdtrain-1.dtrain\n' >/etc/netns/dt0/hosts
# Pod 1 sees pod 0's record only later (appended in place below: the mount
# over its /etc/hosts shows the same file).
printf '127.0.0.1\tlocalhost\n10.77.0.2\tdtrain-1.dtrain\n' >/etc/netns/dt1/hosts

steps=20
train=(--set "mlp_sizes=[784,64,32,10]" --set steps=$steps --set batch_size=8 --set log_interval=5 --set eval_batches=1
       --set eval_interval=0 --set threads=1 --set bucket_mb=0.05)
# Each rank says where it runs, then becomes the container's command.
where=(sh -c 'echo "rank $DT_RANK of $DT_WORLD_SIZE on host $(uname -n)"; exec "$@"' sh)
pids=()
start_pod() {
    local k=$1
    pod_env "$k"
    timeout -k 3 90 ip netns exec "dt$k" unshare --uts sh -c 'hostname "$0"; exec "$@"' "dtrain-$k" \
        env -i "${pod[@]}" "$PWD/$entry" "${where[@]}" "${args[@]}" "${train[@]}" >"$WORK/pod.$k" 2>&1 &
    pids[k]=$!
}
start_pod 1
for _ in $(seq 100); do grep -q "waiting for dtrain-0.dtrain to resolve" "$WORK/pod.1" && break; sleep 0.1; done
expect_grep "$WORK/pod.1" "^entrypoint.sh: waiting for dtrain-0.dtrain to resolve"
printf '10.77.0.1\tdtrain-0.dtrain\n' >>/etc/netns/dt1/hosts
start_pod 0
rc=0
for k in 0 1; do wait "${pids[$k]}" || { echo "pod $k exited with status $?"; rc=1; }; done
for k in 0 1; do echo "--- pod $k:"; cat "$WORK/pod.$k"; done
[ $rc = 0 ] || fail "a pod failed"
for k in 0 1; do
    expect_grep "$WORK/pod.$k" "^entrypoint.sh: node $k of 2, 1 rank\(s\) per pod, master dtrain-0.dtrain:29500"
    expect_grep "$WORK/pod.$k" "^\[$k\] rank $k of 2 on host dtrain-$k$"
done
expect_grep "$WORK/pod.0" "batch 8 x 2 ranks"
expect_grep "$WORK/pod.0" "step $steps/$steps \| loss"

# The command line it gives dtrun (DTRUN: a stand-in that prints it), with
# the Job's name taken from the host name when DT_JOB_NAME is unset.
printf '#!/bin/sh\necho "dtrun $*"\n' >"$WORK/print-dtrun"
chmod +x "$WORK/print-dtrun"
pod_env 1
no_job=()
for e in "${pod[@]}"; do [[ $e == DT_JOB_NAME=* ]] || no_job+=("$e"); done
ip netns exec dt1 unshare --uts sh -c 'hostname dtrain-1; exec "$@"' sh \
    env -i "${no_job[@]}" DTRUN="$WORK/print-dtrun" "$entry" "${args[@]}" >"$WORK/cmdline" 2>&1 ||
    { cat "$WORK/cmdline"; fail "the entry script with DTRUN=print-dtrun"; }
expect_grep "$WORK/cmdline" "^dtrun --nnodes 2 --node-rank 1 --master dtrain-0.dtrain:29500 --token-file $WORK/secret/token --join-timeout 600 -n 1 ${args[*]}\$"
grep "^dtrun" "$WORK/cmdline"
refused job-name-from-host "^entrypoint.sh: DT_JOB_NAME is not set and the host name '$(uname -n)' is not JOB-1" "${no_job[@]}"
# A Service name that never resolves: exit 1 after DT_JOIN_TIMEOUT, saying what to check.
t0=$(now)
ip netns exec dt1 env -i "${pod[@]}" DT_SERVICE=no-such-service DT_JOIN_TIMEOUT=2 "$entry" "${args[@]}" >"$WORK/unresolved" 2>&1
rc=$?
[ $rc = 1 ] || { cat "$WORK/unresolved"; fail "an unresolved master: expected exit 1, got $rc"; }
less_than "$(elapsed "$t0")" 10 || fail "an unresolved master took $(elapsed "$t0") s with DT_JOIN_TIMEOUT=2"
expect_grep "$WORK/unresolved" "^entrypoint.sh: dtrain-0.no-such-service did not resolve within DT_JOIN_TIMEOUT=2 s"
tail -n 1 "$WORK/unresolved"
echo ok
