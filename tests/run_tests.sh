#!/usr/bin/env bash
# The dtrain test suite.  Every test runs under a timeout (a hang is a
# failure); tests that need root or network namespaces skip with a reason.
#
#   tests/run_tests.sh [BUILD_DIR]        (default: build)
#   DT_TEST_QUICK=1   smaller sizes (used for the sanitizer build)
#   DT_TEST_FILTER=re only tests whose name matches the regular expression
#
# Ends with the line "N passed, N failed, N skipped"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$BUILD/bin
QUICK=${DT_TEST_QUICK:-0}
FILTER=${DT_TEST_FILTER:-.}
LOGS=$(mktemp -d /tmp/dtrain-tests.XXXXXX)
passed=0 failed=0 skipped=0
failed_names=()

[ -x "$BIN/dtrun" ] || { echo "run_tests: $BIN/dtrun not found; build first (make test)"; exit 2; }

note() { printf '%-58s %s\n' "$1" "$2"; }

# run NAME SECONDS CMD...: pass when CMD exits 0 within SECONDS; exit 77 is a
# skip, its last line of output the reason.
ran_netns=0 # set when a netns/ test ran (it leaves namespaces to take down)
run() {
    local name=$1 limit=$2; shift 2
    [[ "$name" =~ $FILTER ]] || return 0
    [[ "$name" == netns/* ]] && ran_netns=1
    local log="$LOGS/${name//[^A-Za-z0-9_.-]/_}.log" start=$SECONDS
    timeout -k 5 "$limit" "$@" >"$log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); note "$name" "ok ($((SECONDS - start)) s)"
    elif [ $rc -eq 77 ]; then
        skipped=$((skipped + 1)); note "$name" "skipped: $(tail -n 1 "$log")"
    else
        failed=$((failed + 1)); failed_names+=("$name")
        [ $rc -eq 124 ] && note "$name" "FAILED: timed out after $limit s" || note "$name" "FAILED (exit $rc)"
        tail -n 25 "$log" | sed 's/^/    | /'
    fi
}

skip() {
    [[ "$1" =~ $FILTER ]] || return 0
    skipped=$((skipped + 1)); note "$1" "skipped: $2"
}

# python3 through a version manager's shim (pyenv here) takes 1 to 2 s to
# start on a loaded 2-core machine, against 0.1 s for the interpreter, and the
# cases start it often (helpers, parsers): they get the interpreter the shim
# picks, by its own path (torch's tests name /usr/bin/python3 themselves).
py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
if [ -n "$py" ] && [ -x "$py" ] && [ "$(command -v python3)" != "$py" ]; then
    mkdir -p "$LOGS/.python" && ln -s "$py" "$LOGS/.python/python3" && export PATH="$LOGS/.python:$PATH"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export -f free_port
export BIN LOGS QUICK

BIG=524288; [ "$QUICK" = 1 ] && BIG=65536

# ---- unit tests ----
run unit/base 60 "$BIN/test_base"
run gpu/kernels-vs-cpu 300 tests/cases/gpu_kernels.sh
run gpu/trajectory-vs-cpu 600 tests/gpu/trajectory.sh "$BIN"
run unit/algorithm-choice 30 "$BIN/test_algo"
run unit/transport 120 "$BIN/test_transport"
run unit/network-faults 120 "$BIN/test_netfaults"
run transport/shared-memory 200 tests/cases/shm_transport.sh
run transport/tcp-congestion-control 60 tests/cases/tcp_congestion.sh
run collectives/bbr-limit-agreed 120 tests/cases/tcp_bbr_agree.sh
run unit/engine 300 "$BIN/test_engine"
run unit/grad-ready-subscribers 120 "$BIN/dtrun" -n 2 "$BIN/test_grad_ready"
# The bf16 GEMM on each kernel and path (a kernel this CPU or build lacks is a
# skip naming why; onednn runs wherever the build has oneDNN).
for kernel in emulated avx512_bf16 amx onednn native auto; do
    run engine/gemm-bf16/$kernel 120 env DT_BF16_GEMM=$kernel "$BIN/test_gemm_bf16"
done
run engine/gemm-bf16/unknown-kernel-refused 120 env DT_BF16_GEMM=tpu "$BIN/test_gemm_bf16"
run unit/conv 120 "$BIN/test_conv"
run unit/runtime 120 "$BIN/test_runtime"
run unit/prefetch-device 60 "$BIN/test_prefetch_device"
run unit/layout 30 "$BIN/test_layout"
run unit/run-from-layout 300 "$BIN/dtrun" -n 4 "$BIN/test_run"
run unit/plan 60 "$BIN/test_plan" bench/plan/hardware/a100-dgx.json
run unit/tp-group 60 "$BIN/test_tp_group"
run unit/launch-env 30 "$BIN/test_launch"
run unit/checkpoint 60 "$BIN/test_ckpt"
run unit/textclf-sparse-rows-adagrad-fortunes 60 "$BIN/test_textclf"
run engine/pytorch-crosscheck 300 tests/cases/torch_crosscheck.sh
run engine/optimizer-groups-vs-pytorch 120 tests/cases/optim_groups.sh
run engine/textclf-vs-pytorch 120 tests/cases/textclf_torch.sh
run engine/dtrain-textclf 120 tests/cases/dtrain_textclf.sh
run engine/dtrain-cli 300 tests/cases/dtrain_cli.sh
run plan/choice-valid-and-predicted 300 tests/cases/plan.sh
run plan/auto-under-memory-cap 300 tests/cases/plan_cgroup.sh
run engine/dtrain-recompute-bitwise 200 tests/cases/dtrain_recompute.sh
run engine/memory-accounting 200 tests/cases/memory_accounting.sh
run engine/dtrain-bf16-convergence 300 tests/cases/dtrain_bf16.sh
run engine/device-emu-equals-cpu 300 tests/cases/device_emu.sh
run engine/kernel-profile-emu 120 tests/cases/kernel_profile.sh
run engine/device-strategies-emu-equals-cpu 240 tests/cases/device_strategies.sh
run engine/dtrain-messages-threads 200 tests/cases/dtrain_messages.sh
run engine/dtrain-blas-reexec 120 tests/cases/blas_reexec.sh
run engine/dtrain-unused-keys 200 tests/cases/dtrain_unused_keys.sh
run fault/checkpoint-manifest-checked 200 tests/cases/checkpoint_manifest.sh
run engine/torch-converter 200 tests/cases/torch_convert.sh
run ddp/equivalence-accumulation-resume 600 tests/cases/ddp_equivalence.sh
run ddp/rank-dies-mid-training 60 tests/cases/ddp_rank_dies.sh
run ddp/compressors-unit 120 "$BIN/test_compress"
run ddp/compressors-unit-2-ranks 120 "$BIN/dtrun" -n 2 "$BIN/test_compress"
run ddp/compressors-resume-convergence 600 tests/cases/ddp_compression.sh
run fault/checkpoint-keep-corrupt-full-readonly 180 tests/cases/checkpoint_faults.sh
run ddp/example-fashion-mnist 180 sh -c "\"$BIN/dtrun\" -n 2 \"$BIN/ddp_fashion_mnist\" 1 | tee /dev/stderr | grep -qE 'epoch 1: .* test accuracy (8[0-9]|9[0-9])\\.'"
run zero/example-fashion-mnist 180 sh -c "\"$BIN/dtrun\" -n 2 \"$BIN/zero_fashion_mnist\" 3 1 | tee /dev/stderr | grep -qE 'epoch 1: .* test accuracy (8[0-9]|9[0-9])\\.'"
run ddp/demo-script 300 scripts/demo.sh "$BUILD" 12
run observability/timeline-ddp 300 tests/cases/obs_timeline.sh
run observability/straggler-named 240 tests/cases/obs_straggler.sh
run observability/stall-names-ranks 120 tests/cases/obs_stall.sh
run observability/metrics-endpoint 300 tests/cases/obs_monitor.sh
run observability/monitor-refuses-remote 100 tests/cases/obs_monitor_remote.sh
run observability/dashboard-browser 300 tests/cases/obs_dashboard.sh
run observability/report 120 tests/cases/obs_report.sh
run observability/timeline-view 120 tests/cases/obs_timeline_view.sh
run observability/timeline-overlap 120 tests/cases/obs_timeline_overlap.sh

# ---- every collective on localhost, world sizes 1..8 ----
for n in 1 2 3 4 7 8; do
    args=(--big $BIG)
    { [ "$QUICK" = 1 ] || [ $n -ge 7 ]; } && args+=(--quick)
    run "collectives/world$n" 400 "$BIN/dtrun" -n $n "$BIN/coll_check" "${args[@]}"
done
# Larger worlds (up to the 64 ranks the API promises), smaller buffers: 64 processes share 2 cores.
run "collectives/world16" 300 "$BIN/dtrun" -n 16 "$BIN/coll_check" --quick --big 4096
run "collectives/world64" 400 "$BIN/dtrun" -n 64 "$BIN/coll_check" --quick --big 64
# shm with DT_TRANSPORT=tcp: no arena to be had, so the automatic choice.
for algo in ring rd rhd direct shm; do
    for tr in tcp shm; do
        for n in 3 4; do
            run "collectives/world$n-DT_ALGO=$algo-DT_TRANSPORT=$tr" 300 env DT_ALGO=$algo DT_TRANSPORT=$tr \
                "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big 65536
        done
    done
done
run "collectives/direct-allreduce-threshold" 200 tests/cases/direct_allreduce.sh
run "collectives/bits-independent-of-start-up-timing" 300 tests/cases/coll_bits_timing.sh
# Halving-doubling with two folded pairs (6 = 4 + 2).
run "collectives/world6-DT_ALGO=rhd" 300 env DT_ALGO=rhd "$BIN/dtrun" -n 6 "$BIN/coll_check" --quick --big 65536
# Both transports forced, and mixed: rank 1 refuses shared memory, so its
# pairs use TCP while the other ranks' pairs use shared memory.
for tr in tcp shm; do
    run "collectives/world4-DT_TRANSPORT=$tr" 300 env DT_TRANSPORT=$tr "$BIN/dtrun" -n 4 "$BIN/coll_check" --quick --big 65536
done
run "collectives/world4-mixed-shm-tcp" 300 "$BIN/dtrun" -n 4 sh -c '[ "$DT_RANK" = 1 ] && export DT_TRANSPORT=tcp; exec "$0" "$@"' "$BIN/coll_check" --quick --big 65536
run "collectives/shm-arena" 300 tests/cases/shm_arena.sh
# The message algorithms over the pair rings (the arena off), as auto picks them.
run "collectives/world4-DT_SHM_COLL=off" 300 env DT_SHM_COLL=off "$BIN/dtrun" -n 4 "$BIN/coll_check" --quick --big 65536
run "collectives/shm-ring-only-small-ring" 300 env DT_SHM_COLL=off DT_SHM_COPY_MIN=0 DT_SHM_RING=4096 "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 65536
# process_vm_readv between sibling ranks: root, or no Yama ptrace restriction.
if [ "$(id -u)" = 0 ] || [ "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)" = 0 ]; then
    run "collectives/shm-copy-from-sender" 300 tests/cases/shm_copy_from_sender.sh
else skip collectives/shm-copy-from-sender "process_vm_readv between ranks needs root or kernel.yama.ptrace_scope=0"; fi
run "collectives/tiny-segments" 200 env DT_SHM_COLL=off DT_RING_SEGMENT=1024 DT_SMALL_MSG=0 "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 20000
run "collectives/concurrent-communicators" 300 tests/cases/comm_concurrency.sh
# Every buffer in (emu) device memory, staged through the host: the host run's bits.
run "collectives/device-buffers-emu" 200 tests/cases/coll_device.sh
# Point-to-point messages of device buffers in chunks of 92 and 100 bytes:
# every way of receiving one (comm/p2p_chunk.h).
for ch in 92 100; do
    run "p2p/device-chunks-$ch" 60 env DT_STAGE_CHUNK=$ch "$BIN/dtrun" -n 2 "$BIN/p2p_chunks"
done
# A communicator for device buffers beside the job's (emu; NCCL's on a GPU).
run "collectives/device-companion-emu" 200 tests/cases/device_comm.sh
# The MPI backend under mpirun (skipped with the reason where OpenMPI or this
# build's MPI backend is absent; make test installs it: scripts/setup.sh).
for n in 2 3 4; do
    run "backend/mpi-conformance-world$n" 300 tests/cases/mpi_backend.sh conformance $n
done
run "backend/mpi-ddp" 300 tests/cases/mpi_backend.sh ddp
# The NCCL backend: refused without it, a clean failure without a GPU, every
# collective at world size 1 with one (skipped with the reason elsewhere).
run "backend/nccl" 120 tests/cases/nccl_backend.sh
run "build/cuda-module-on-demand" 120 tests/cases/cuda_module.sh
run "parallel/mesh" 200 tests/cases/mesh.sh
run "parallel/tensor-parallel-linear" 200 tests/cases/tp_linear.sh
run "parallel/dtrain-tensor-parallel" 300 tests/cases/dtrain_tp.sh
run "parallel/dtrain-tp-copies" 400 tests/cases/dtrain_tp_copies.sh
run "parallel/pipeline-schedules" 300 tests/cases/pp_schedules.sh
run "parallel/dtrain-pipeline" 400 tests/cases/dtrain_pp.sh
run "parallel/zero-stages" 300 tests/cases/zero_stages.sh
run "parallel/dtrain-zero" 300 tests/cases/dtrain_zero.sh
run "parallel/zero3-peak-rss" 300 tests/cases/zero3_peak_rss.sh
run "parallel/zero-mesh" 300 tests/cases/zero_mesh.sh
run "parallel/ps-sync" 300 tests/cases/ps_sync.sh
run "parallel/dtrain-ps" 400 tests/cases/dtrain_ps.sh

# ---- launcher ----
run dtrun/prefix-and-success 30 tests/cases/dtrun_prefix.sh
run dtrun/failed-rank-named 30 tests/cases/dtrun_failure.sh
run dtrun/first-error-is-the-reason 180 tests/cases/first_error_shown.sh
run dtrun/signal-forwarded 90 tests/cases/dtrun_signal.sh
run dtrun/bad-arguments 30 tests/cases/dtrun_args.sh
run dtrun/join-timeout 30 tests/cases/dtrun_join_timeout.sh
run dtrun/two-nodes-localhost 200 tests/cases/dtrun_two_nodes.sh
run dtrun/rank-table 200 tests/cases/dtrun_rank_table.sh
run dtrun/max-restarts 60 tests/cases/dtrun_restarts.sh
run dtrun/restart-names-dead-rank 90 tests/cases/dtrun_dead_rank_named.sh
run dtrun/store-silence-stops-node 120 tests/cases/dtrun_store_silence.sh
if [ "$(nproc)" -ge 2 ]; then run dtrun/bind-ranks-to-cpus 30 tests/cases/dtrun_bind.sh
else skip dtrun/bind-ranks-to-cpus "needs 2 CPUs (this machine has $(nproc))"; fi
run launch/slurm-and-openmpi-env 200 tests/cases/launch_env.sh
run install/pkg-config 120 tests/cases/install_pkgconfig.sh

# ---- faults ----
run fault/kill-9-during-allreduce 90 tests/cases/fault_kill.sh
run fault/memory-snapshots 300 tests/cases/memory_snapshots.sh
run fault/rendezvous-garbage-and-wrong-token 120 tests/cases/fault_rendezvous.sh
run fault/timeout-not-hang 60 tests/cases/fault_timeout.sh
run fault/heartbeat-frozen-vs-busy 60 tests/cases/fault_heartbeat.sh
run fault/heartbeat-silence-measured 180 tests/cases/heartbeat_pause.sh
run fault/init-first-error-reported 30 tests/cases/init_first_error.sh
run fault/collective-mismatch-and-stall 60 tests/cases/coll_debug.sh
run fault/collective-mismatch-always-on 900 tests/cases/coll_mismatch.sh
run fault/collective-mismatch-roots 600 tests/cases/coll_roots.sh
run fault/abort-reaches-every-rank 60 tests/cases/fault_abort.sh

# ---- multi-host over network namespaces ----
netns_reason=""
if [ "$(id -u)" != 0 ]; then
    netns_reason="needs root for network namespaces"
elif ! ip netns add dtprobe$$ 2>/dev/null; then
    netns_reason="cannot create network namespaces here"
else
    ip netns del dtprobe$$
fi
if [ -n "$netns_reason" ]; then
    skip netns/collectives-4-hosts "$netns_reason"
    skip netns/dtbench-4-hosts "$netns_reason"
    skip netns/link-down "$netns_reason"
    skip netns/hierarchical-3x2 "$netns_reason"
    skip netns/chaos-restarts-bit-equal "$netns_reason"
    skip netns/elastic-leave-and-rejoin "$netns_reason"
    skip netns/slurm-cluster-4-nodes "$netns_reason"
    skip netns/mpirun-2-hosts "$netns_reason"
    skip netns/k8s-indexed-job-2-pods "$netns_reason"
else
    run netns/collectives-4-hosts 500 tests/cases/netns_collectives.sh
    run netns/dtbench-4-hosts 300 tests/cases/netns_dtbench.sh
    run netns/link-down 120 tests/cases/netns_linkdown.sh
    run netns/hierarchical-3x2 500 tests/cases/netns_hier.sh
    run netns/chaos-restarts-bit-equal 600 tests/cases/chaos.sh
    run netns/elastic-leave-and-rejoin 400 tests/cases/elastic.sh
    # a real Slurm cluster (its own namespaces dts*, scripts/slurm-cluster.sh)
    run netns/slurm-cluster-4-nodes 600 tests/cases/slurm_cluster.sh
    run netns/mpirun-2-hosts 200 tests/cases/mpirun_hosts.sh
    run netns/k8s-indexed-job-2-pods 200 tests/cases/k8s_entrypoint.sh
    # only when a netns test ran: the names dt0..dt3 may be another run's (a benchmark's)
    [ "$ran_netns" = 1 ] && scripts/netns-cluster.sh down
fi

# ---- set-up, install and tools (issue 29's papercuts) ----
run setup/build-deps-without-apt 300 tests/cases/setup_build_deps.sh
run tools/version-and-dtbench-nccl-tests-layout 200 tests/cases/dtbench_format.sh
run docs/public-headers-and-links 30 tests/cases/docs_headers.sh

echo
[ $failed -gt 0 ] && echo "failed: ${failed_names[*]} (logs in $LOGS)"
[ $failed -eq 0 ] && rm -rf "$LOGS"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
