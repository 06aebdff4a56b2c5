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
for kind in asan tsan; do
    B=build-$kind
    rm -rf $T/ck $T/ckh $T/ckc $T/ckd $T/ckg # a run on an earlier run's checkpoints is refused
    if ! make -s -j"$(nproc)" $kind > $T/$kind-build.log 2>&1; then
        echo "FAIL $kind: build failed"; tail -20 $T/$kind-build.log; continue
    fi
    for t in $B/tests/test_*; do
        if $t > $T/out.log 2>&1; then
            echo "PASS $kind: $(basename $t)"
        else
            echo "FAIL $kind: $(basename $t)"; grep -v '^PASS' $T/out.log | head -30
        fi
    done
    $B/shadowsync gen --out $T/d --examples 6000 --eval-examples 1000 --config configs/tiny.ini > /dev/null 2>&1
    for run in "sync.algo=ma sync.mode=shadow" "sync.algo=easgd sync.mode=foreground" \
               "sync.algo=ma sync.mode=foreground checkpoint.dir=$T/ck checkpoint.interval_s=0.02" \
               "sync.algo=allreduce sync.mode=shadow" \
               "sync.algo=bmuf sync.mode=shadow hot_embeddings.memory_mb=0.05 checkpoint.dir=$T/ckh checkpoint.interval_s=0.02 output.eval_every=1000" \
               "sync.algo=ma sync.mode=shadow embedding_cache.rows=3000 checkpoint.dir=$T/ckc checkpoint.interval_s=0.02 data.epochs=2 optim.warmup_examples=3000" \
               "sync.algo=ma sync.mode=shadow embedding.placement=trainers checkpoint.dir=$T/ckd checkpoint.interval_s=0.02 optim.decay_examples=6000"; do
        sets=""; for s in $run; do sets="$sets --set $s"; done
        if timeout -k 10 300 $B/shadowsync train configs/tiny.ini --set data.train=$T/d/train.tsv \
               --set data.eval=$T/d/eval.tsv --set output.dir=$T/run --set output.quiet=true \
               --set job.trainers=2 --set trainer.worker_threads=2 $sets > $T/run.log 2>&1 \
           && ! grep -qE 'Sanitizer|runtime error' $T/run.log; then
            echo "PASS $kind: 2x2 train with $run"
        else
            echo "FAIL $kind: 2x2 train with $run"; head -40 $T/run.log
        fi
    done
    for script in tests/e2e_inspect.sh tests/e2e_data.sh; do
        [ $kind = asan ] || continue
        if BIN=$B/shadowsync sh $script > $T/out.log 2>&1 && grep -q '^PASS' $T/out.log \
           && ! grep -q '^FAIL' $T/out.log; then
            echo "PASS $kind: $script"
        else
            echo "FAIL $kind: $script"; grep -v '^PASS' $T/out.log | head -30
        fi
    done
    SIM=$(pwd)/$B/libshadowsync_gpusim.so
    if SS_GPU_LIB=$SIM $B/tests/test_gpu > $T/out.log 2>&1 && grep -q '^PASS CPU simulation' $T/out.log; then
        echo "PASS $kind: test_gpu on the CPU simulation of the device library"
    else
        echo "FAIL $kind: test_gpu on the CPU simulation of the device library"; grep -v '^PASS' $T/out.log | head -30
    fi
    if SS_GPU_LIB=$SIM timeout -k 10 300 $B/shadowsync train configs/tiny.ini --set data.train=$T/d/train.tsv \
           --set data.eval=$T/d/eval.tsv --set output.dir=$T/run --set output.quiet=true \
           --set job.trainers=2 --set trainer.worker_threads=2 --set trainer.device=cuda \
           --set optim.dense=adagrad --set sync.algo=ma --set hot_embeddings.memory_mb=0.05 \
           --set checkpoint.dir=$T/ckg --set checkpoint.interval_s=0.02 --set output.eval_every=1000 > $T/run.log 2>&1 \
       && ! grep -qE 'Sanitizer|runtime error' $T/run.log; then
        echo "PASS $kind: 2x2 train on the device (CPU simulation), Adagrad, MA in the shadow thread, hot rows, checkpoints, mid-run evals"
    else
        echo "FAIL $kind: 2x2 train on the device (CPU simulation), Adagrad, MA in the shadow thread, hot rows, checkpoints, mid-run evals"; head -40 $T/run.log
    fi
done
exit 0
