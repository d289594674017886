#!/usr/bin/env bash
# The project's test command (README and CI):
#
#   bash scripts/test.sh
#
# 1. scripts/bootstrap.sh: packages, venv, reference binaries, release build;
# 2. scripts/corpus.sh: the real-code IR corpus (cached; ~10 min the first
#    time) for the conformance test, every project of scripts/corpus.lock
#    (one test: a project missing is a failure under CI, a skip otherwise),
#    and tests/corpus_lock.sh: the lock's fallbacks and refusals (one test);
# 3. cargo test --workspace --release --no-fail-fast (unit, integration,
#    conformance);
# 4. llvm-tests/run.sh --release: the plugin's lit suite;
# 5. pytest over crates/python/tests (the programl_rs Python package);
# 6. scripts/demo.sh: the README's first command, checked (one test);
# 7. scripts/quickstart.sh: README.md's quick start, every command (one test);
# 8. scripts/errors.py on examples/hello.c, checked (one test);
# 9. scripts/train-poj104.sh's settings checks: bad ones refused with a
#    message naming them, nothing written (one test);
# 10. scripts/wheel.sh: the self-contained wheel, installed into a fresh
#    venv and checked from outside the checkout by scripts/wheel-check.py
#    (one test);
# then one closing line `summary: N passed, N failed, N skipped` over all
# suites. Exits non-zero if any suite failed. Logs: $PROGRAML_CACHE/test-logs/.
#
# Skips. A test whose tool or input is missing prints `SKIP: what: why`
# (programl_testkit::skip_unless_ci) and lit reports it Unsupported; both
# are counted as skipped, never as passed. With CI set (.ci/run exports
# CI=true) every tool the bootstrap installs is required: such a test fails
# instead, and a skip or an Unsupported lit test that still shows up counts
# as a failure. One kind of skip is accepted in CI too: an instruction-set
# test on a CPU without that instruction set prints
# `SKIP: cpu lacks FLAGS: test` (programl_kernels::cpu::run_test_on), and is
# counted as skipped (not passed: a test skipped whole is taken off cargo's
# passed count; `test [case]` is one case of a test whose other cases ran);
# its portable twin runs on every machine.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# shellcheck source=scripts/bootstrap.sh
source "$root/scripts/bootstrap.sh" </dev/null || { echo "summary: 0 passed, 1 failed, 0 skipped"; exit 1; }

logs="$PROGRAML_CACHE/test-logs"
mkdir -p "$logs"
start=$SECONDS
status=0
passed=0
failed=0
skipped=0
ci=0
case "${CI:-}" in "" | 0 | false | FALSE | False) ;; *) ci=1 ;; esac
step() { printf '\n[test] %s\n' "$*"; }
# skips LOG: the distinct `SKIP: ...` lines of LOG, printed; sets n_skips
# (the skips CI refuses: a missing tool or input) and n_cpu_skips
# (instruction-set tests on a CPU without the instructions: accepted).
skips() {
    grep -o 'SKIP: .*' "$1" | sort -u >"$1.all-skips"
    n_cpu_skips=$(grep -c '^SKIP: cpu lacks ' "$1.all-skips")
    n_cpu_whole=$(grep '^SKIP: cpu lacks ' "$1.all-skips" | grep -vc '\]$')
    n_skips=$(grep -v '^SKIP: cpu lacks ' "$1.all-skips" | tee "$1.skips" | wc -l)
    sed 's/^/[test]   /' "$1.all-skips" | head -n 30
    if [ "$n_cpu_skips" -gt 0 ]; then
        echo "[test]   $n_cpu_skips instruction-set test(s) skipped: this CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')) lacks their instructions"
    fi
    if [ "$n_skips" -gt 0 ] && [ "$ci" = 1 ]; then
        echo "[test]   CI=true: a skip for a missing tool or input is a failure"
    fi
}

step "corpus (scripts/corpus.sh): every project of scripts/corpus.lock, at its locked version"
# One checked step: passed when every project of the lock's set was built.
# A missing one (its source not to be had, nothing compiled) is named with
# its reason; corpus.sh exits 1 for it under CI=true, and it is a skip
# otherwise (the tests that need its files then say so).
bash "$root/scripts/corpus.sh" </dev/null >"$logs/corpus.log" 2>&1
corpus_rc=$?
grep -vE '^\[corpus\] [^:]+: (compiling|cached|configure|cmake|make -k|unpacking)' "$logs/corpus.log" | tail -n 40 | sed 's/^/[test]   /'
corpus_missing=$(grep -c '^\[corpus\] MISSING ' "$logs/corpus.log")

