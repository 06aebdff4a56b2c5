#!/bin/sh
# End-to-end runs of the binary, single process (the embedded default):
# gen -> train -> eval, every sync algorithm in both modes with 2 in-process
# trainers, exactly-once counting, reproducibility, binary shards, bad input.
# Prints PASS/FAIL lines for tests/run.
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
N=60000

. tests/lib.sh

TRAIN_SETS="--set output.quiet=true"

$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 3 --config $CFG > $T/gen.log 2>&1
check "gen writes the data and prints bayes_ne" grep -q '^bayes_ne=0\.[0-9]' $T/gen.log
BAYES=$(sed -n 's/^bayes_ne=//p' $T/gen.log)
check "gen writes the teacher probabilities" test "$(wc -l < $T/d/train.prob)" = $N
# the command line's mistakes: refused with status 2, naming them, nothing written
for bad in "--examples 0:--examples 0 writes no data" \
           "--examples 10 --set model.dim=3:--set changes a --config CONFIG" \
           "--examples 99999999999999999999:is not a non-negative integer below 2^63" \
           "--examples 10 --examples 20:--examples is given twice"; do
    $BIN gen --out $T/nogen ${bad%%:*} > $T/badgen.log 2>&1
    rc=$?
    check "gen ${bad%%:*}: refused ($rc), saying why" \
        sh -c "[ $rc = 2 ] && grep -q -- '${bad#*:}' $T/badgen.log && ! [ -e $T/nogen ]"
done

train one --set trainer.worker_threads=1
check "train (1 worker) exits 0" test $? = 0
M=$T/one/metrics.json
check "every training example counted once" test "$(json examples $M)" = $N
for k in examples seconds eps train_ne eval_ne eval_logloss eval_auc syncs avg_sync_gap \
         sync_algo sync_mode trainers worker_threads; do
    grep -q "\"$k\":" $M || fail "metrics.json has $k" "missing"
done
pass "metrics.json has the keys of DESIGN 7"
# the one worker's time split: every part measured, the dense half the largest, together
# no more than the run's seconds
SPLIT="$(json worker_read_s $M) $(json worker_lookup_s $M) $(json worker_dense_s $M) $(json worker_push_s $M) $(json seconds $M)"
check "metrics.json splits the worker's time: read lookup dense push of seconds = $SPLIT" \
    awk -v s="$SPLIT" 'BEGIN { n = split(s, v, " "); exit !(n == 5 && v[1] > 0 && v[2] > 0 && v[4] > 0 &&
        v[3] > v[1] && v[3] > v[2] && v[3] > v[4] && v[1] + v[2] + v[3] + v[4] <= v[5] * 1.01) }'
NE1=$(json eval_ne $M)
check "eval NE well below 1 (it learned): $NE1" lt "$NE1" 0.975
check "eval NE not below the Bayes NE $BAYES" lt "$BAYES" "$NE1"
check "eval AUC above 0.62" lt 0.62 "$(json eval_auc $M)"
check "metrics.json: the end-of-run eval's seconds ($(json eval_seconds $M)) and threads ($(json eval_threads $M), one per core here)" \
    sh -c "[ '$(json eval_threads $M)' = $(nproc | awk '{ print ($1 > 32 ? 32 : $1) }') ] && awk -v s='$(json eval_seconds $M)' 'BEGIN { exit !(s > 0 && s < 60) }'"
check "progress.csv written" test "$(wc -l < $T/one/progress.csv)" -ge 2
check "resolved config written" grep -q '^worker_threads *= *1' $T/one/config.ini
check "model saved" test -s $T/one/model/dense.bin -a -s $T/one/model/tables.bin

train two --set trainer.worker_threads=1
check "one worker thread is bit-identical across runs" cmp -s $T/one/model/dense.bin $T/two/model/dense.bin

$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one/model > $T/eval.log 2>&1
EV=$(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/eval.log)
check "eval of the saved model reproduces the run's eval NE ($EV vs $NE1)" \
    awk -v a="$EV" -v b="$NE1" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-4 && d > -1e-4) }'

# eval's figures come from every core's share of the data: one core gives the same figures
if command -v taskset > /dev/null && [ "$(nproc)" -gt 1 ]; then
    taskset -c 0 $BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one/model > $T/eval1.log 2>&1
    check "eval on 1 core and on $(nproc) threads: the same figures" \
        sh -c "[ -n \"\$(tail -1 $T/eval.log)\" ] && [ \"\$(tail -1 $T/eval1.log)\" = \"\$(tail -1 $T/eval.log)\" ]"
else
    echo "SKIP eval on 1 core against several: skipped: one core here (or no taskset)"
fi

# eval --predictions: a probability per input line, in order, that gives the reported logloss;
# unlabeled data (data.label_col = -1) scores the same; bad and blank lines keep their line
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one --predictions $T/pred.txt > $T/pred.log 2>&1
check "eval --predictions (--model the run directory) exits 0 naming its model/" \
    sh -c "[ $? = 0 ] && grep -q '^# model: $T/one/model' $T/pred.log"
check "one prediction per eval line" test "$(wc -l < $T/pred.txt)" = "$(wc -l < $T/d/eval.tsv)"
LL=$(paste $T/d/eval.tsv $T/pred.txt | awk -F'\t' '{ p = $NF; s += $1 == 1 ? -log(p) : -log(1 - p) } END { print s / NR }')
check "the predictions, beside the labels, give eval's logloss ($LL vs $(sed -n 's/.*"eval_logloss": \([0-9.]*\).*/\1/p' $T/pred.log))" \
    near "$LL" "$(sed -n 's/.*"eval_logloss": \([0-9.]*\).*/\1/p' $T/pred.log)" 1e-4
cut -f2- $T/d/eval.tsv > $T/nolabel.tsv
NOLABEL="--set data.eval=$T/nolabel.tsv --set data.label_col=-1 --set data.dense_cols=0-12 --set data.cat_cols=13-38"
$BIN eval $CFG $NOLABEL --model $T/one/model --predictions - > $T/pred2.txt 2> $T/pred2.log
check "unlabeled data (label_col = -1) scores to the same predictions on stdout, figures on stderr" \
    sh -c "cmp -s $T/pred.txt $T/pred2.txt && grep -q '\"eval_examples\": 5000}' $T/pred2.log"
$BIN eval $CFG $NOLABEL --model $T/one/model > $T/pred3.log 2>&1
check "unlabeled data without --predictions: status 1, saying what to do" \
    sh -c "[ $? = 1 ] && grep -q 'no labels): nothing to measure.*--predictions' $T/pred3.log"
$BIN train $CFG $NOLABEL --set data.train=$T/nolabel.tsv --set output.dir=$T/nolabel > $T/pred4.log 2>&1
check "training on data.label_col = -1 is refused, naming the key" \
    sh -c "[ $? = 1 ] && grep -q 'data.label_col = -1 .*training needs a label column' $T/pred4.log && [ ! -e $T/nolabel/metrics.json ]"
mkdir $T/holes
(head -3 $T/d/eval.tsv; echo "not an example"; echo; sed -n 4,5p $T/d/eval.tsv; echo "x	y") > $T/holes/a.tsv
sed -n 6,7p $T/d/eval.tsv > $T/holes/b.tsv
$BIN eval $CFG --set data.eval=$T/holes --model $T/one/model --predictions $T/pred5.txt > $T/pred5.log 2>&1
EXPECT=$(sed -n 1,3p $T/pred.txt; echo; echo; sed -n 4,5p $T/pred.txt; echo; sed -n 6,7p $T/pred.txt)
check "a bad or blank line gets an empty line, across files" test "$(cat $T/pred5.txt)" = "$EXPECT" -a "$(wc -l < $T/pred5.txt)" = 10
# binary shards of the eval data score to the same lines; a header line takes no line
$BIN convert $CFG --in $T/d/eval.tsv --out $T/evshards --shard-examples 1500 > /dev/null 2>&1
$BIN eval $CFG --set data.eval=$T/evshards --model $T/one/model --predictions $T/pred7.txt > /dev/null 2>&1
(echo "a header"; cat $T/d/eval.tsv) > $T/headed.tsv
$BIN eval $CFG --set data.eval=$T/headed.tsv --set data.header=1 --model $T/one/model --predictions $T/pred8.txt > /dev/null 2>&1
check "--predictions of binary shards, and of the text with a header line: the text's lines" \
    sh -c "cmp -s $T/pred.txt $T/pred7.txt && cmp -s $T/pred.txt $T/pred8.txt"
