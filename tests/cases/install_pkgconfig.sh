#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then build the example against it
# with pkg-config (shared and static) and run it under the installed dtrun.
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
cc -std=c11 -Wall -Werror $flags examples/collectives_demo.c -o "$WORK/demo_static" $(pkg-config --cflags dtrain) \
    "$WORK/prefix/lib/libdtrain.a" $(pkg-config --static --libs-only-l dtrain | sed "s/-ldtrain//") || fail "cannot link the static library"
"$WORK/prefix/bin/dtrun" -n 2 "$WORK/demo" >"$WORK/out" || fail "shared build failed to run"
expect_grep "$WORK/out" "^\[1\] rank 1/2 allgather of r\*r = \[0, 1\]"
"$WORK/prefix/bin/dtrun" -n 2 "$WORK/demo_static" >"$WORK/out" || fail "static build failed to run"
expect_grep "$WORK/out" "^\[0\] rank 0/2 allreduce\(sum\)"
echo ok
