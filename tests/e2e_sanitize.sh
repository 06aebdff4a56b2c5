#!/bin/sh
# Sanitizer builds on a short job (STYLE.md "Tests"): ASan+UBSan and TSan
# builds of everything, their unit tests, and a 2 trainers x 2 workers run
# with MA in the shadow thread and EASGD in foreground mode, and one taking
# checkpoints every 20 ms (the workers' pause under foreground MA), one
# scoring data.eval meanwhile (output.eval_every, with hot rows), and the
# device trainer (trainer.device = cuda) on the CPU simulation of the device
# library (src/gpu/sim.c) with Adagrad and MA in the shadow thread: its
# parity test and a 2x2 run; DES (embedding.placement = trainers) with
# checkpoints; under ASan, tests/e2e_inspect.sh and tests/e2e_data.sh (a
# run that leaks, even on an error path, exits 23 and fails its checks). Any sanitizer
# report fails. SKIP_SANITIZE=1
# skips (for quick local runs).
[ -n "$SKIP_SANITIZE" ] && { echo "PASS sanitizers skipped (SKIP_SANITIZE set)"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export G_SLICE=always-malloc
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp"
export TSAN_OPTIONS="suppressions=$(pwd)/tests/tsan.supp halt_on_error=1"
# one_kind KIND: KIND's build, its unit tests and runs, in $T/KIND
one_kind() {
    kind=$1; K=$T/$kind; mkdir -p $K
    B=build-$kind
    rm -rf $K/ck $K/ckh $K/ckc $K/ckd $K/ckg # a run on an earlier run's checkpoints is refused
    if ! make -s -j"$(nproc)" $kind > $K/$kind-build.log 2>&1; then
        echo "FAIL $kind: build failed"; tail -20 $K/$kind-build.log; return
    fi
    for t in $B/tests/test_*; do
        if $t > $K/out.log 2>&1; then
            echo "PASS $kind: $(basename $t)"
        else
            echo "FAIL $kind: $(basename $t)"; grep -v '^PASS' $K/out.log | head -30
        fi
    done
    $B/shadowsync gen --out $K/d --examples 6000 --eval-examples 1000 --config configs/tiny.ini > /dev/null 2>&1
    for run in "sync.algo=ma sync.mode=shadow" "sync.algo=easgd sync.mode=foreground" \
               "sync.algo=ma sync.mode=foreground checkpoint.dir=$K/ck checkpoint.interval_s=0.02" \
               "sync.algo=allreduce sync.mode=shadow" \
               "sync.algo=bmuf sync.mode=shadow hot_embeddings.memory_mb=0.05 checkpoint.dir=$K/ckh checkpoint.interval_s=0.02 output.eval_every=1000" \
               "sync.algo=ma sync.mode=shadow embedding_cache.rows=3000 checkpoint.dir=$K/ckc checkpoint.interval_s=0.02 data.epochs=2 optim.warmup_examples=3000" \
               "sync.algo=ma sync.mode=shadow embedding.placement=trainers checkpoint.dir=$K/ckd checkpoint.interval_s=0.02 optim.decay_examples=6000"; do
        sets=""; for s in $run; do sets="$sets --set $s"; done
        if timeout -k 10 300 $B/shadowsync train configs/tiny.ini --set data.train=$K/d/train.tsv \
               --set data.eval=$K/d/eval.tsv --set output.dir=$K/run --set output.quiet=true \
               --set job.trainers=2 --set trainer.worker_threads=2 $sets > $K/run.log 2>&1 \
           && ! grep -qE 'Sanitizer|runtime error' $K/run.log; then
            echo "PASS $kind: 2x2 train with $run"
        else
            echo "FAIL $kind: 2x2 train with $run"; head -40 $K/run.log
        fi
    done
    for script in tests/e2e_inspect.sh tests/e2e_data.sh; do
        [ $kind = asan ] || continue
        if BIN=$B/shadowsync sh $script > $K/out.log 2>&1 && grep -q '^PASS' $K/out.log \
           && ! grep -q '^FAIL' $K/out.log; then
            echo "PASS $kind: $script"
        else
            echo "FAIL $kind: $script"; grep -v '^PASS' $K/out.log | head -30
        fi
    done
    SIM=$(pwd)/$B/libshadowsync_gpusim.so
    if SS_GPU_LIB=$SIM $B/tests/test_gpu > $K/out.log 2>&1 && grep -q '^PASS CPU simulation' $K/out.log; then
        echo "PASS $kind: test_gpu on the CPU simulation of the device library"
    else
        echo "FAIL $kind: test_gpu on the CPU simulation of the device library"; grep -v '^PASS' $K/out.log | head -30
    fi
    if SS_GPU_LIB=$SIM timeout -k 10 300 $B/shadowsync train configs/tiny.ini --set data.train=$K/d/train.tsv \
           --set data.eval=$K/d/eval.tsv --set output.dir=$K/run --set output.quiet=true \
           --set job.trainers=2 --set trainer.worker_threads=2 --set trainer.device=cuda \
           --set optim.dense=adagrad --set sync.algo=ma --set hot_embeddings.memory_mb=0.05 \
           --set checkpoint.dir=$K/ckg --set checkpoint.interval_s=0.02 --set output.eval_every=1000 > $K/run.log 2>&1 \
       && ! grep -qE 'Sanitizer|runtime error' $K/run.log; then
        echo "PASS $kind: 2x2 train on the device (CPU simulation), Adagrad, MA in the shadow thread, hot rows, checkpoints, mid-run evals"
    else
        echo "FAIL $kind: 2x2 train on the device (CPU simulation), Adagrad, MA in the shadow thread, hot rows, checkpoints, mid-run evals"; head -40 $K/run.log
    fi
}
# the two kinds side by side (their runs have no time bounds: only a sanitizer's report fails)
one_kind asan > $T/asan.out 2>&1 &
one_kind tsan > $T/tsan.out 2>&1 &
wait
cat $T/asan.out $T/tsan.out
exit 0