# data.report_bad_lines counts over all the eval's threads together
(for i in $(seq 1 20); do echo "bad line $i"; sed -n ${i}p $T/d/eval.tsv; done) > $T/bad20.tsv
$BIN eval $CFG --set data.eval=$T/bad20.tsv --model $T/one/model > $T/bad20.log 2>&1
check "eval of data with 20 bad lines names data.report_bad_lines = 5 of them, on any thread count" \
    test "$(grep -c "^$T/bad20.tsv:[0-9]*: " $T/bad20.log)" = 5
# several threads keep their lines for the end, one writes as it goes: the same files
if command -v taskset > /dev/null && [ "$(nproc)" -gt 1 ]; then
    taskset -c 0 $BIN eval $CFG --set data.eval=$T/holes --model $T/one/model --predictions $T/pred5b.txt > /dev/null 2>&1
    taskset -c 0 $BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one/model --predictions $T/predb.txt > /dev/null 2>&1
    check "--predictions on 1 core (written as it goes) and on $(nproc) threads (kept, then written): the same files" \
        sh -c "cmp -s $T/pred5.txt $T/pred5b.txt && cmp -s $T/pred.txt $T/predb.txt"
else
    echo "SKIP --predictions on 1 core against several: skipped: one core here (or no taskset)"
fi
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one/model --predictions $T/no/such/dir/p.txt > $T/pred6.log 2>&1
check "an unwritable --predictions path: status 1 naming it" \
    sh -c "[ $? = 1 ] && grep -q 'predictions $T/no/such/dir/p.txt: cannot write' $T/pred6.log"
awk -F'\t' '$1 == 0' $T/d/eval.tsv | head -50 > $T/zeros.tsv
$BIN eval $CFG --set data.eval=$T/zeros.tsv --model $T/one/model > $T/zeros.log 2>&1
check "eval data of one class: the logloss, and JSON nulls for what is undefined" \
    sh -c "[ $? = 0 ] && grep -q '\"eval_ne\": null, \"eval_logloss\": 0\.[0-9]*, \"eval_auc\": null' $T/zeros.log"
train zeros --set data.eval=$T/zeros.tsv --set data.max_examples=2000
check "train with eval data of one class: eval.csv's undefined figures empty, the eval line's nan unsigned" \
    sh -c "grep -q '^2000,[0-9.]*,50,,0\.[0-9]*,,[0-9.]*\$' $T/zeros/eval.csv && grep -q '^eval: examples 50  ne nan .* auc nan' $T/zeros.log && ! grep -q -- '-nan' $T/zeros.log"
$BIN eval --help > $T/help.log 2>&1
check "a verb's --help prints the usage, status 0" sh -c "[ $? = 0 ] && grep -q '^usage: shadowsync' $T/help.log"

# every algorithm, both modes, 2 trainers x 2 workers in one process
for algo in none easgd ma bmuf allreduce; do
    for mode in shadow foreground; do
        [ $algo = none ] && [ $mode = foreground ] && continue
        train "$algo-$mode" --set job.trainers=2 --set trainer.worker_threads=2 \
            --set sync.algo=$algo --set sync.mode=$mode --set sync.gap=5
        rc=$?
        M=$T/$algo-$mode/metrics.json
        check "$algo/$mode: exits 0" test $rc = 0
        check "$algo/$mode: examples counted once over 2x2 workers" test "$(json examples $M)" = $N
        check "$algo/$mode: eval NE below 1 ($(json eval_ne $M))" lt "$(json eval_ne $M)" 0.99
        if [ $algo != none ]; then
            check "$algo/$mode: syncs happened" lt 0 "$(json syncs $M)"
        fi
    done
done
# Persia's hybrid: allreduce in the foreground after every step of 2 trainers x 1 worker is
# synchronous dense training (a round per step), and its final round leaves one model, bit for
# bit; without sync the replicas differ
train sync1 --set job.trainers=2 --set trainer.worker_threads=1 --set sync.algo=allreduce \
    --set sync.mode=foreground --set sync.gap=1
rc=$?
check "allreduce/foreground gap 1: exits 0, a sync round per step" sh -c \
    "[ $rc = 0 ] && [ $(json syncs $T/sync1/metrics.json) -ge $(json iterations $T/sync1/metrics.json) ]"
check "allreduce/foreground gap 1: the trainers' replicas are identical ($(json replica_spread $T/sync1/metrics.json))" \
    test "$(json replica_spread $T/sync1/metrics.json)" = 0
check "sync none: the replicas differ ($(json replica_spread $T/none-shadow/metrics.json))" \
    lt 0.01 "$(json replica_spread $T/none-shadow/metrics.json)"
G=$(json avg_sync_gap $T/ma-foreground/metrics.json)
check "foreground gap 5 gives an average sync gap near 5 ($G)" \
    awk -v g="$G" 'BEGIN { exit !(g >= 4 && g <= 6) }'
train avg --set job.trainers=2 --set sync.algo=ma --set sync.output=average --set output.quiet=false
check "sync.output = average trains (2 trainers: no note that ma changes nothing)" \
    sh -c "[ $? = 0 ] && grep -q '^# training: 2 trainer' $T/avg.log && ! grep -q '^# sync: ma with 1 trainer' $T/avg.log"
train ma1 --set job.trainers=1 --set sync.algo=ma --set data.max_examples=2000 --set output.quiet=false
check "sync.algo = ma with 1 trainer says that its rounds change nothing, naming job.trainers" \
    grep -q '^# sync: ma with 1 trainer averages it with itself.*job.trainers above 1' $T/ma1.log
train a1 --set job.trainers=2 --set sync.algo=easgd --set sync.alpha=1 --set data.max_examples=2000 --set output.quiet=false
train a0 --set job.trainers=2 --set sync.algo=bmuf --set sync.alpha=0 --set data.max_examples=2000 --set output.quiet=false
check "sync.alpha = 1 under easgd, and 0 under bmuf: the run says its rounds sync nothing; 0.5 says nothing" \
    sh -c "grep -q '^# sync: easgd with sync.alpha = 1: .*no trainer sees another' $T/a1.log && grep -q '^# sync: sync.alpha = 0 leaves every replica as it is, so the bmuf rounds' $T/a0.log && ! grep -q '^# sync: .*alpha' $T/avg.log"

train unused --set job.trainers=2 --set sync.algo=none --set sync.mode=foreground --set sync.gap=3 --set sync.alpha=0.9 --set sync.bmuf_lr=2 --set data.max_examples=2000 --set output.quiet=false
train gap7 --set job.trainers=2 --set sync.algo=ma --set sync.gap=7 --set data.max_examples=2000 --set output.quiet=false
check "sync keys this job's algorithm or mode does not use: a note names each; defaults say nothing" \
    sh -c "grep -q '^# sync: sync.mode = foreground with sync.algo = none: there is no round to wait for' $T/unused.log && grep -q '^# sync: sync.algo = none with 2 trainers: each trains a replica of its own' $T/unused.log && grep -q '^# sync: sync.alpha is not used by sync.algo = none' $T/unused.log && grep -q '^# sync: sync.bmuf_momentum, sync.bmuf_lr and sync.bmuf_nesterov apply to sync.algo = bmuf only (this job.s is none)' $T/unused.log && grep -q '^# sync: sync.gap = 7 applies to sync.mode = foreground' $T/gap7.log && ! grep -q '^# sync: sync\.' $T/avg.log"
# easgd's final round only pushes: with one trainer whose rounds are 2 s apart (the run is
# shorter), the saved model is the trained one, not pulled toward a center that lags it
# (before: eval NE 0.994 against sync.algo = none's 0.945)
train easleep --set trainer.worker_threads=1 --set sync.algo=easgd --set sync.shadow_sleep_ms=2000
check "easgd, rounds far apart: the output is the trained model (eval NE $(json eval_ne $T/easleep/metrics.json), none's $(json eval_ne $T/one/metrics.json))" \
    near "$(json eval_ne $T/easleep/metrics.json)" "$(json eval_ne $T/one/metrics.json)" 0.005

