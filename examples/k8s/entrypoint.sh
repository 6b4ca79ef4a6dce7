#!/bin/sh
# entrypoint.sh: the container command of examples/k8s/dtrain-job.yaml.
# It turns the environment Kubernetes gives one pod of an Indexed Job into a
# dtrun command line, and runs it in its place:
#
#   entrypoint.sh [--] COMMAND [ARGS...]
#   exec dtrun --nnodes $DT_NNODES --node-rank $JOB_COMPLETION_INDEX \
#        --master $DT_JOB_NAME-0.$DT_SERVICE:$DT_MASTER_PORT \
#        --token-file $DT_TOKEN_FILE --join-timeout $DT_JOIN_TIMEOUT \
#        -n $DT_NPROC COMMAND [ARGS...]
#
# Environment (docs/launching.md, "Kubernetes"):
#   JOB_COMPLETION_INDEX  the pod's index 0..DT_NNODES-1, set by Kubernetes
#                         for a Job with completionMode: Indexed (required)
#   DT_NNODES             pods in the job: the Job's completions (required)
#   DT_SERVICE            the headless Service, the pods' subdomain (required)
#   DT_JOB_NAME           the Job's name (default: the host name without its
#                         "-INDEX" suffix: an Indexed Job's pod is JOB-INDEX)
#   DT_MASTER_PORT        the rendezvous store's port on pod 0 (default 29500)
#   DT_TOKEN_FILE         the job token, the mounted Secret (default
#                         /etc/dtrain/token)
#   DT_NPROC              ranks per pod (default 1)
#   DT_JOIN_TIMEOUT       seconds dtrun waits for every pod (default 600:
#                         pods are scheduled and pull their image at
#                         different times)
#   DTRUN                 the dtrun program (default: dtrun on PATH)
# Pod 0 serves the store at its own DNS name JOB-0.SERVICE; every pod waits
# (up to DT_JOIN_TIMEOUT) until that name resolves, since a headless
# Service's records appear only once its pods exist.
# Exit status: 2 for a bad environment or command line (the message names the
# variable), 1 when pod 0's name never resolved, else dtrun's.
set -eu

me=entrypoint.sh
die() { echo "$me: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -eu/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }

case ${1:-} in
    -h|--help) usage; exit 0 ;;
    --) shift ;;
esac
[ $# -gt 0 ] || die "no command to run: give the program and its arguments (the container's args), e.g. dtrain train --config configs/mlp.json"

# whole NAME VALUE MIN MAX: sets v to VALUE without leading zeros (the
# shell's arithmetic would read 010 as octal) when VALUE is a whole number in
# MIN..MAX; else exits 2 naming NAME.
whole() {
    case $2 in
        '') die "$1 is empty: expected a whole number in $3..$4" ;;
        *[!0-9]*) die "$1='$2' is not a whole number (expected $3..$4)" ;;
    esac
    v=$2
    while [ ${#v} -gt 1 ] && [ "${v#0}" != "$v" ]; do v=${v#0}; done
    # at most 9 digits: no overflow in the comparisons
    if [ ${#v} -gt 9 ] || [ "$v" -lt "$3" ] || [ "$v" -gt "$4" ]; then
        die "$1=$2 is out of range: expected $3..$4"
    fi
}

[ -n "${JOB_COMPLETION_INDEX+set}" ] ||
    die "JOB_COMPLETION_INDEX is not set: run this as a pod of a Job with completionMode: Indexed (Kubernetes sets it to the pod's index)"
[ -n "${DT_NNODES+set}" ] || die "DT_NNODES is not set: give the number of pods (the Job's completions) in the pod's env"
whole DT_NNODES "$DT_NNODES" 1 4096
nnodes=$v
whole JOB_COMPLETION_INDEX "$JOB_COMPLETION_INDEX" 0 $((nnodes - 1))
index=$v

service=${DT_SERVICE:-}
[ -n "$service" ] || die "DT_SERVICE is not set: give the headless Service's name (the pods' subdomain) in the pod's env"
if [ -n "${DT_JOB_NAME:-}" ]; then
    job=$DT_JOB_NAME
else
    host=$(uname -n)
    job=${host%-"$index"}
    if [ "$job" = "$host" ] || [ -z "$job" ]; then
        die "DT_JOB_NAME is not set and the host name '$host' is not JOB-$index (an Indexed Job's pod is named so): set DT_JOB_NAME to the Job's name"
    fi
fi
for part in "$job" "$service"; do
    case $part in
        *[!a-z0-9.-]* | -* | *-) die "'$part' is not a DNS name (DT_JOB_NAME and DT_SERVICE: lower-case letters, digits, '-' and '.')" ;;
    esac
done
port=${DT_MASTER_PORT:-29500}
whole DT_MASTER_PORT "$port" 1 65535
port=$v
whole DT_NPROC "${DT_NPROC:-1}" 1 1024
nproc=$v
whole DT_JOIN_TIMEOUT "${DT_JOIN_TIMEOUT:-600}" 1 86400
join=$v

token=${DT_TOKEN_FILE:-/etc/dtrain/token}
[ -f "$token" ] || die "DT_TOKEN_FILE: no token file at $token: mount the job's Secret there (dtrain-job.yaml's volume 'token')"
[ -r "$token" ] || die "DT_TOKEN_FILE: cannot read $token (the Secret's file mode or the container's user)"
first=$(head -n 1 "$token")
[ -n "$first" ] || die "DT_TOKEN_FILE: the first line of $token is empty: the Secret holds no token"
[ "$first" != replace-with-a-random-token ] ||
    die "DT_TOKEN_FILE: $token is still the example's placeholder token: put a random one in the Secret (docs/launching.md, \"Kubernetes\")"

dtrun=${DTRUN:-dtrun}
command -v "$dtrun" >/dev/null 2>&1 || die "DTRUN: '$dtrun' not found (PATH=$PATH): install dtrain in the image or set DTRUN"

master=$job-0.$service
# The headless Service publishes JOB-0.SERVICE once pod 0 exists; pod 0
# itself listens on the address it resolves to.
if command -v getent >/dev/null 2>&1; then
    waited=0
    until getent hosts "$master" >/dev/null 2>&1; do
        [ $waited -lt "$join" ] || { echo "$me: $master did not resolve within DT_JOIN_TIMEOUT=$join s: is pod 0 running, and is DT_SERVICE ($service) the pods' subdomain?" >&2; exit 1; }
        [ $waited = 0 ] && echo "$me: waiting for $master to resolve (pod 0's name in the headless Service)" >&2
        sleep 1
        waited=$((waited + 1))
    done
fi

echo "$me: node $index of $nnodes, $nproc rank(s) per pod, master $master:$port, token from $token" >&2
exec "$dtrun" --nnodes "$nnodes" --node-rank "$index" --master "$master:$port" --token-file "$token" \
    --join-timeout "$join" -n "$nproc" "$@"