step "the corpus lock's fallbacks (tests/corpus_lock.sh)"
bash "$root/tests/corpus_lock.sh" </dev/null >"$logs/corpus-lock.log" 2>&1
corpus_lock_rc=$?
grep -E '^\[corpus-lock\] (ok|FAILED)|^SKIP' "$logs/corpus-lock.log" | sed 's/^/[test]   /'

step "cargo test --workspace --release --no-fail-fast"
export PROGRAML_CONFORMANCE_REPORT="$logs/conformance.txt"
rm -f "$PROGRAML_CONFORMANCE_REPORT"
cargo test --workspace --release --no-fail-fast </dev/null 2>&1 | tee "$logs/cargo-test.log"
cargo_rc=${PIPESTATUS[0]}
read -r p f < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
    END { print p + 0, f + 0 }' "$logs/cargo-test.log")
if [ "$cargo_rc" != 0 ] && [ "$f" = 0 ]; then
    f=1 # a build error or a crashed test binary: no "test result" line counted it
fi
skips "$logs/cargo-test.log"
s=$n_skips
if [ "$ci" = 1 ] && [ "$s" -gt 0 ]; then
    f=$((f + s)) s=0 cargo_rc=1
fi
s=$((s + n_cpu_skips)) p=$((p - n_cpu_whole))
passed=$((passed + p))
failed=$((failed + f))
skipped=$((skipped + s))
[ "$cargo_rc" = 0 ] || status=1
echo "[test] cargo: $p passed, $f failed, $s skipped (exit $cargo_rc)"
if [ -f "$PROGRAML_CONFORMANCE_REPORT" ]; then
    echo "[test] conformance with ProGraML 0.3.2 (details: $PROGRAML_CONFORMANCE_REPORT):"
    grep -E 'files match llvm2graph-10|FIXME|not explained' "$PROGRAML_CONFORMANCE_REPORT" | sed 's/^/[test]   /'
fi