# data.epochs: two passes over the file train as one pass over two copies of it (1 worker: bit
# for bit), every example counted each pass
mkdir -p $T/twice && cp $T/d/train.tsv $T/twice/a.tsv && cp $T/d/train.tsv $T/twice/b.tsv
train ep2 --set trainer.worker_threads=1 --set data.epochs=2 --set output.quiet=false
train twice --set trainer.worker_threads=1 --set data.train=$T/twice
check "data.epochs = 2: $(json examples $T/ep2/metrics.json) examples, the model of one pass over two copies, done 100.0% at the end" \
    sh -c "[ '$(json examples $T/ep2/metrics.json)' = $((2 * N)) ] && [ '$(json epochs $T/ep2/metrics.json)' = 2 ] && cmp -s $T/ep2/model/dense.bin $T/twice/model/dense.bin && cmp -s $T/ep2/model/tables.bin $T/twice/model/tables.bin && grep '^\[ *[0-9.]*s\]' $T/ep2.log | tail -1 | grep -q '  done 100.0%\$'"

# a resume's bad-line share counts the job's lines so far on both sides: 0.6 % bad lines, one
# pass then a second resumed from the first's final checkpoint, warn of nothing (this run's
# examples against the job's bad lines made it 1.2 %)
mkdir -p $T/bad06 && awk 'NR % 160 == 7 { print "garbage" } { print }' $T/d/train.tsv > $T/bad06/train.tsv
train b06 --set data.train=$T/bad06/train.tsv --set checkpoint.dir=$T/b06ck
train b06 --set data.train=$T/bad06/train.tsv --set checkpoint.dir=$T/b06ck --set data.epochs=2 --resume
rc=$?
check "a resumed pass over data with 0.6 % bad lines: no warning of over 1 % ($(grep -o 'bad_lines [0-9]*' $T/b06.log))" \
    sh -c "[ $rc = 0 ] && grep -q 'bad_lines [1-9]' $T/b06.log && ! grep -q 'were not examples' $T/b06.log"

# the rates' schedule: decayed to 0 over the first example, only the first batch steps, so the
# model is one batch's (both rates: the dense vector and the rows; SGD, as Adagrad's sums go on)
SGD="--set optim.dense=sgd --set optim.emb=sgd"
train lr0 --set trainer.worker_threads=1 --set optim.decay_examples=1 --set optim.decay_to=0 \
    --set output.quiet=false $SGD
train lr1 --set trainer.worker_threads=1 --set data.max_examples=128 $SGD
check "optim.decay_examples = 1, decay_to = 0: the model equals one batch's, dense and rows" \
    sh -c "cmp -s $T/lr0/model/dense.bin $T/lr1/model/dense.bin && cmp -s $T/lr0/model/tables.bin $T/lr1/model/tables.bin"
# optim.schedule = auto (the default): a decay over the job's last tenth, fitted to data.train's
# lines as counted, the model of those keys given by hand (1 worker: bit for bit)
train auto --set trainer.worker_threads=1 --set output.quiet=false
train autok --set trainer.worker_threads=1 --set optim.schedule=manual \
    --set optim.decay_start=$((N - N / 10)) --set optim.decay_examples=$((N / 10)) --set optim.decay_to=0.05
check "optim.schedule = auto: fitted to data.train's $N examples and said, in config.ini, the model of the same keys set by hand, x$(json lr_scale $T/auto/metrics.json) at the end" \
    sh -c "grep -q '^# optim.schedule = auto: the job.s $N examples (data.train.s 1 file, counted): the rates decay over its last $((N / 10)) examples to x0.05 (optim.decay_start = $((N - N / 10)), ' $T/auto.log && grep -q '^decay_start = $((N - N / 10))\$' $T/auto/config.ini && [ '$(json lr_scale $T/auto/metrics.json)' = 0.05 ] && cmp -s $T/auto/model/dense.bin $T/autok/model/dense.bin && cmp -s $T/auto/model/tables.bin $T/autok/model/tables.bin"
# ...and a stream has no size: the rates stay as set, said why
mkfifo $T/fifo
cat $T/d/train.tsv > $T/fifo &
train stream --set trainer.worker_threads=1 --set data.train=$T/fifo --set output.quiet=false
check "optim.schedule = auto over a pipe: no decay, said why, x$(json lr_scale $T/stream/metrics.json) at the end" \
    sh -c "grep -q '^# optim.schedule = auto: the rates stay as set (no decay): $T/fifo is a stream' $T/stream.log && [ '$(json lr_scale $T/stream/metrics.json)' = 1 ] && [ '$(json examples $T/stream/metrics.json)' = $N ]"
train manual --set trainer.worker_threads=1 --set optim.schedule=manual --set output.quiet=false --set data.max_examples=2000
check "optim.schedule = manual with no decay key: the rates constant, said" \
    sh -c "grep -q '^# learning rates constant: optim.schedule = manual sets no warmup or decay' $T/manual.log && [ '$(json lr_scale $T/manual/metrics.json)' = 1 ]"
# a final calibration outside [0.9, 1.1] is said, with what usually fixes it: eval data of
# another click rate (its clicked lines twice)
{ cat $T/d/eval.tsv; awk -F'\t' '$1 == 1' $T/d/eval.tsv; } > $T/eval2.tsv
train calib --set trainer.worker_threads=1 --set data.eval=$T/eval2.tsv --set data.max_examples=20000
check "a calibration outside [0.9, 1.1] is said at the end with its likely cause ($(grep -o 'calibration [0-9.]*' $T/calib.log))" \
    sh -c "grep -q '^shadowsync: warning: the model.s calibration on data.eval is 0\.[0-8][0-9]* (it predicts [0-9]*% of the clicks there are: eval click rate .*: the eval data.s click rate is not the training.s' $T/calib.log && ! grep -q 'calibration on data.eval' $T/auto.log"
check "a schedule is said at start, its factor in the progress lines and metrics.json (lr_scale $(json lr_scale $T/lr0/metrics.json); 1 without: $(json lr_scale $T/stream/metrics.json))" \
    sh -c "[ '$(json lr_scale $T/lr0/metrics.json)' = 0 ] && [ '$(json lr_scale $T/stream/metrics.json)' = 1 ] && grep -q '^# learning rates x1 at 0 examples: down to x0 over 1 from 0; counted over the job.s examples' $T/lr0.log && grep -q '^\[ *[0-9.]*s\] examples $N .*  lr x0  done' $T/lr0.log"
train lrbad --set optim.decay_start=5000
check "optim.decay_start without optim.decay_examples stops before training, naming both" \
    sh -c "[ $? != 0 ] && grep -q 'optim.decay_start = 5000 starts a decay that optim.decay_examples = 0 leaves out' $T/lrbad.log && ! [ -e $T/lrbad/progress.csv ]"
train lrbad2 --set optim.decay_to=0.1
check "optim.decay_to without optim.decay_examples stops before training, naming both" \
    sh -c "[ $? != 0 ] && grep -q 'optim.decay_to = 0.1 is the end of a decay that optim.decay_examples = 0 leaves out' $T/lrbad2.log && ! [ -e $T/lrbad2/progress.csv ]"
train huge --set model.rows=1000000000000 --set output.save_model=false
check "tables past this machine's memory: refused before training, with the need and the room" \
    sh -c "[ $? = 1 ] && grep -q 'the embedding tables here need [0-9]* MB (model.rows x (model.dim 8 + its optimizer.s state, and a clock with a cache)), more than the [0-9]* MB of memory free here' $T/huge.log && ! [ -e $T/huge/progress.csv ]"
train thr --set job.trainers=1024 --set trainer.worker_threads=256
check "more threads than one process starts: refused before training, naming both keys" \
    sh -c "[ $? = 1 ] && grep -q 'job.trainers = 1024 x (trainer.worker_threads = 256 + a shadow thread) is 263168 threads' $T/thr.log && ! [ -e $T/thr/progress.csv ]"
train lrw --set trainer.worker_threads=1 --set optim.warmup_examples=30000 \
    --set optim.decay_start=40000 --set optim.decay_examples=20000 --set optim.decay_to=0.2
check "warmup and decay train to the end, learning (eval NE $(json eval_ne $T/lrw/metrics.json))" \
    sh -c "[ '$(json examples $T/lrw/metrics.json)' = $N ] && awk -v a='$(json eval_ne $T/lrw/metrics.json)' 'BEGIN { exit !(a > 0 && a < 0.99) }'"

