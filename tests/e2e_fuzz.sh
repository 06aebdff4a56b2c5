#!/bin/sh
# The fuzz targets (tests/fuzz, built by `make fuzz` with clang, libFuzzer,
# ASan and UBSan), bounded for CI: FUZZ_RUNS executions each (default
# 100000, in at most FUZZ_SECONDS, default 12; docs/benchmarks.md has the long runs
# and their command) from the seed corpora in tests/fuzz/corpus, then every input the
# run kept is replayed with LeakSanitizer on. Any crash, sanitizer report,
# timeout or leak fails. SKIP_FUZZ=1 skips.
[ -n "$SKIP_FUZZ" ] && { echo "PASS fuzzing skipped (SKIP_FUZZ set)"; exit 0; }
command -v clang > /dev/null || { echo "FAIL fuzzing: clang is not installed (tools/install-deps)"; exit 0; }
RUNS=${FUZZ_RUNS:-100000}
SECS=${FUZZ_SECONDS:-12}   # and at most this long each, whatever the machine
T=$(mktemp -d)
trap 'rm -rf "$T" /tmp/ss_fuzz_saves' EXIT
export TMPDIR=$T   # the reader target's data file (fuzz_tmp): this run's own
mkdir -p /tmp/ss_fuzz_saves   # where the seeds' save requests write
if ! make -s -j"$(nproc)" fuzz > $T/build.log 2>&1; then
    echo "FAIL fuzz: build failed"; tail -20 $T/build.log; exit 0
fi
export G_SLICE=always-malloc UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# one_target FILE: its bounded run, then its kept inputs replayed
one_target() {
    f=$1
    t=$(basename $f)
    mkdir -p $T/$t
    ASAN_OPTIONS=detect_leaks=0 timeout -k 10 900 $f $T/$t tests/fuzz/corpus/$t -runs=$RUNS -max_total_time=$SECS -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix=$T/ > $T/$t.log 2>&1
    rc=$?
    done_line=$(grep '^Done' $T/$t.log)
    if [ $rc = 0 ] && [ -n "$done_line" ]; then
        echo "PASS fuzz $t: $done_line"
    else
        echo "FAIL fuzz $t (rc $rc)"; grep -E 'ERROR|SUMMARY|#[0-9]+ ' $T/$t.log | head -20
        return
    fi
    # every kept input again, with LeakSanitizer and whole stacks (its
    # suppressions name Thrift's per-connection leak by our caller)
    ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp" \
        timeout -k 10 900 $f -runs=0 $T/$t tests/fuzz/corpus/$t > $T/$t-leaks.log 2>&1
    rc=$?
    n=$(ls $T/$t | wc -l)
    if [ $rc = 0 ]; then
        echo "PASS fuzz $t: no leak over the $n inputs it kept"
    else
        echo "FAIL fuzz $t: leak or error replaying its inputs"; grep -E 'ERROR|SUMMARY|leak of|#[0-9]+ ' $T/$t-leaks.log | head -20
    fi
}
# two targets at a time (each runs on one core), their lines in order
set -- build-fuzz/fuzz/fuzz_*
while [ $# -gt 0 ]; do
    one_target $1 > $T/$(basename $1).out 2>&1 &
    [ $# -gt 1 ] && { one_target $2 > $T/$(basename $2).out 2>&1 & }
    wait
    cat $T/$(basename $1).out; [ $# -gt 1 ] && cat $T/$(basename $2).out
    shift; [ $# -gt 0 ] && shift
done

