#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then build the example against it
# with pkg-config (shared and static) and with CMake's find_package(dtrain)
# (dtrain::dtrain and dtrain::dtrain_static), and run each under the
# installed dtrun.
. "$(dirname "$0")/lib.sh"
BUILD=$(dirname "$BIN")
cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" || { cat "$WORK/install.log"; fail "install failed"; }
export PKG_CONFIG_PATH=$WORK/prefix/lib/pkgconfig
pkg-config --exists dtrain || fail "pkg-config cannot find dtrain"
flags=""
grep -q "DT_SANITIZE:BOOL=ON" "$BUILD/CMakeCache.txt" && flags="-fsanitize=address,undefined"
grep -q "DT_TSAN:BOOL=ON" "$BUILD/CMakeCache.txt" && flags="-fsanitize=thread"
cc -std=c11 -Wall -Werror $flags examples/collectives_demo.c -o "$WORK/demo" $(pkg-config --cflags --libs dtrain) \
    -Wl,-rpath,"$WORK/prefix/lib" || fail "cannot build against the installed library"
cc -std=c11 -Wall -Werror $flags examples/collectives_demo.c -o "$WORK/demo_static" \
    $(pkg-config --cflags --libs dtrain-static) || fail "cannot link the static library (pkg-config dtrain-static)"
# static: no libdtrain.so needed (the README's line, which -ldtrain broke)
! ldd "$WORK/demo_static" | grep -q libdtrain || fail "the dtrain-static link still needs libdtrain.so"
"$WORK/prefix/bin/dtrun" -n 2 "$WORK/demo" >"$WORK/out" || fail "shared build failed to run"
expect_grep "$WORK/out" "^\[1\] rank 1/2 allgather of r\*r = \[0, 1\]"
"$WORK/prefix/bin/dtrun" -n 2 "$WORK/demo_static" >"$WORK/out" || fail "static build failed to run"
expect_grep "$WORK/out" "^\[0\] rank 0/2 allreduce\(sum\)"

# The installed dtrain finds the installed CUDA module (lib/dtrain/) for device=cuda.
if grep -q "^DT_CUDA_BUILT:INTERNAL=ON" "$BUILD/CMakeCache.txt"; then
    ls "$WORK"/prefix/lib*/dtrain/libdtrain_cuda.so >/dev/null 2>&1 || fail "the CUDA module was not installed"
    "$WORK/prefix/bin/dtrain" train --config configs/gpt-mini.json --set layers=1 --set dim=32 --set heads=2 \
        --set context=16 --set steps=1 --set eval_interval=0 --set device=cuda >"$WORK/cuda" 2>&1
    expect_no_grep "$WORK/cuda" "the CUDA backend: "
fi

# Every public header is installed, version.h (generated) among them.
for h in include/dtrain/*.h; do
    [ -f "$WORK/prefix/include/dtrain/$(basename "$h")" ] || fail "$h not installed"
done
[ -f "$WORK/prefix/include/dtrain/version.h" ] || fail "dtrain/version.h not installed"

# CMake: find_package(dtrain 0.1) against the prefix.
mkdir -p "$WORK/consumer"
cat >"$WORK/consumer/CMakeLists.txt" <<EOT
cmake_minimum_required(VERSION 3.18)
project(dtrain_consumer C)
find_package(dtrain 0.1 REQUIRED)
add_executable(demo_cmake $PWD/examples/collectives_demo.c)
target_link_libraries(demo_cmake PRIVATE dtrain::dtrain)
add_executable(demo_cmake_static $PWD/examples/collectives_demo.c)
target_link_libraries(demo_cmake_static PRIVATE dtrain::dtrain_static)
file(WRITE \${CMAKE_BINARY_DIR}/found-version "\${dtrain_VERSION}")
EOT
cmake -S "$WORK/consumer" -B "$WORK/consumer/build" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$WORK/cmake.log" 2>&1 ||
    { cat "$WORK/cmake.log"; fail "find_package(dtrain) failed against the installed prefix"; }
cmake --build "$WORK/consumer/build" >>"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log"; fail "cannot build the CMake consumer"; }
[ "$(cat "$WORK/consumer/build/found-version")" = "$(pkg-config --modversion dtrain)" ] ||
    fail "find_package found version $(cat "$WORK/consumer/build/found-version"), pkg-config says $(pkg-config --modversion dtrain)"
"$WORK/prefix/bin/dtrun" -n 2 "$WORK/consumer/build/demo_cmake" >"$WORK/out" || fail "the CMake consumer (shared) failed to run"
expect_grep "$WORK/out" "^\[1\] rank 1/2 allgather of r\*r = \[0, 1\]"
"$WORK/prefix/bin/dtrun" -n 2 "$WORK/consumer/build/demo_cmake_static" >"$WORK/out" || fail "the CMake consumer (static) failed to run"
expect_grep "$WORK/out" "^\[0\] rank 0/2 allreduce\(sum\)"
# A version from another minor series is refused (0.x: SameMinorVersion).
sed -i 's/find_package(dtrain 0.1 REQUIRED)/find_package(dtrain 0.99 REQUIRED)/' "$WORK/consumer/CMakeLists.txt"
cmake -S "$WORK/consumer" -B "$WORK/consumer/build2" -DCMAKE_PREFIX_PATH="$WORK/prefix" >"$WORK/cmake2.log" 2>&1 &&
    fail "find_package(dtrain 0.99) accepted version $(pkg-config --modversion dtrain)"
echo ok