# binary shards: convert, then the same run reads them with no parsing
$BIN convert $CFG --in $T/d/train.tsv --out $T/shards --shard-examples 14000 > $T/conv.log 2>&1
check "convert writes shards" test -f $T/shards/part-00004.bin
# convert's bad lines as training's: data.report_bad_lines named, the warning past 1 %
{ head -1000 $T/d/train.tsv; seq 1 3000; } > $T/mostlybad.tsv
$BIN convert $CFG --in $T/mostlybad.tsv --out $T/badshards --set data.report_bad_lines=0 > $T/badconv.log 2>&1
check "convert of 75 % bad lines: none named (report_bad_lines 0), the share warned of ($?)" \
    sh -c "grep -q 'warning: 3000 of the 4000 lines read from $T/mostlybad.tsv (75.0 %) were not examples and were skipped: check data.format' $T/badconv.log && ! grep -q 'mostlybad.tsv:[0-9]' $T/badconv.log"
train bin --set trainer.worker_threads=1 --set data.train=$T/shards
check "training on shards = training on text (1 worker, bit-identical)" \
    cmp -s $T/one/model/dense.bin $T/bin/model/dense.bin
# a conversion that reads no example (another format) into a new directory leaves none behind
$BIN convert $CFG --in $T/d/eval.prob --out $T/probshards > $T/probconv.log 2>&1
rc=$?
check "convert of no example into a new directory: status 1, the directory not left behind ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'convert: no example was read from $T/d/eval.prob' $T/probconv.log && ! [ -e $T/probshards ]"
# gzip: the same run on the gzipped text (training, eval with predictions, convert)
gzip -c $T/d/train.tsv > $T/train.tsv.gz
gzip -c $T/d/eval.tsv > $T/eval.tsv.gz
train gz --set trainer.worker_threads=1 --set data.train=$T/train.tsv.gz --set data.eval=$T/eval.tsv.gz
check "training on gzipped text = training on the text (1 worker, bit-identical)" \
    sh -c "cmp -s $T/one/model/dense.bin $T/gz/model/dense.bin && [ '$(json eval_ne $T/gz/metrics.json)' = '$(json eval_ne $T/one/metrics.json)' ]"
$BIN eval $CFG --set data.eval=$T/eval.tsv.gz --model $T/one/model --predictions $T/predgz.txt > /dev/null 2>&1
$BIN convert $CFG --in $T/train.tsv.gz --out $T/gzshards --shard-examples 14000 > /dev/null 2>&1
check "eval --predictions and convert read gzip: the text's lines, the text's shards" \
    sh -c "cmp -s $T/pred.txt $T/predgz.txt && cmp -s $T/shards/part-00002.bin $T/gzshards/part-00002.bin"
head -c 100000 $T/train.tsv.gz > $T/trunc.tsv.gz
train gztrunc --set data.train=$T/trunc.tsv.gz
check "a truncated gzip file ends the run with an error naming it" \
    sh -c "[ $? != 0 ] && grep -q '$T/trunc.tsv.gz: the gzip stream is truncated' $T/gztrunc.log"
# a plain file appended to a gzip file (zlib skips such bytes quietly): an error naming it,
# whether its bytes go past what zlib read or not (a short tail); two gzip streams are one text
head -n 3 $T/d/eval.tsv > $T/tail3.tsv
for k in big:$T/d/eval.tsv short:$T/tail3.tsv; do
    cat $T/eval.tsv.gz "${k#*:}" > $T/app-${k%%:*}.gz
    $BIN eval $CFG --model $T/one/model --set data.eval=$T/app-${k%%:*}.gz > $T/app-${k%%:*}.log 2>&1
    echo "rc=$?" >> $T/app-${k%%:*}.log
done
cat $T/eval.tsv.gz $T/eval.tsv.gz > $T/two.gz
$BIN eval $CFG --model $T/one/model --set data.eval=$T/two.gz > $T/two.log 2>&1
(cat $T/eval.tsv.gz; head -c 300000 /dev/zero) > $T/padded.gz
$BIN eval $CFG --model $T/one/model --set data.eval=$T/padded.gz > $T/padded.log 2>&1
check "a plain file appended to a gzip file is an error naming it (a long and a short one); two gzip streams read as one text; zero padding is skipped, as gzip does" \
    sh -c "grep -q '^rc=1' $T/app-big.log && grep -q '^rc=1' $T/app-short.log && grep -q '$T/app-short.gz: bytes that are not gzip follow its gzip stream' $T/app-short.log && grep -q '$T/app-big.gz: bytes that are not gzip' $T/app-big.log && grep -q '\"eval_examples\": '\$((2 * \$(wc -l < $T/d/eval.tsv)))', ' $T/two.log && grep -q '\"eval_examples\": '\$(wc -l < $T/d/eval.tsv)', ' $T/padded.log"
# files that cannot be read fail before any training, named with their key: an xz data.eval
# (it had trained all, then failed with no metrics.json), an xz file among data.train's (it
# had trained the files before it, then failed); an eval file whose damage lies past its
# first batch fails after the training, which keeps its model and metrics.json
xz -kc $T/d/eval.tsv > $T/ev.xz 2>/dev/null || gzip -c $T/d/eval.tsv | head -c 100 > $T/ev.xz
train evxz --set data.eval=$T/ev.xz
rc=$?
mkdir -p $T/trxz && head -n 5000 $T/d/train.tsv > $T/trxz/a.tsv && cp $T/ev.xz $T/trxz/b.xz
train trxz --set data.train=$T/trxz
rc2=$?
check "an unreadable data.eval, or such a file among data.train's, fails before training, naming the key and file" \
    sh -c "[ $rc = 1 ] && [ $rc2 = 1 ] && grep -q '^shadowsync: data.eval: $T/ev.xz: .*(checked before training)' $T/evxz.log && grep -q '^shadowsync: data.train: $T/trxz/b.xz: .*(checked before training)' $T/trxz.log && ! grep -q '^train:' $T/evxz.log $T/trxz.log"