step "lit (llvm-tests/run.sh --release)"
bash "$root/llvm-tests/run.sh" --release </dev/null 2>&1 | tee "$logs/lit.log"
lit_rc=${PIPESTATUS[0]}
# Unsupported (a REQUIRES: feature missing) is a skip, and a failure in CI.
read -r p f s < <(awk '
    /^ *(Passed|Expectedly Failed) *:/ { split($0, a, ":"); p += a[2] + 0 }
    /^ *Unsupported *:/ { split($0, a, ":"); s += a[2] + 0 }
    /^ *(Failed|Unexpectedly Passed|Unresolved|Timed Out) *:/ { split($0, a, ":"); f += a[2] + 0 }
    END { print p + 0, f + 0, s + 0 }' "$logs/lit.log")
grep -E '^UNSUPPORTED: ' "$logs/lit.log" | sed 's/^/[test]   /'
if [ "$ci" = 1 ] && [ "$s" -gt 0 ]; then
    echo "[test]   CI=true: an Unsupported lit test is a failure"
    f=$((f + s)) s=0 lit_rc=1
fi
if [ "$lit_rc" != 0 ] && [ "$f" = 0 ]; then
    f=1
fi
passed=$((passed + p))
failed=$((failed + f))
skipped=$((skipped + s))
[ "$lit_rc" = 0 ] || status=1
echo "[test] lit: $p passed, $f failed, $s skipped (exit $lit_rc)"

step "pytest (crates/python/tests: the programl_rs package)"
"$VIRTUAL_ENV/bin/python" -m pytest -q -p no:cacheprovider -p no:warnings "$root/crates/python/tests" </dev/null 2>&1 | tee "$logs/pytest.log"
py_rc=${PIPESTATUS[0]}
# pytest's last line: "N passed, N failed, N skipped in S s" (any order, some absent).
p=$(grep -oE '[0-9]+ passed' "$logs/pytest.log" | tail -n1 | grep -oE '[0-9]+' || true)
f=$(grep -oE '[0-9]+ (failed|error|errors)' "$logs/pytest.log" | awk '{ n += $1 } END { print n + 0 }')
s=$(grep -oE '[0-9]+ skipped' "$logs/pytest.log" | tail -n1 | grep -oE '[0-9]+' || true)
p=${p:-0} s=${s:-0}
if [ "$ci" = 1 ] && [ "$s" -gt 0 ]; then
    echo "[test]   CI=true: a skipped Python test is a failure"
    f=$((f + s)) s=0 py_rc=1
fi
if [ "$py_rc" != 0 ] && [ "$f" = 0 ]; then
    f=1
fi
passed=$((passed + p))
failed=$((failed + f))
skipped=$((skipped + s))
[ "$py_rc" = 0 ] || status=1
echo "[test] pytest: $p passed, $f failed, $s skipped (exit $py_rc)"

step "demo (scripts/demo.sh: the README's first command)"
# The graph pass and the learned pass on examples/hello.c: passes when the
# graph is written, the pass's verify line names its task, and the
# annotations read back hold roots.
PROGRAML_SKIP_BUILD=1 bash "$root/scripts/demo.sh" </dev/null >"$logs/demo.log" 2>&1
demo_rc=$?
grep -v '^\[bootstrap\]' "$logs/demo.log" | sed 's/^/[test]   /'
learned_pass_shown() {
    grep -q '"task":"reachability"' "$logs/demo.log" && grep -qE '^\[demo\] read back .*: [1-9][0-9]* roots' "$logs/demo.log"
}
# outcome NAME OK RC LOG: one checked step, passed when OK is 1.
outcome() {
    if [ "$2" = 1 ]; then
        passed=$((passed + 1))
        echo "[test] $1: passed"
    else
        failed=$((failed + 1))
        status=1
        echo "[test] $1: FAILED (exit $3; log: $4)"
    fi
}
if [ "$corpus_rc" = 0 ] && [ "$corpus_missing" -gt 0 ]; then
    grep '^\[corpus\] MISSING ' "$logs/corpus.log" | sed 's/^\[corpus\] MISSING /SKIP: corpus: /' | sed 's/^/[test]   /'
    skipped=$((skipped + 1))
    echo "[test] corpus: skipped ($corpus_missing project(s) missing; log: $logs/corpus.log)"
else
    ok=0
    [ "$corpus_rc" = 0 ] && ok=1
    outcome corpus "$ok" "$corpus_rc" "$logs/corpus.log"
fi
if [ "$corpus_lock_rc" = 3 ] && [ "$ci" = 0 ]; then
    # The mirror lists no source (offline): a skip, a failure under CI.
    grep '^SKIP: ' "$logs/corpus-lock.log" | sed 's/^/[test]   /'
    skipped=$((skipped + 1))
else
    ok=0
    [ "$corpus_lock_rc" = 0 ] && grep -q '^\[corpus-lock\] 1 passed, 0 failed' "$logs/corpus-lock.log" && ok=1
    outcome "corpus lock" "$ok" "$corpus_lock_rc" "$logs/corpus-lock.log"
fi
ok=0
if [ "$demo_rc" = 0 ] && grep -q '^\[demo\] graph: ' "$logs/demo.log" && learned_pass_shown; then
    ok=1
fi
outcome demo "$ok" "$demo_rc" "$logs/demo.log"

step "README quick start (scripts/quickstart.sh: every command of that section)"
bash "$root/scripts/quickstart.sh" </dev/null >"$logs/quickstart.log" 2>&1
qs_rc=$?
grep -E '^\[quickstart\]|F1|"task"' "$logs/quickstart.log" | sed 's/^/[test]   /'
ok=0
if [ "$qs_rc" = 0 ] && grep -q '^\[quickstart\] passed' "$logs/quickstart.log"; then
    ok=1
fi
outcome "quick start" "$ok" "$qs_rc" "$logs/quickstart.log"

step "scripts/errors.py (the models' error report) on examples/hello.c"
errors_dir="$(mktemp -d)"
clang-16 -O1 -S -emit-llvm "$root/examples/hello.c" -o "$errors_dir/hello.ll" &&
    "$VIRTUAL_ENV/bin/python" "$root/scripts/errors.py" reachability --dir "$errors_dir" --files 1 --structure >"$logs/errors.log" 2>&1
errors_rc=$?
sed 's/^/[test]   /' "$logs/errors.log" | head -n 6
rm -rf "$errors_dir"
ok=0
# --structure's groups by distance hold every positive once: their counts
# add up to tp + fn.
if [ "$errors_rc" = 0 ] && grep -qE '^reachability: 1 file of .*tp [1-9][0-9]*, fp [0-9]+, fn [0-9]+; precision' "$logs/errors.log" &&
    "$VIRTUAL_ENV/bin/python" - "$logs/errors.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
tp, fn = (int(x) for x in re.search(r"tp (\d+), fp \d+, fn (\d+)", text).groups())
hops = [int(x) for x in re.findall(r"hops from the root \(either direction\) .*positives +(\d+)", text)]
sys.exit(0 if hops and sum(hops) == tp + fn else f"hop groups hold {sum(hops)} positives, tp + fn = {tp + fn}")
PY
then
    ok=1
fi
outcome errors.py "$ok" "$errors_rc" "$logs/errors.log"

step "scripts/train-poj104.sh refuses bad settings before it installs, compiles or writes anything"
settings_log="$logs/train-settings.log"
: >"$settings_log"
ok=1
empty_cache="$(mktemp -d)"
# each case: the environment, the arguments, and what the message must name
while IFS='|' read -r envs args want; do
    # shellcheck disable=SC2086
    said="$(env PROGRAML_CACHE="$empty_cache" $envs bash "$root/scripts/train-poj104.sh" $args </dev/null 2>&1)"
    rc=$?
    echo "$said" >>"$settings_log"
    if [ "$rc" != 2 ] || [[ "$said" != *"$want"* ]]; then
        echo "case '$envs' '$args': exit $rc, message naming '$want' wanted" >>"$settings_log"
        ok=0
    fi
done <<'CASES'
HIDDEN=50||got '50'
EPOCHS=0||got '0'
EPOCHS=ten||got 'ten'
|45x|got '45x'
|0m|got '0m'
|45m extra|got '45m extra'
|2000000|got '2000000'
CASES
if [ -n "$(ls -A "$empty_cache")" ]; then
    echo "it wrote into PROGRAML_CACHE: $(ls -A "$empty_cache" | tr '\n' ' ')" >>"$settings_log"
    ok=0
fi
rm -rf "$empty_cache"
# Which record a run continues, and to which epoch count: the script
# (bootstrap left out) against a stand-in trainer that records its
# arguments, with the committed checkpoint and a run of this machine
# (its examples seen, its epoch target, whether a killed swap left its
# checkpoint aside). Each case: name|local examples|local epochs|aside|
# EPOCHS|the epoch count wanted|whether the local run is moved aside.
fake="$(mktemp -d)"
printf '#!/bin/sh\necho "$*" >>"$FAKE_LOG"\ncase "$*" in *--compile-only*) echo "{\\"programs\\": 1, \\"failed\\": 0, \\"failure_rate\\": 0}" ;; esac\n' >"$fake/train"
chmod +x "$fake/train"
committed="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_seen"])' "$root/models/poj104/checkpoint/state.json")"
# The committed record's own epoch target (E below): 10 for the first run,
# more once a session extends it (EPOCHS=14).
committed_epochs="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["settings"]["epochs"])' "$root/models/poj104/checkpoint/state.json")"
while IFS='|' read -r name seen target aside epochs want moved; do
    want="${want//E/$committed_epochs}"
    t="$fake/$name"
    mkdir -p "$t/scripts" "$t/models/poj104/checkpoint" "$t/cache/runs"
    sed '/source "$root\/scripts\/bootstrap.sh"/d' "$root/scripts/train-poj104.sh" >"$t/scripts/train-poj104.sh"
    cp "$root/models/poj104/checkpoint/state.json" "$t/models/poj104/checkpoint/"
    if [ -n "$seen" ]; then
        mkdir -p "$t/cache/runs/poj104-levels/checkpoint"
        python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); s["examples_seen"]=int(sys.argv[2]); s["settings"]["epochs"]=int(sys.argv[3]); json.dump(s, open(sys.argv[4], "w"))' \
            "$root/models/poj104/checkpoint/state.json" "$((${seen//C/$committed}))" "$target" "$t/cache/runs/poj104-levels/checkpoint/state.json"
        [ "$aside" = aside ] && mv "$t/cache/runs/poj104-levels/checkpoint" "$t/cache/runs/poj104-levels/.checkpoint.old"
    fi
    env -u EPOCHS -u HIDDEN ${epochs:+EPOCHS=$epochs} PROGRAML_CACHE="$t/cache" PROGRAML_TRAIN="$fake/train" FAKE_LOG="$t/args" \
        bash "$t/scripts/train-poj104.sh" 1m </dev/null >"$t/out" 2>&1
    got="$(tail -n 1 "$t/args" 2>/dev/null | grep -o -- '--epochs [0-9]*')"
    behind="$(ls "$t/cache/runs" | grep -c 'behind-' || true)"
    if [ "$got" != "--epochs $want" ] || [ "$behind" != "$moved" ]; then
        echo "continuation case $name: $got (--epochs $want wanted), $behind set aside ($moved wanted): $(cat "$t/out")" >>"$settings_log"
        ok=0
    fi
