#!/usr/bin/env bash
# `make` and `make install` need only the build packages: on a machine that
# has them but lacks a test package (PyTorch, made to look uninstalled by a
# fake dpkg-query), they succeed without calling apt (a fake apt-get on PATH
# fails loudly), while `scripts/setup.sh --test` (what `make test` and
# `make demo` run) does try to install the missing package.
. "$(dirname "$0")/lib.sh"
BUILD=$(dirname "$BIN")
FAKE=$WORK/fakebin
mkdir -p "$FAKE"
real_dpkg_query=$(command -v dpkg-query) || { echo "no dpkg-query here (not Debian)"; exit 77; }
cat >"$FAKE/apt-get" <<EOT
#!/bin/sh
echo "apt-get \$*" >>"$WORK/apt.log"
[ "\$1" = update ] && exit 0
echo "FAKE apt-get: this step must not call apt (apt-get \$*)" >&2
exit 99
EOT
cat >"$FAKE/sudo" <<'EOT'
#!/bin/sh
exec "$@"
EOT
# python3-torch "not installed"; every other package as the real dpkg-query says.
cat >"$FAKE/dpkg-query" <<EOT
#!/bin/sh
for a in "\$@"; do [ "\$a" = python3-torch ] && { echo "dpkg-query: no packages found matching python3-torch" >&2; exit 1; }; done
exec "$real_dpkg_query" "\$@"
EOT
chmod +x "$FAKE"/*
export PATH=$FAKE:$PATH

scripts/setup.sh --build >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "setup.sh --build failed with the build packages present"; }
[ ! -e "$WORK/apt.log" ] || fail "setup.sh --build called apt: $(cat "$WORK/apt.log")"

if grep -q "^CMAKE_BUILD_TYPE:STRING=Release" "$BUILD/CMakeCache.txt"; then
    # The build is up to date: make reconfigures and finds nothing to compile.
    make build BUILD="$BUILD" JOBS=2 >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "make build failed (it must not need python3-torch)"; }
    [ ! -e "$WORK/apt.log" ] || fail "make build called apt: $(cat "$WORK/apt.log")"
    make install BUILD="$BUILD" PREFIX="$WORK/prefix" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "make install failed"; }
    [ ! -e "$WORK/apt.log" ] || fail "make install called apt: $(cat "$WORK/apt.log")"
    [ -x "$WORK/prefix/bin/dtrun" ] || fail "make install did not install dtrun"
else
    echo "(not a Release build: make build would reconfigure $BUILD; checked setup.sh --build only)"
fi

# --check never installs, and names what is missing.
scripts/setup.sh --test --check >"$WORK/out" 2>&1 && fail "setup.sh --test --check did not notice python3-torch missing"
expect_grep "$WORK/out" "missing for --test: python3-torch"
[ ! -e "$WORK/apt.log" ] || fail "setup.sh --check called apt"

# make test / make demo: the test packages are installed when missing.
scripts/setup.sh --test >"$WORK/out" 2>&1 && fail "setup.sh --test succeeded although apt-get fails"
expect_grep "$WORK/apt.log" "install .*python3-torch"
expect_grep "$WORK/out" "installing python3-torch"
echo ok