gzip -c $T/d/eval.tsv | head -c 60000 > $T/evcut.gz
train evcut --set trainer.worker_threads=1 --set data.eval=$T/evcut.gz
rc=$?
check "an eval that fails after the training keeps its metrics.json (no eval) and model, saying where ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q '^shadowsync: data.eval: $T/evcut.gz: the gzip stream is truncated.*the training.s model and figures (metrics.json, no eval) are kept in $T/evcut' $T/evcut.log && [ '$(json examples $T/evcut/metrics.json)' = $N ] && [ -s $T/evcut/model/dense.bin ]"
# --predictions never lands among data.eval's files: the file itself (a link to it too), or
# into its directory or glob (its .part was read back as eval data)
cp $T/d/eval.tsv $T/ecopy.tsv && ln -s ecopy.tsv $T/elink.tsv && mkdir -p $T/edir && cp $T/d/eval.tsv $T/edir/a.tsv
for p in ecopy:$T/ecopy.tsv:$T/ecopy.tsv elink:$T/ecopy.tsv:$T/elink.tsv edir:$T/edir:$T/edir/pred.txt eglob:$T/edir/*.tsv:$T/edir/../edir/p.tsv; do
    n=${p%%:*}; rest=${p#*:}
    $BIN eval $CFG --model $T/one/model --set "data.eval=${rest%%:*}" --predictions "${rest#*:}" > $T/pw-$n.log 2>&1
    echo "rc=$?" >> $T/pw-$n.log
done
check "--predictions onto data.eval's file, a link to it, into its directory or its glob: refused, the data intact" \
    sh -c "grep -q '^rc=1' $T/pw-ecopy.log && grep -q 'is data.eval.s file' $T/pw-elink.log && grep -q 'would be written into data.eval' $T/pw-edir.log && grep -q 'matches data.eval' $T/pw-eglob.log && cmp -s $T/ecopy.tsv $T/d/eval.tsv && ! [ -e $T/edir/pred.txt ]"
# UTF-16 text is refused by its byte-order mark, naming iconv; a bad value's bytes that are not
# printable are quoted as \xNN (a NUL cut the quote short: 'bad hex token "ab"')
head -n 100 $T/d/train.tsv | iconv -t UTF-16 > $T/u16.tsv
train u16 --set data.train=$T/u16.tsv --set data.eval=
rc=$?
(head -n 300 $T/d/train.tsv; head -n 1 $T/d/train.tsv | awk -F'\t' -v OFS='\t' '{ $16 = "ab\0cd"; print }') > $T/nul.tsv
train nul --set data.train=$T/nul.tsv --set data.eval=
check "UTF-16 data: refused before training, naming iconv ($rc); a NUL in a field is quoted as \\x00" \
    sh -c "[ $rc = 1 ] && grep -q 'u16.tsv: UTF-16 text (its byte-order mark), which is not read: convert it to UTF-8 (iconv' $T/u16.log && grep -q 'nul.tsv:301: column 15: bad hex token \"ab.x00cd\"' $T/nul.log"
# the command line: --help-config only with train; --resume given twice; a value that is the
# next option; "--set checkpoint.dir = " (as in a file) stops a resumed run's checkpoints as
# "checkpoint.dir=" does; gen takes the config's job.seed; a dense model past the memory is
# refused, naming its widths (it aborted on its allocation)
$BIN eval $CFG --model $T/one/model --help-config > $T/cli1.log 2>&1; r1=$?
$BIN train $CFG --resume $T --resume $T > $T/cli2.log 2>&1; r2=$?
$BIN eval $CFG --model --predictions $T/p.txt > $T/cli3.log 2>&1; r3=$?
train ckspace0 --set trainer.worker_threads=1 --set checkpoint.dir=$T/ckspace --set data.max_examples=5000
train ckspace1 --set trainer.worker_threads=1 --set data.max_examples=10000 --resume $T/ckspace --set "checkpoint.dir = "
$BIN gen --out $T/seedA --examples 200 --config $CFG > /dev/null 2>&1
$BIN gen --out $T/seedB --examples 200 --config $CFG --set job.seed=5 > /dev/null 2>&1
$BIN gen --out $T/seedC --examples 200 --config $CFG --seed 5 > /dev/null 2>&1
train wide --set model.bottom=13-1000000000-8 --set data.eval= --set output.save_model=false
r4=$?
check "CLI: --help-config off train ($r1), --resume twice ($r2), an option for a value ($r3) refused; checkpoint.dir = (spaced) stops a resume's checkpoints; gen takes job.seed; a dense model past the memory refused ($r4)" \
    sh -c "[ $r1 = 2 ] && grep -q 'help-config goes with train' $T/cli1.log && [ $r2 = 2 ] && grep -q 'resume is given twice' $T/cli2.log && [ $r3 = 2 ] && grep -q 'missing value: --model' $T/cli3.log && [ \$(ls $T/ckspace | grep -c ckpt) = 1 ] && [ '$(json examples $T/ckspace1/metrics.json)' = 10000 ] && ! cmp -s $T/seedA/train.tsv $T/seedB/train.tsv && cmp -s $T/seedB/train.tsv $T/seedC/train.tsv && [ $r4 = 1 ] && grep -q 'the dense model here needs about [0-9]* MB (.*model.bottom = 13-1000000000-8' $T/wide.log"
# a dangling link in a data directory is an error (its data would be missed: an unmounted
# volume); a subdirectory is said not to be read
mkdir -p $T/dl/sub && head -n 1000 $T/d/train.tsv > $T/dl/a.tsv && ln -s $T/nothing $T/dl/b.tsv
train dangle --set data.train=$T/dl
rc=$?
rm $T/dl/b.tsv && head -n 1000 $T/d/train.tsv > $T/dl/sub/c.tsv
train subdir --set data.train=$T/dl --set data.eval=
check "data.train: a dangling link is an error naming it; a subdirectory is a warning, its files not read ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q '$T/dl/b.tsv: a link to a file that does not exist' $T/dangle.log && grep -q 'warning: data.train = $T/dl: 1 of its entries is no file and is not read (sub: a directory' $T/subdir.log && [ '$(json examples $T/subdir/metrics.json)' = 1000 ]"
head -c 1000 $T/shards/part-00000.bin > $T/trunc.bin
train csvbin --set data.train=$T/shards --set data.format=csv
check "data.format = csv on binary shards is refused, naming both" \
    sh -c "[ $? != 0 ] && grep -q '$T/shards holds binary shards (\*.bin), but data.format = csv' $T/csvbin.log"
train critdec --set data.format=criteo --set data.cat_encoding=dec
check "a column key under data.format = criteo is refused, naming it" \
    sh -c "[ $? != 0 ] && grep -q 'data.cat_encoding applies to data.format = csv' $T/critdec.log"
train autohash --set trainer.worker_threads=1 --set data.cat_encoding=hash
check "data.format = auto with a column key set reads the columns' way (hashed ids: another model than hex's)" \
    sh -c "[ $? = 0 ] && [ \"$(json examples $T/autohash/metrics.json)\" = $N ] && [ \"$(json train_ne $T/autohash/metrics.json)\" != \"$(json train_ne $T/one/metrics.json)\" ]"
train trunc --set data.train=$T/trunc.bin
check "a truncated shard is refused" grep -q 'truncated' $T/trunc.log
mkdir -p $T/mixed && cp $T/shards/part-00000.bin $T/mixed/ && head -100 $T/d/train.tsv > $T/mixed/zz.tsv
train mixrun --set data.train=$T/mixed --set data.eval=
check "a directory of shards and text: the kind left out is said, with a file of it" \
    sh -c "[ $? = 0 ] && grep -q 'warning: $T/mixed: 1 of its 2 files are left out (binary shards (.bin), e.g. $T/mixed/part-00000.bin): it is read as text' $T/mixrun.log && [ \"$(json examples $T/mixrun/metrics.json)\" = 100 ]"
# shards beside an empty marker file (a job's _SUCCESS): read as shards (they were read as
# text, and the run failed with "no training example")
mkdir -p $T/marked && cp $T/shards/part-00000.bin $T/marked/ && touch $T/marked/_SUCCESS
train marked --set data.train=$T/marked --set data.eval=
check "shards beside an empty _SUCCESS are read as shards" \
    sh -c "[ $? = 0 ] && [ \"$(json examples $T/marked/metrics.json)\" = 14000 ]"
$BIN convert $CFG --in $T/d/eval.tsv --out $T/sh17 --set data.cat_cols=14-30 > /dev/null 2>&1
train sh17run --set data.eval=$T/sh17
check "eval shards of another schema: refused before training, naming data.eval" \
    sh -c "[ $? = 1 ] && grep -q 'data.eval = $T/sh17: the data has 13 dense and 17 categorical features, the model' $T/sh17run.log && ! [ -e $T/sh17run/progress.csv ]"
cp $T/shards/part-00000.bin $T/label7.bin
printf '\000\000\340\100' | dd of=$T/label7.bin bs=1 seek=64 conv=notrunc 2> /dev/null # label 7.0
train label7 --set data.train=$T/label7.bin
check "a shard record of label 7 is refused as corrupt, naming the record" \
    sh -c "[ $? = 1 ] && grep -q 'label7.bin: corrupt shard at record 0 (a label other than 0 or 1' $T/label7.log"

# bad lines are counted, reported by file:line and skipped
head -100 $T/d/train.tsv > $T/bad.tsv
printf '1\t2\t3\n' >> $T/bad.tsv
head -100 $T/d/train.tsv | tail -1 | sed 's/^[01]/7/' >> $T/bad.tsv
head -100 $T/d/train.tsv | tail -1 | awk -F'\t' 'BEGIN{OFS="\t"} {$3="abc"; print}' >> $T/bad.tsv
train bad --set data.train=$T/bad.tsv --set data.eval=
check "bad lines: the run goes on" test "$(json examples $T/bad/metrics.json)" = 100
check "bad lines: counted" test "$(json bad_lines $T/bad/metrics.json)" = 3
check "bad lines: reported as file:line" grep -q "bad.tsv:101:" $T/bad.log
check "bad lines over 1 % of those read: a warning says how many" \
    grep -q "^shadowsync: warning: 3 of the 103 lines read from data.train = $T/bad.tsv (2.9 %) were not examples" $T/bad.log
# gen's folder as data.train (no eval): its *.prob files are no data, and the warning says so
train genfolder --set data.train=$T/d --set data.eval= --set data.max_examples=2000
check "a folder with files that are no data: it trains, and the warning gives the share" \
    sh -c "[ $? = 0 ] && grep -q '^shadowsync: warning: 5000 of the 7000 lines read from data.train = $T/d (71.4 %)' $T/genfolder.log"
check "no sync: the sync gap reads '-' (an empty csv field), not nan" \
    sh -c "grep -q 'sync_gap -  bad_lines' $T/genfolder.log && tail -1 $T/genfolder/progress.csv | grep -q '^[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,,' && ! grep -qi nan $T/genfolder/progress.csv"
check "data.max_examples reached: progress.csv's last row is done (1.0000)" \
    sh -c "head -1 $T/genfolder/progress.csv | grep -q ',done\$' && tail -1 $T/genfolder/progress.csv | grep -q ',1.0000\$'"
# the progress line says how far through data.train the run is, and the time left
train donepct --set output.quiet=false --set output.log_interval_s=0.05 --set trainer.worker_threads=1
check "progress lines: done N% with an eta, rising, then done 100.0%" \
    sh -c "grep '^\[ *[0-9.]*s\]' $T/donepct.log | sed -n 's/.*  done \([0-9.]*\)%  eta [0-9hms]*\$/\1/p' | sort -n -c && grep -q '  done [0-9.]*%  eta ' $T/donepct.log && grep '^\[ *[0-9.]*s\]' $T/donepct.log | tail -1 | grep -q '  done 100.0%\$'"

# output.eval_every: data.eval scored while the job trains, a line and an eval.csv row each,
# the end-of-run eval the last row
train midev --set output.quiet=false --set output.eval_every=10000 --set trainer.worker_threads=1
ME=$T/midev/eval.csv
check "eval_every: status 0, eval.csv's header, a mid-run row or more, the last row the run's end" \
    sh -c "[ $? = 0 ] && head -1 $ME | grep -q '^examples,elapsed_s,eval_examples,eval_ne,eval_logloss,eval_auc,eval_calibration\$' && [ \$(wc -l < $ME) -ge 3 ] && tail -1 $ME | grep -q '^$N,'"
check "eval_every: rows at rising counts, each at or past its due count, on every eval example" \
    awk -F, -v n=$N 'NR > 1 { if ($1 <= last || $1 < 10000 || $1 > n || $3 != 5000) bad = 1; last = $1 } END { exit bad }' $ME
check "eval_every: the last row is metrics.json's eval NE" \
    near "$(tail -1 $ME | cut -d, -f4)" "$(json eval_ne $T/midev/metrics.json)" 0.000002
check "eval_every: each mid-run eval is a line naming its count" \
    sh -c "[ \$(grep -c '^eval (trained [0-9]*): examples 5000  ne [0-9.]* ' $T/midev.log) = \$((\$(wc -l < $ME) - 2)) ]"
# the copies are the live model's: the first scored worse than the end (it learned since),
# and every one better than the untrained model
train midev0 --set data.max_examples=128 --set trainer.worker_threads=1
check "eval_every: the first mid-run eval ($(sed -n 2p $ME | cut -d, -f4)) worse than the end's ($(tail -1 $ME | cut -d, -f4)), better than 128 examples' ($(json eval_ne $T/midev0/metrics.json))" \
    sh -c "awk -F, -v u=$(json eval_ne $T/midev0/metrics.json) 'NR == 2 { f = \$4 } NR > 1 { l = \$4; if (\$4 >= u) bad = 1 } END { exit !(!bad && f > l + 0.003) }' $ME"
# under sync.output = average the mid-run evals score the replicas' mean, as the end's does
train midavg --set output.eval_every=10000 --set job.trainers=2 --set sync.algo=none --set sync.output=average --set trainer.worker_threads=1
check "eval_every, sync.output = average with 2 unsynced trainers: mid-run rows, each NE in (0.5, 1.2), the last metrics.json's" \
    sh -c "[ \$(wc -l < $T/midavg/eval.csv) -ge 3 ] && awk -F, 'NR > 1 { if (\$4 >= 1.2 || \$4 <= 0.5) bad = 1 } END { exit bad }' $T/midavg/eval.csv && tail -1 $T/midavg/eval.csv | cut -d, -f4 | grep -q '^$(json eval_ne $T/midavg/metrics.json | cut -c1-6)'"
train midnoev --set output.eval_every=10000 --set data.eval=
check "eval_every without data.eval: refused before training, naming both keys" \
    sh -c "[ $? = 1 ] && grep -q 'output.eval_every = 10000 scores data.eval while the job trains, but data.eval is empty' $T/midnoev.log && ! [ -e $T/midnoev/progress.csv ]"
train middes --set output.eval_every=10000 --set embedding.placement=trainers --set job.trainers=2
check "eval_every with DES: refused before training, saying why" \
    sh -c "[ $? = 1 ] && grep -q 'output.eval_every needs the tables on embedding PSs' $T/middes.log"
train midnone --set data.max_examples=2000
check "without eval_every: eval.csv holds the end-of-run eval alone" test "$(wc -l < $T/midnone/eval.csv)" = 2

# errors stop before training, naming the key and value
$BIN train $CFG --set sync.alpha=2 > $T/e1.log 2>&1
check "out-of-range value: non-zero exit naming the key" \
    sh -c "[ $? != 0 ] && grep -q 'sync.alpha' $T/e1.log"
$BIN train $CFG --set trainer.bogus=1 > $T/e2.log 2>&1
check "unknown key: non-zero exit naming it" sh -c "[ $? != 0 ] && grep -q 'bogus' $T/e2.log"
# a check across keys names where each key was set, as a single key's error does: the first
# key's file:line or --set in front, every other key set somewhere after the reason
printf '[job]\ntrainers = 1024\n\n[data]\ntrain = %s\n\n[optim]\ndecay_examples = 0\n\n[output]\neval_every = 10000\ndir = %s\n' \
    "$T/d/train.tsv" "$T/cross" > $T/cross.ini
at() { grep -n "^$1 " $T/cross.ini | cut -d: -f1; }
$BIN train $T/cross.ini --set data.eval= > $T/cross1.log 2>&1; r1=$?
$BIN train $T/cross.ini --set optim.decay_start=5000 --set data.eval=$T/d/eval.tsv > $T/cross2.log 2>&1; r2=$?
$BIN train $T/cross.ini --set output.eval_every=0 --set trainer.worker_threads=256 > $T/cross3.log 2>&1; r3=$?
check "checks across keys name each key's file:line and --set ($r1 $r2 $r3)" \
    sh -c "[ $r1 = 1 ] && grep -q '^shadowsync: config $T/cross.ini:$(at eval_every): output.eval_every = 10000 scores data.eval while the job trains, but data.eval is empty: .*; data.eval is set by --set data.eval=\$' $T/cross1.log &&
        [ $r2 = 1 ] && grep -q '^shadowsync: config (--set optim.decay_start=5000): optim.decay_start = 5000 starts a decay that optim.decay_examples = 0 leaves out: .*; optim.decay_examples is set at $T/cross.ini:$(at decay_examples)\$' $T/cross2.log &&
        [ $r3 = 1 ] && grep -q '^shadowsync: config $T/cross.ini:$(at trainers): job.trainers = 1024 x (trainer.worker_threads = 256 + a shadow thread) .*; trainer.worker_threads is set by --set trainer.worker_threads=256\$' $T/cross3.log &&
        ! [ -e $T/cross/progress.csv ]"
train ro --set output.dir=/proc/nope
check "unwritable run directory: reported before training" \
    sh -c "[ $? != 0 ] && grep -q '/proc/nope' $T/ro.log"
mkdir -p $T/rodir/config.ini # the run directory's config.ini cannot be written
train rodir
check "run directory whose config.ini cannot be written: named once, with the cause" \
    sh -c "[ $? != 0 ] && [ \"\$(grep -o 'is not writable' $T/rodir.log | wc -l)\" = 1 ] && grep -q 'rodir/config.ini: Is a directory' $T/rodir.log"

# a model that diverged is not saved: NaNs the ReLUs once hid stop the training; weights that
# overflow only in the eval's forward fail the run; BMUF's own step is named where it diverges
train div --set optim.dense=sgd --set optim.dense_lr=3 --set trainer.worker_threads=1
check "SGD at dense_lr 3: the model diverged, status 1, no model saved" \
    sh -c "[ $? = 1 ] && grep -q 'the model diverged: its predictions are NaN after [0-9]* examples' $T/div.log && ! [ -e $T/div/model/dense.bin ]"
# (whether the overflow reaches the predictions as NaN or as a saturated 0 or
# 1 depends on the matmul kernel's order of sums: OpenBLAS's Haswell kernel,
# which every x86-64 with AVX2 runs, gives the NaNs this check is about; the
# SkylakeX kernel and oneDNN saturate)
OPENBLAS_CORETYPE=Haswell train div2 --set optim.dense=sgd --set optim.dense_lr=10 --set trainer.worker_threads=1 --set data.max_examples=640 \
    --set checkpoint.dir=$T/ckdiv2 --set trainer.dense_backend=openblas
check "SGD at dense_lr 10 over 5 batches: the eval's NaN predictions fail the run, no model saved, its final checkpoint removed" \
    sh -c "[ $? = 1 ] && grep -q 'the model diverged: 5000 of its 5000 predictions on $T/d/eval.tsv are NaN .* in the training: no model saved; .*; its final checkpoint $T/ckdiv2/ckpt-000001 is removed' $T/div2.log && ! [ -e $T/div2/model/dense.bin ] && ! grep -q '^[0-9]*,.*nan' $T/div2/eval.csv && ! ls -d $T/ckdiv2/ckpt-* > /dev/null 2>&1"
train div3 --set job.trainers=2 --set sync.algo=bmuf --set sync.bmuf_lr=10 --set sync.bmuf_momentum=0.99 --set sync.shadow_sleep_ms=0
check "BMUF diverging: sync.bmuf_lr and sync.bmuf_momentum named" \
    sh -c "[ $? = 1 ] && grep -q 'the model diverged: .*lower sync.bmuf_lr or sync.bmuf_momentum' $T/div3.log"
# the shadow thread's sleep between rounds ends with the data: the run does not wait it out
timeout -k 5 50 $BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/sleep --set output.quiet=true --set job.trainers=2 --set sync.algo=ma \
    --set sync.shadow_sleep_ms=60000 > $T/sleep.log 2>&1
rc=$?
check "sync.shadow_sleep_ms = 60000: the run ends with its data ($rc, $(json seconds $T/sleep/metrics.json) s), every example" \
    sh -c "[ $rc = 0 ] && [ '$(json examples $T/sleep/metrics.json)' = $N ] && awk -v s='$(json seconds $T/sleep/metrics.json)' 'BEGIN { exit !(s != \"\" && s < 20) }'"

# a pipe reads once: data.epochs = 2 over one is refused (its second pass waited forever)
mkfifo $T/pipe.tsv
cat $T/d/train.tsv > $T/pipe.tsv 2> /dev/null &
catpid=$!
timeout -k 5 60 $BIN train $CFG --set data.train=$T/pipe.tsv --set data.eval= --set output.dir=$T/pipe \
    --set data.epochs=2 > $T/pipe.log 2>&1
rc=$?
kill $catpid 2> /dev/null
check "data.epochs = 2 over a pipe: refused, naming it ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'data.train: $T/pipe.tsv is not a regular file (a pipe or device reads once), but data.epochs = 2' $T/pipe.log"
# data that yields nothing, or an eval set that cannot serve, does not pass for a trained model
train none --set data.train=/dev/null --set checkpoint.dir=$T/ck0
check "no training example read: status 1 naming data.train, no model saved" \
    sh -c "[ $? != 0 ] && grep -q 'no training example was read from data.train = /dev/null' $T/none.log && ! [ -e $T/none/model ]"
check "...its progress row: no train_ne known, none written (no nan)" \
    sh -c "grep -q '^[0-9.]*,0,[0-9.]*,,' $T/none/progress.csv && ! grep -qi nan $T/none.log $T/none/progress.csv"
train none2 --set checkpoint.dir=$T/ck0 --set data.max_examples=1000
check "...and its checkpoint.dir takes the next run without --resume (nothing was trained there)" test $? = 0
: > $T/empty.tsv
train noempty --set data.eval=$T/empty.tsv --set data.max_examples=2000
check "an empty data.eval file stops the run before training" \
    sh -c "[ $? = 1 ] && grep -q 'data.eval = $T/empty.tsv holds no example this config reads (0 bad lines)' $T/noempty.log && ! [ -e $T/noempty/progress.csv ]"
# a glob is not probed before training (nor a pipe): its eval finds no example at the end
train noeval --set "data.eval=$T/empt?.tsv" --set data.max_examples=2000
check "no eval example read: status 1 naming data.eval, the model and metrics kept" \
    sh -c "[ $? != 0 ] && grep -q 'no eval example was read from data.eval = $T/empt?.tsv' $T/noeval.log && [ -s $T/noeval/model/dense.bin ] && [ \"$(json examples $T/noeval/metrics.json)\" = 2000 ]"
train noev --set data.eval=$T/nope.tsv
check "a missing data.eval stops the run before training, naming it" \
    sh -c "[ $? != 0 ] && grep -q 'data.eval: $T/nope.tsv: No such file' $T/noev.log && ! [ -e $T/noev/progress.csv ]"
# data.eval of another format (gen's teacher probabilities): found before training, not after it
train probev --set data.eval=$T/d/eval.prob
rc=$?
check "data.eval that holds no example of the config's format stops the run before training ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'data.eval = $T/d/eval.prob holds no example this config reads (5000 bad lines, the first named above)' $T/probev.log && grep -q 'eval.prob:1: expected' $T/probev.log && ! [ -e $T/probev/progress.csv ]"
# a relative data.train of no file: where it was looked for, and how to make data
ABS_BIN=$(cd "$(dirname $BIN)" && pwd)/$(basename $BIN); ABS_CFG=$(pwd)/$CFG
(cd $T && $ABS_BIN train $ABS_CFG --set data.train=no/such.tsv --set output.dir=$T/rel > $T/rel.log 2>&1)
check "a relative data.train of no file names the working directory and gen" \
    grep -q "data.train: no/such.tsv: No such file or directory (checked before training); a relative path is taken from the working directory, $T; .shadowsync gen --out DIR --config CONFIG. writes data" $T/rel.log
train notr --set data.train=$T/nope.tsv
check "a missing data.train stops the run before the config's echo, naming it" \
    sh -c "[ $? != 0 ] && grep -q '^shadowsync: data.train: $T/nope.tsv: No such file' $T/notr.log && ! grep -q 'resolved config' $T/notr.log && ! [ -e $T/notr/progress.csv ]"
awk 'NR % 3 == 0 { $1 = 2 } 1' OFS='\t' $T/d/eval.tsv > $T/badeval.tsv
$BIN eval $CFG --set data.eval=$T/badeval.tsv --model $T/one > $T/badeval.log 2>&1
rc=$?
check "eval: bad lines of data.eval counted in the eval line and its JSON, with a warning past 1 %" \
    sh -c "[ $rc = 0 ] && grep -q '^eval: examples 3334 .* bad_lines 1666$' $T/badeval.log && grep -q '\"eval_bad_lines\": 1666}' $T/badeval.log && grep -q 'warning: 1666 of the 5000 lines read from data.eval = $T/badeval.tsv (33.3 %)' $T/badeval.log"
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one --set model.bottom=13-393-8 \
    --set model.top=auto-10-1 > $T/shape.log 2>&1
check "eval of a model with other MLP widths but as many parameters: refused, naming both" \
    sh -c "[ $? = 1 ] && grep -q 'dense.bin: a model of bottom 13-32-8, top 359-32-1; the config.s is bottom 13-393-8, top 359-10-1' $T/shape.log"
# a model of another number of tables: the advice names the tables' keys, not model.top
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one --set data.cat_cols=14-20 > $T/ntab.log 2>&1
check "eval of a model with another number of tables: refused, naming data.cat_cols" \
    sh -c "[ $? = 1 ] && grep -q 'dense.bin: a model of bottom 13-32-8, top 359-32-1; the config.s is bottom 13-32-8, top 36-32-1: .*another number of tables: set data.cat_cols and model.rows' $T/ntab.log"
# scoring reads no optimizer state: a model trained with optim.emb = sgd scores under the
# config's rowwise_adagrad (and back) as under its own
train sgdemb --set optim.emb=sgd --set data.max_examples=20000 --set trainer.worker_threads=1
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/sgdemb > $T/sgdemb-eval.log 2>&1
rc=$?
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one --set optim.emb=sgd > $T/one-sgd.log 2>&1
rc2=$?
ne1=$(sed -n 's/.*"eval_ne": \([0-9.]*\),.*/\1/p' $T/sgdemb-eval.log)
ne2=$(sed -n 's/.*"eval_ne": \([0-9.]*\),.*/\1/p' $T/one-sgd.log)
check "eval of a model of either optim.emb under the other: its own NE ($ne1, $ne2)" \
    sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && awk -v a='$ne1' -v b='$(json eval_ne $T/sgdemb/metrics.json)' -v c='$ne2' -v d='$(json eval_ne $T/one/metrics.json)' 'BEGIN { exit !(a != \"\" && c != \"\" && a - b < 1e-6 && b - a < 1e-6 && c - d < 1e-6 && d - c < 1e-6) }'"
