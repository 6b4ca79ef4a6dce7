# Thin wrapper around CMake.  Quick start: `make demo`, `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup setup-build build demo test asan asan-test tsan-test install clean

all: build

# Packages, by purpose (scripts/setup.sh --help).  `make` and `make install`
# need only the build packages and call apt only when one is missing; `make
# test` and `make demo` also install the data sets, PyTorch and the test tools.
setup-build:
	@scripts/setup.sh --build

setup: setup-build
	@scripts/setup.sh --test

build: setup-build
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

# 2 local ranks train a small GPT (configs/demo.json) data-parallel on the
# fortunes text (about two minutes on 2 cores), then print a sample generated
# from the checkpoint.
demo: build setup
	scripts/demo.sh $(BUILD)

test: build setup
	tests/run_tests.sh $(BUILD)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: setup-build
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) -- --no-print-directory

asan-test: asan setup
	DT_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		tests/run_tests.sh $(ASAN_BUILD)

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

# ThreadSanitizer over the threaded parts (the store server inside dtrun and rank 0,
# the progress threads, the kernels' thread pool: one case of each; the
# sanitizer-free and ASan suites run the rest).
TSAN_BUILD ?= build-tsan
tsan-test: setup
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDT_TSAN=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) -- --no-print-directory
	DT_TEST_QUICK=1 DT_TEST_FILTER='unit/|transport/|dtrun/two-nodes|launch/|fault/rendezvous|fault/heartbeat|fault/collective-mismatch-and-stall|collectives/world3$$|collectives/concurrent|engine/gemm-bf16/emulated|ddp/equivalence|parallel/zero-stages|parallel/pipeline-schedules|parallel/ps-sync|observability/' TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
		tests/run_tests.sh $(TSAN_BUILD)