done <<'CASES'
fresh clone|||||E|0
the committed record is ahead|C-1000|9|||E|1
this machine's run is ahead, extended to 14|C+1000|14|||14|0
EPOCHS given|C+1000|14||12|12|0
a swap killed half-way|C+1000|13|aside||13|0
CASES
rm -rf "$fake"
sed 's/^/[test]   /' "$settings_log" | head -n 8
outcome "train-poj104.sh settings" "$ok" "$([ "$ok" = 1 ] && echo 0 || echo 1)" "$settings_log"

step "the self-contained wheel (scripts/wheel.sh): installed in a fresh venv, run from outside the checkout"
wheel_log="$logs/wheel.log"
wheel_tmp="$(mktemp -d)"
ok=0
wheel_rc=1
# The wheel's one dependency, networkx, is downloaded once into the
# cache's wheels/ and installed from there (no index): later runs work
# offline, as the rest of the suite does.
deps="$PROGRAML_CACHE/wheels"
if whl="$(bash "$root/scripts/wheel.sh" "$wheel_tmp/dist" 2>"$wheel_log")" && [ -f "$whl" ]; then
    echo "[test]   $(basename "$whl"): $(du -m "$whl" | cut -f1) MB" | tee -a "$wheel_log"
    { ls "$deps"/networkx-*.whl >/dev/null 2>&1 || "$VIRTUAL_ENV/bin/pip" download -q --only-binary=:all: -d "$deps" networkx </dev/null; } >>"$wheel_log" 2>&1 &&
        clang-16 -O1 -S -emit-llvm "$root/examples/hello.c" -o "$wheel_tmp/hello.ll" 2>>"$wheel_log" &&
        "$root/target/release/programl" graph "$wheel_tmp/hello.ll" >"$wheel_tmp/hello.pb" 2>>"$wheel_log" &&
        python3 -m venv "$wheel_tmp/venv" >>"$wheel_log" 2>&1 &&
        "$wheel_tmp/venv/bin/pip" install -q --no-index --find-links "$deps" "$whl" </dev/null >>"$wheel_log" 2>&1
    wheel_rc=$?