# no model to score, or nothing scored: status 1, saying which
train nosave --set output.save_model=false --set data.max_examples=2000
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/nosave > $T/nosave-eval.log 2>&1
rc=$?
: > $T/empty-eval.tsv
$BIN eval $CFG --set data.eval=$T/empty-eval.tsv --model $T/one > $T/empty-eval.log 2>&1
check "eval of a run that saved no model, and of an empty data.eval: status 1 ($rc, $?), naming each" \
    sh -c "[ $rc = 1 ] && grep -q 'no dense.bin there or in its model/ (a run with output.save_model = false saves none' $T/nosave-eval.log && grep -q 'no eval example was read from data.eval = $T/empty-eval.tsv: nothing is scored' $T/empty-eval.log"
# a model file from before the widths were stored (version 1: no pooling, no widths) loads
mkdir -p $T/oldmodel && cp $T/one/model/tables.bin $T/oldmodel/ && python3 - $T/one/model/dense.bin $T/oldmodel/dense.bin <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
at = 24
for part in range(2):
    at += 4 * (struct.unpack("<I", d[at:at + 4])[0] + 2)
open(sys.argv[2], "wb").write(d[:8] + struct.pack("<I", 1) + d[12:20] + d[at:])
PY
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/oldmodel > $T/oldmodel.log 2>&1
check "a version 1 dense.bin (before model.pooling and the widths were stored) scores as the model it was" \
    sh -c "[ $? = 0 ] && [ \"\$(tail -1 $T/oldmodel.log)\" = \"\$($BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/one 2>/dev/null | tail -1)\" ]"
ln $T/d/train.tsv $T/hard.tsv
train hard --set data.eval=$T/hard.tsv
check "an eval file that is a hard link to a training file is refused before training" \
    sh -c "[ $? != 0 ] && grep -q \"data.eval's file $T/hard.tsv is also one of data.train\" $T/hard.log && ! [ -e $T/hard/progress.csv ]"
train leak --set data.train=$T/d
check "an eval file among data.train's files is refused before training" \
    sh -c "[ $? != 0 ] && grep -q \"data.eval's file $T/d/eval.tsv is also one of data.train\" $T/leak.log && ! [ -e $T/leak/progress.csv ]"
mkdir -p $T/stale/model && echo '{"examples": 1}' > $T/stale/metrics.json && touch $T/stale/roles.json $T/stale/placement.txt
train stale --set data.train=/dev/null --set output.dir=$T/stale
check "an earlier run's metrics.json, roles.json and plan do not outlive a run in the same output.dir" \
    sh -c "[ $? != 0 ] && ! [ -e $T/stale/metrics.json ] && ! [ -e $T/stale/roles.json ] && ! [ -e $T/stale/placement.txt ]"
# ...nor its model's files: hot rows that eval would otherwise load over this run's model
train hotrun --set output.dir=$T/stale --set data.max_examples=5000 --set trainer.worker_threads=1 --set hot_embeddings.memory_mb=0.05
train plain --set output.dir=$T/stale --set data.max_examples=5000 --set trainer.worker_threads=1
$BIN eval $CFG --model $T/stale/model --set data.eval=$T/d/eval.tsv > $T/stale-eval.log 2>&1
SE=$(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/stale-eval.log)
check "a run in an earlier hot run's output.dir: no hot rows left in its model" \
    sh -c "! [ -e $T/stale/model/hot.bin ] && ! [ -e $T/stale/model/hot-rows.bin ] && [ -e $T/stale/model/dense.bin ]"