fi
if [ "$wheel_rc" = 0 ]; then
    check=("$wheel_tmp/venv/bin/python" "$root/scripts/wheel-check.py" "$wheel_tmp/hello.ll" "$wheel_tmp/hello.pb" "$root/models")
    # Where mount namespaces are allowed (root), also with the system's
    # libLLVM and LLVM directory hidden; elsewhere the check still requires
    # every mapped libLLVM to be the wheel's.
    hide='mount --bind /dev/null "$(readlink -f /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1)" && mount -t tmpfs none /usr/lib/llvm-16 && PROGRAML_WHEEL_HIDDEN=yes exec "$@"'
    if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
        (cd "$wheel_tmp" && unshare -m sh -c "$hide" sh "${check[@]}") </dev/null >>"$wheel_log" 2>&1
    else
        (cd "$wheel_tmp" && "${check[@]}") </dev/null >>"$wheel_log" 2>&1
    fi
    wheel_rc=$?
    grep '^\[wheel-check\]' "$wheel_log" | sed 's/^/[test]   /'
    [ "$wheel_rc" = 0 ] && grep -q '^\[wheel-check\] passed' "$wheel_log" && ok=1
fi
rm -rf "$wheel_tmp"
outcome wheel "$ok" "$wheel_rc" "$wheel_log"

echo "[test] finished in $((SECONDS - start)) s"
echo "summary: $passed passed, $failed failed, $skipped skipped"
exit "$status"