check "...and eval of its model gives its eval NE ($SE vs $(json eval_ne $T/stale/metrics.json))" \
    near "$SE" "$(json eval_ne $T/stale/metrics.json)" 0.000002
train note --set job.embedding_ps=2 --set data.max_examples=1000 --set output.quiet=false
check "cluster role counts without mpirun: the embedded default runs and says so" \
    sh -c "[ $? = 0 ] && grep -q 'job.embedding_ps = 2, .* are the ranks of a cluster job' $T/note.log"

# the BLAS kernel: one pinned by the environment is kept, and named as slower
# `shadowsync check` makes the ranks' memory checks: what every rank would refuse
# (tables past the memory here, a width past it: as train refuses them; tables past
# embedding_ps.memory_mb, as a cluster job's ranks do) is refused by check
for bad in "model.rows=2000000000:the embedding tables here need" \
           "model.bottom=13-100000000-8:the dense model here needs about" \
           "job.embedding_ps=2 --set embedding_ps.memory_mb=100 --set model.rows=3000000:placement: the tables need"; do
    $BIN check $CFG --set ${bad%%:*} > $T/memcheck.log 2>&1
    rc=$?
    case "$bad" in job.*) echo "${bad#*:}" > $T/memtrain.log ;; # (a cluster job's)
    *) $BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/memtrain \
        --set output.save_model=false --set ${bad%%:*} > $T/memtrain.log 2>&1 ;; esac
    check "check --set ${bad%%:*}: refused ($rc) as the job refuses it: ${bad#*:}" \
        sh -c "[ $rc = 1 ] && grep -q '${bad#*:}' $T/memcheck.log && grep -q '${bad#*:}' $T/memtrain.log"
done
$BIN check $CFG > $T/memcheck.log 2>&1
check "check of tiny.ini passes ($?)" grep -q '^trainers 1 embedding_ps 0' $T/memcheck.log
# the services' address keys, checked before any launch (the job itself: tests/e2e_lab.sh)
for bad in "job.interface=10.0.0/40:is neither an interface name" "job.bind=nowhere:is not an IPv4 address" \
           "job.interface=eth0 --set job.bind=10.0.0.1:set one"; do
    $BIN check $CFG --set ${bad%%:*} > $T/addrcheck.log 2>&1
    rc=$?
    check "check --set ${bad%%:*}: refused ($rc), naming the key" \
        sh -c "[ $rc = 1 ] && grep -q '${bad#*:}' $T/addrcheck.log"
done

# when it holds an AVX-512 CPU to AVX2 (never when the kernel has AVX-512)
blas_run() { OPENBLAS_CORETYPE=$1 $BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set data.max_examples=2000 --set output.dir=$T/blas > $T/blas-$1.log 2>&1; }
blas_run Haswell
check "OPENBLAS_CORETYPE=Haswell from the environment is kept" grep -q '^# blas: OpenBLAS Haswell kernel' $T/blas-Haswell.log
avx512=yes
for f in avx512f avx512bw avx512dq avx512vl; do grep -qw $f /proc/cpuinfo || avx512=no; done
if [ $avx512 = yes ]; then
    check "an AVX-512 CPU held to Haswell by the environment: said so" grep -q 'OPENBLAS_CORETYPE=Haswell from the environment is kept; this CPU has AVX-512' $T/blas-Haswell.log
    blas_run SkylakeX
    check "the SkylakeX kernel: nothing said" sh -c "grep -q '^# blas: OpenBLAS SkylakeX kernel' $T/blas-SkylakeX.log && ! grep -q 'this CPU has AVX-512' $T/blas-SkylakeX.log"
else
    check "a CPU without AVX-512 on Haswell: nothing said" sh -c "! grep -q 'this CPU has AVX-512' $T/blas-Haswell.log"
fi
exit 0
