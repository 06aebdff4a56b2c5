#!/bin/sh
# Checkpoints and resume of the embedded default (DESIGN §8): a run killed
# with kill -9 resumes from its newest complete checkpoint, trains every
# example exactly once and ends with the uninterrupted run's model (one
# worker: bit for bit); a damaged newest checkpoint is skipped for the one
# before; a checkpoint.dir that cannot be made is refused before training;
# checkpoints under foreground sync with several trainers do not hang;
# eval reads a checkpoint as a model.
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
N=200000
$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 5 --config configs/tiny.ini > /dev/null 2>&1
json() { sed -n "s/^ *\"$1\": \([^,]*\),*$/\1/p" "$2" | tr -d '"'; }
check() { what=$1; shift; if "$@"; then echo "PASS $what"; else echo "FAIL $what: $*"; fi; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && d < t && d > -t) }'; }
train() { # [EXTRA="--resume ..."] train OUT [section.key=value ...]
    out=$1; shift
    sets=""; for s in "$@"; do sets="$sets --set $s"; done
    timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.dir=$T/$out --set output.log_interval_s=0.5 $sets $EXTRA
}
# waits until DIR holds a complete checkpoint (its MANIFEST's last line is "end HASH")
wait_ckpt() { for i in $(seq 1 200); do tail -1 $1/ckpt-*/MANIFEST 2>/dev/null | grep -q '^end' && return 0; sleep 0.05; done; return 1; }

train full trainer.worker_threads=1 > $T/full.log 2>&1
REF=$(json eval_ne $T/full/metrics.json)

(train run trainer.worker_threads=1 checkpoint.dir=$T/ck checkpoint.interval_s=0.3 output.log_interval_s=0.1 > $T/run1.log 2>&1 &)
wait_ckpt $T/ck
sleep 0.4
pkill -9 -f "output.dir=$T/run" ; sleep 0.3
check "a run killed with kill -9 left a complete checkpoint" sh -c "ls $T/ck | grep -q '^ckpt-0000[0-9][0-9]$'"
check "the killed run had not finished" sh -c "! [ -f $T/run/metrics.json ]"
tail -n +2 $T/run/progress.csv > $T/run-killed.csv
EXTRA=--resume train run trainer.worker_threads=1 checkpoint.dir=$T/ck checkpoint.interval_s=0.3 > $T/run2.log 2>&1
rc=$?
M=$T/run/metrics.json
check "resume: exits 0" test $rc = 0
check "resume: names the checkpoint and 0 batches in flight" grep -q "resuming from $T/ck/ckpt-[0-9]*: [1-9][0-9]* examples done, 0 batches in flight" $T/run2.log
check "resume: every example trained exactly once over the kill ($(json examples $M) of $N)" test "$(json examples $M)" = $N
# progress.csv goes on from the checkpoint: the killed run's rows up to it kept, those past it
# (trained, then lost with the kill) dropped
X=$(sed -n 's/^# resuming from .*: \([0-9]*\) examples done.*/\1/p' $T/run2.log)
awk -F, -v x="$X" '$2 <= x' $T/run-killed.csv > $T/run-kept.csv
awk -F, -v x="$X" '$2 > x' $T/run-killed.csv > $T/run-lost.csv
check "resume: progress.csv keeps the killed run's $(wc -l < $T/run-kept.csv) rows up to the checkpoint ($X), drops its $(wc -l < $T/run-lost.csv) past it" \
    sh -c "[ -n '$X' ] && [ -s $T/run-kept.csv ] && [ \"\$(sed -n 2,$(($(wc -l < $T/run-kept.csv) + 1))p $T/run/progress.csv)\" = \"\$(cat $T/run-kept.csv)\" ] && ! grep -qxFf $T/run-lost.csv $T/run/progress.csv"
NE=$(json eval_ne $M)
check "resume: the uninterrupted run's eval NE ($NE vs $REF, one worker: bit for bit)" near "$NE" "$REF" 0.000001
check "resume: metrics.json names the checkpoint it resumed from" grep -q '"resumed_from": ' $M
check "a final checkpoint is written at the end" sh -c "grep -q '^meta final 1' \$(ls -d $T/ck/ckpt-* | tail -1)/MANIFEST"
check "only the newest 2 checkpoints are kept" test "$(ls $T/ck | wc -l)" = 2
# a graceful stop: SIGTERM ends the run as its data's end would (final checkpoint, eval,
# model, metrics.json naming the signal), status 75; --resume trains the rest, every example
# once, to the uninterrupted run's model (one worker: bit for bit)
# (the signals go to shadowsync itself: timeout would pass a second one on)
first_line() { for i in $(seq 1 400); do grep -q '^\[ *[0-9.]*s\]' $1 && return 0; sleep 0.025; done; return 1; }
pid_of() { pgrep -f "^$BIN train .*output.dir=$T/$1 "; }
# stop_run NAME SIG [section.key=value ...]: trains into $T/NAME (its output in
# $T/NAME1.log), sends SIG once its first progress line is out; its status in rc1
stop_run() {
    _n=$1; _sig=$2; shift 2
    train $_n "$@" > $T/${_n}1.log 2>&1 &
    _bg=$!
    first_line $T/${_n}1.log
    kill -$_sig $(pid_of $_n)
    wait $_bg
    rc1=$?
}
stop_run stop TERM trainer.worker_threads=1 checkpoint.dir=$T/ckstop
rc=$rc1
M=$T/stop/metrics.json
check "SIGTERM: the run stops with status 75, saying how to resume ($rc)" \
    sh -c "[ $rc = 75 ] && grep -q 'stopping (SIGTERM): the workers end at their next batch' $T/stop1.log && grep -q '^shadowsync: stopped (SIGTERM) after [0-9]* examples: .*--resume. continues from checkpoint.dir = $T/ckstop' $T/stop1.log"
check "SIGTERM: metrics.json names it, short of the data ($(json examples $M) of $N), the model and eval there" \
    sh -c "grep -q '\"stopped_by\": \"SIGTERM\"' $M && [ $(json examples $M) -gt 0 ] && [ $(json examples $M) -lt $N ] && [ -s $T/stop/model/dense.bin ] && [ $(json eval_examples $M) = 5000 ]"
STOPPED=$(json examples $M)
grep '^[0-9.]*,[0-9]*,' $T/stop/progress.csv > $T/stop-rows1.csv
EXTRA=--resume train stop trainer.worker_threads=1 checkpoint.dir=$T/ckstop > $T/stop2.log 2>&1
rc=$?
check "after SIGTERM, --resume: eval.csv goes on from the stopped run's row ($STOPPED, then $N)" \
    sh -c "[ \"\$(cut -d, -f1 $T/stop/eval.csv | tr '\n' ' ')\" = 'examples $STOPPED $N ' ]"
K=$(wc -l < $T/stop-rows1.csv)
sed -n "2,$((K + 1))p" $T/stop/progress.csv > $T/stop-rows2.csv
check "...and progress.csv keeps the stopped run's $K rows, then its own, the examples rising" \
    sh -c "[ $K -gt 0 ] && cmp -s $T/stop-rows1.csv $T/stop-rows2.csv && [ \$(wc -l < $T/stop/progress.csv) -gt $((K + 1)) ] && awk -F, 'NR > 1 { if (\$2 < last) bad = 1; last = \$2 } END { exit bad }' $T/stop/progress.csv"
check "after SIGTERM, --resume: exits 0, every example once ($(json examples $M) of $N), no stopped_by" \
    sh -c "[ $rc = 0 ] && [ $(json examples $M) = $N ] && ! grep -q stopped_by $M"
check "after SIGTERM, --resume: the uninterrupted run's eval NE ($(json eval_ne $M) vs $REF)" near "$(json eval_ne $M)" "$REF" 0.000001
check "after SIGTERM, --resume: optim.schedule = auto takes the size its checkpoint was fitted to" \
    grep -q "^# optim.schedule = auto: the job's $N examples, as the checkpoint it resumes was fitted to: the rates decay over its last $((N / 10)) examples" $T/stop2.log
FIRST=$(grep '^\[ *[0-9.]*s\]' $T/stop2.log | head -1)
check "after SIGTERM, --resume: done% goes on from where the data was left ($FIRST)" \
    sh -c "echo '$FIRST' | awk -v n=$N '{ for (i = 1; i < NF; i++) { if (\$i == \"examples\") e = \$(i + 1); if (\$i == \"done\") d = \$(i + 1) + 0 } } END { exit !(e > 0 && d - 100 * e / n < 5 && 100 * e / n - d < 5) }'"
# ...and under the rates' schedule, which a resume takes up at the checkpoint's count
LR="optim.warmup_examples=60000 optim.decay_start=80000 optim.decay_examples=120000 optim.decay_to=0.1"
train full_lr trainer.worker_threads=1 $LR > $T/full_lr.log 2>&1
stop_run stop_lr TERM trainer.worker_threads=1 checkpoint.dir=$T/ckstop_lr $LR
EXTRA=--resume train stop_lr trainer.worker_threads=1 checkpoint.dir=$T/ckstop_lr $LR > $T/stop_lr2.log 2>&1
rc=$?
AT=$(sed -n 's/^# learning rates x[0-9.e-]* at \([0-9]*\) examples.*/\1/p' $T/stop_lr2.log)
check "warmup and decay, stopped at $AT and resumed: the uninterrupted run's eval NE ($(json eval_ne $T/stop_lr/metrics.json) vs $(json eval_ne $T/full_lr/metrics.json))" \
    sh -c "[ $rc1 = 75 ] && [ $rc = 0 ] && [ '$AT' -gt 0 ] && [ '$AT' -lt $N ] && [ '$(json eval_ne $T/stop_lr/metrics.json)' = '$(json eval_ne $T/full_lr/metrics.json)' ] && [ '$(json eval_ne $T/full_lr/metrics.json)' != '$REF' ]"
# ...and stopped in a later pass over the data (data.epochs): the resume goes on in that pass
train full_ep trainer.worker_threads=1 data.epochs=3 > $T/full_ep.log 2>&1
train stop_ep trainer.worker_threads=1 data.epochs=3 checkpoint.dir=$T/ckstop_ep output.log_interval_s=0.1 > $T/stop_ep1.log 2>&1 &
bg=$!
past_pass1() { for i in $(seq 1 1000); do grep '^\[ *[0-9.]*s\]' $1 | awk -v n=$N '{ for (i = 1; i < NF; i++) if ($i == "examples" && $(i + 1) > n) f = 1 } END { exit !f }' && return 0; sleep 0.02; done; return 1; }
past_pass1 $T/stop_ep1.log
kill -TERM $(pid_of stop_ep)
wait $bg
rc1=$?
EXTRA=--resume train stop_ep trainer.worker_threads=1 data.epochs=3 checkpoint.dir=$T/ckstop_ep > $T/stop_ep2.log 2>&1
rc=$?
AT=$(sed -n 's/^# resuming from .*: \([0-9]*\) examples done.*/\1/p' $T/stop_ep2.log)
check "data.epochs = 3, stopped in a later pass ($AT examples) and resumed: every pass's examples once, the uninterrupted run's eval NE ($(json eval_ne $T/stop_ep/metrics.json) vs $(json eval_ne $T/full_ep/metrics.json))" \
    sh -c "[ $rc1 = 75 ] && [ $rc = 0 ] && [ '$AT' -gt $N ] && [ '$AT' -lt $((3 * N)) ] && [ '$(json examples $T/stop_ep/metrics.json)' = $((3 * N)) ] && [ '$(json eval_ne $T/stop_ep/metrics.json)' = '$(json eval_ne $T/full_ep/metrics.json)' ]"
# ...and with BMUF, whose state (w_global, the block momentum) the final
# checkpoint of a stop keeps, so the resume goes on with it
stop_run stop_bm TERM job.trainers=2 trainer.worker_threads=1 sync.algo=bmuf checkpoint.dir=$T/ckstop_bm
EXTRA=--resume train stop_bm job.trainers=2 trainer.worker_threads=1 sync.algo=bmuf checkpoint.dir=$T/ckstop_bm > $T/stop_bm2.log 2>&1
rc=$?
check "bmuf, stopped and resumed: the stop's checkpoint holds both trainers' BMUF state, every example once ($rc1, $rc)" \
    sh -c "[ $rc1 = 75 ] && [ $rc = 0 ] && [ \$(grep -c '^part sync-[01]-[01].bin' \$(ls -d $T/ckstop_bm/ckpt-* | head -1)/MANIFEST) = 4 ] && [ '$(json examples $T/stop_bm/metrics.json)' = $N ]"
# A model gone NaN (here written into a checkpoint, its MANIFEST's hash
# made anew): the resumed run stops at its first batch, naming it, and
# saves no model; `eval` of such a model ends (its AUC: nan)
nan_dense() { python3 - "$@" <<'PY'
import os, struct, sys
M = (1 << 64) - 1
def fhash(data):  # checkpoint.c's hash_file
    h = 0x243F6A8885A308D3
    w = len(data) // 8
    for (x,) in struct.iter_unpack("<Q", data[:w * 8]):
        x = ((h ^ x) * 0x9E3779B97F4A7C15) & M
        h = (((x << 31) | (x >> 33)) & M) * 0xBF58476D1CE4E5B9 & M
    for b in data[w * 8:]:
        h = ((h ^ b) * 0x100000001B3) & M
    return h ^ len(data)
for path in sys.argv[1:]:
    data = bytearray(open(path, "rb").read())
    version = struct.unpack("<I", data[8:12])[0]
    head = 20 if version == 1 else 24
    for part in range(2 if version >= 3 else 0):  # the MLPs' widths: a count, then its n + 1
        head += 4 * (struct.unpack("<I", data[head:head + 4])[0] + 2)
    data[head:] = struct.pack("<f", float("nan")) * ((len(data) - head) // 4)
    open(path, "wb").write(data)
    man = os.path.join(os.path.dirname(path), "MANIFEST")
    if os.path.exists(man):
        name = os.path.basename(path)
        lines = open(man).read().split("\n")
        lines = ["part %s %d %016x" % (name, len(data), fhash(bytes(data)))
                 if l.startswith("part %s " % name) else l for l in lines]
        h = 0xCBF29CE484222325  # checkpoint.c's line_hash over the lines before "end"
        for l in lines:
            if l.startswith("end"):
                break
            for b in (l + "\n").encode():
                h = ((h ^ b) * 0x100000001B3) & M
        lines = ["end %016x" % h if l.startswith("end") else l for l in lines]
        open(man, "w").write("\n".join(lines))
PY
}
stop_run nan TERM trainer.worker_threads=1 checkpoint.dir=$T/cknan
nan_dense $T/cknan/ckpt-*/dense-0.bin
rm -rf $T/nan/model
EXTRA=--resume train nan trainer.worker_threads=1 checkpoint.dir=$T/cknan > $T/nan2.log 2>&1
rc=$?
check "a NaN model stops the training, naming it, no model saved ($rc1, $rc)" \
    sh -c "[ $rc1 = 75 ] && [ $rc = 1 ] && grep -q 'the model diverged: its predictions are NaN' $T/nan2.log && ! [ -e $T/nan/model/dense.bin ]"
cp -r $T/stop/model $T/nanmodel && nan_dense $T/nanmodel/dense.bin
timeout 60 $BIN eval configs/tiny.ini --set data.eval=$T/d/eval.tsv --model $T/nanmodel > $T/naneval.log 2>&1
rc=$?
check "eval of a NaN model ends ($rc), its AUC nan, status 1 naming the NaN predictions" \
    sh -c "[ $rc = 1 ] && grep -q 'auc.*nan.*nan_predictions' $T/naneval.log && grep -q 'the model diverged: [0-9]* of its [0-9]* predictions on $T/d/eval.tsv are NaN' $T/naneval.log"
# a NaN model no prediction shows: a finished run's final checkpoint gone NaN, resumed with
# nothing left to train, is refused at the end, no model saved
train fin trainer.worker_threads=1 checkpoint.dir=$T/ckfin data.max_examples=2000 > /dev/null 2>&1
nan_dense $(ls -d $T/ckfin/ckpt-* | tail -1)/dense-0.bin
EXTRA=--resume train fin2 trainer.worker_threads=1 checkpoint.dir=$T/ckfin data.max_examples=2000 > $T/fin2.log 2>&1
rc=$?
check "a finished run's final checkpoint gone NaN, resumed: status 1 ($rc), its NaN parameters named, no model saved" \
    sh -c "[ $rc = 1 ] && grep -q 'the model diverged: [0-9]* of the trainers. 1 x [0-9]* dense parameters are NaN or infinite at the end of the training: no model saved' $T/fin2.log && ! [ -e $T/fin2/model/dense.bin ]"
# two runs on one checkpoint.dir at once: the second is refused (each would
# delete the other's checkpoints)
train lock1 trainer.worker_threads=1 checkpoint.dir=$T/cklock > $T/lock1.log 2>&1 &
bg=$!
first_line $T/lock1.log
train lock2 trainer.worker_threads=1 checkpoint.dir=$T/cklock > $T/lock2.log 2>&1
rc=$?
wait $bg
check "a second run on a checkpoint.dir in use is refused, naming it; the first goes on ($rc, $?)" \
    sh -c "[ $rc = 1 ] && grep -q 'checkpoint.dir = $T/cklock is in use by another run' $T/lock2.log && [ \"$(json examples $T/lock1/metrics.json)\" = $N ]"
# two runs on one output.dir at once (no checkpoint.dir): the second is refused (their files
# mixed: one's config.ini and progress.csv, the other's metrics.json and model)
train lock3 trainer.worker_threads=1 > $T/lock3.log 2>&1 &
bg=$!
first_line $T/lock3.log
EXTRA= train lock3 trainer.worker_threads=1 data.epochs=2 > $T/lock4.log 2>&1
rc=$?
wait $bg
check "a second run on an output.dir in use is refused, naming it; the first's files are its own ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'output.dir = $T/lock3 is in use by another run' $T/lock4.log && [ \"$(json examples $T/lock3/metrics.json)\" = $N ] && ! grep -q 'epochs = 2' $T/lock3/config.ini"
# SIGUSR1 stops the embedded default too
stop_run usr1 USR1 trainer.worker_threads=1
rc=$rc1
check "SIGUSR1 (embedded): status 75 ($rc), stopped_by SIGUSR1, short of the data ($(json examples $T/usr1/metrics.json) of $N)" \
    sh -c "[ $rc = 75 ] && grep -q '\"stopped_by\": \"SIGUSR1\"' $T/usr1/metrics.json && [ $(json examples $T/usr1/metrics.json) -lt $N ]"
# a stop before the first example (while 2M rows a table are filled): nothing saved, no
# checkpoint taken, and the message says to run it again without --resume
train early model.rows=2000000 checkpoint.dir=$T/ckearly > $T/early.log 2>&1 &
bg=$!
for i in $(seq 1 3000); do # once its main thread blocks SIGUSR1 (bit 10 of SigBlk)
    p=$(pid_of early); m=$(awk '/^SigBlk/ { print $2 }' /proc/$p/status 2> /dev/null)
    [ -n "$p" ] && [ -n "$m" ] && [ $(( 0x$m & 512 )) != 0 ] && break
    sleep 0.005
done
kill -USR1 $p
wait $bg
rc=$?
check "SIGUSR1 before the first example: status 1 ($rc), no model, no checkpoint, run it again without --resume, train_ne -" \
    sh -c "[ $rc = 1 ] && grep -q 'stopped (SIGUSR1) before any example was trained: no model saved, no checkpoint taken (run it again without --resume)' $T/early.log && ! [ -e $T/early/model ] && ! ls -d $T/ckearly/ckpt-* > /dev/null 2>&1 && grep -q 'examples 0 .* train_ne -  ' $T/early.log && ! grep -qi nan $T/early.log"
# a stop once the training has ended (here in the final eval) stops nothing: status 0,
# no stopped_by, the eval whole
$BIN gen --out $T/ev --examples 1000 --eval-examples 300000 --seed 6 --config configs/tiny.ini > /dev/null 2>&1
train late data.eval=$T/ev/eval.tsv data.max_examples=20000 > $T/late.log 2>&1 &
bg=$!
for i in $(seq 1 3000); do grep -q '^train:' $T/late.log && break; sleep 0.01; done
kill -TERM $(pid_of late) 2> /dev/null
wait $bg
rc=$?
check "SIGTERM after the training (in the final eval): status 0 ($rc), saying so, no stopped_by, every eval example" \
    sh -c "[ $rc = 0 ] && grep -q '^train:' $T/late.log && grep -q '^# SIGTERM after the training had ended: the run goes on to its end (a second one: at once)' $T/late.log && ! grep -q stopped_by $T/late/metrics.json && [ '$(json eval_examples $T/late/metrics.json)' = 300000 ]"
# a resume from one directory into a checkpoint.dir holding another run's checkpoints is
# refused (it numbered its own on and deleted them); one checkpoint named is told its parent
train otherA trainer.worker_threads=1 checkpoint.dir=$T/ckoA data.max_examples=3000 > /dev/null 2>&1
train otherB trainer.worker_threads=1 checkpoint.dir=$T/ckoB data.max_examples=3000 > /dev/null 2>&1
EXTRA="--resume $T/ckoA" train otherA2 trainer.worker_threads=1 checkpoint.dir=$T/ckoB > $T/otherA2.log 2>&1
rc=$?
EXTRA="--resume $(ls -d $T/ckoA/ckpt-* | tail -1)" train otherA3 trainer.worker_threads=1 > $T/otherA3.log 2>&1
rc2=$?
check "--resume A into a checkpoint.dir of another run's: refused ($rc), B's kept; one checkpoint named: its parent advised ($rc2), no lock left in it" \
    sh -c "[ $rc = 1 ] && grep -q -- '--resume $T/ckoA writes its own checkpoints into checkpoint.dir = $T/ckoB, which holds another run.s' $T/otherA2.log && [ \$(ls -d $T/ckoB/ckpt-* | wc -l) = 1 ] && [ $rc2 = 2 ] && grep -q -- 'is one checkpoint; --resume takes the checkpoint.dir that holds it .*: --resume $T/ckoA\$' $T/otherA3.log && ! ls -a $T/ckoA/ckpt-*/ | grep -q lock"
# the same resume again (a requeue's command): checkpoint.dir holds this run's newer
# checkpoints (same run id), which it names, not "another run's"
EXTRA="--resume $T/ckoA" train otherA4 trainer.worker_threads=1 checkpoint.dir=$T/ckoC data.max_examples=6000 > /dev/null 2>&1
EXTRA="--resume $T/ckoA" train otherA4 trainer.worker_threads=1 checkpoint.dir=$T/ckoC data.max_examples=6000 > $T/otherA5.log 2>&1
rc=$?
check "the same --resume A into its own checkpoint.dir again: told it holds this run's newer checkpoints, --resume it ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'checkpoint.dir = $T/ckoC holds this run.s newer checkpoints (written after $T/ckoA was resumed): --resume $T/ckoC continues from them' $T/otherA5.log"
# a resume refused for its model's shape keeps the earlier run's model and metrics
train keep trainer.worker_threads=1 checkpoint.dir=$T/ckkeep data.max_examples=3000 > /dev/null 2>&1
EXTRA=--resume train keep trainer.worker_threads=1 checkpoint.dir=$T/ckkeep model.bottom=13-64-8 > $T/keep2.log 2>&1
rc=$?
check "a resume refused for its model's widths ($rc): the earlier model and metrics.json kept" \
    sh -c "[ $rc = 1 ] && grep -q 'dense-0.bin: a model of bottom 13-32-8' $T/keep2.log && [ -s $T/keep/model/dense.bin ] && [ -s $T/keep/model/tables.bin ] && [ -s $T/keep/metrics.json ]"
# eval of a damaged checkpoint: refused as a resume refuses it, named; through its
# checkpoint.dir, the refusal said (not a missing dense.bin)
train dmg trainer.worker_threads=1 checkpoint.dir=$T/ckdmg data.max_examples=3000 > /dev/null 2>&1
DMG=$(ls -d $T/ckdmg/ckpt-* | tail -1)
printf 'XXXX' | dd of=$DMG/dense-0.bin bs=1 seek=200 conv=notrunc 2> /dev/null
$BIN eval configs/tiny.ini --set data.eval=$T/d/eval.tsv --model $DMG > $T/dmg1.log 2>&1
rc=$?
$BIN eval configs/tiny.ini --set data.eval=$T/d/eval.tsv --model $T/ckdmg > $T/dmg2.log 2>&1
check "eval of a damaged checkpoint ($rc), or of its checkpoint.dir ($?): refused, naming the part" \
    sh -c "[ $rc = 1 ] && grep -q 'dense-0.bin: [0-9]* bytes (hash [0-9a-f]*), the MANIFEST says' $T/dmg1.log && ! grep -q '^eval:' $T/dmg1.log && grep -q -- '--model $T/ckdmg: .*no complete checkpoint' $T/dmg2.log"
# a resume under a data.max_examples below the checkpoint's count: nothing trained, and
# said so (it said the checkpoint had trained on all of data.train)
train cap trainer.worker_threads=1 checkpoint.dir=$T/ckcap data.max_examples=3000 > /dev/null 2>&1
EXTRA=--resume train cap2 trainer.worker_threads=1 checkpoint.dir=$T/ckcap data.max_examples=2000 > $T/cap2.log 2>&1
check "a resume under a lower data.max_examples: nothing left, the cap named ($?)" \
    sh -c "grep -q '^# nothing left to train: .* had trained 3000 examples, at or past data.max_examples = 2000 (raise it to train on)' $T/cap2.log"
# a file its MANIFEST does not list makes a checkpoint no complete one (a stray reader-1.pos
# was taken for a cluster job's)
cp -r $T/ckcap $T/ckstray && cp $(ls -d $T/ckstray/ckpt-* | tail -1)/reader-0.pos $(ls -d $T/ckstray/ckpt-* | tail -1)/reader-1.pos
EXTRA="--resume $T/ckstray" train stray trainer.worker_threads=1 checkpoint.dir= > $T/stray.log 2>&1
check "a checkpoint holding a file its MANIFEST does not list: skipped, naming it ($?)" \
    sh -c "grep -q 'skipping checkpoint .*: holds reader-1.pos, which its MANIFEST does not list' $T/stray.log"
# a MANIFEST ending in a bare "end" (no hash of its lines) whose count was edited: refused,
# named, not read as complete
cp -r $T/ckcap $T/ckbare && BARE=$(ls -d $T/ckbare/ckpt-* | tail -1)
sed -i 's/^meta examples .*/meta examples 1000/; s/^end .*/end/' $BARE/MANIFEST
$BIN eval configs/tiny.ini --set data.eval=$T/d/eval.tsv --model $BARE > $T/bare.log 2>&1
check "a MANIFEST ending in a bare end, its count edited: refused ($?), naming it" \
    sh -c "grep -q '$BARE/MANIFEST: ends in a bare \"end\", with no hash of its lines' $T/bare.log && ! grep -q '^eval:' $T/bare.log"
# a resume into another run's output.dir: that run's rows are not spliced before its own
train splice trainer.worker_threads=1 data.max_examples=20000 optim.dense_lr=0.5 output.log_interval_s=0.02 > /dev/null 2>&1
train spliceck trainer.worker_threads=1 checkpoint.dir=$T/cksplice data.max_examples=3000 > /dev/null 2>&1
EXTRA="--resume $T/cksplice" train splice trainer.worker_threads=1 data.max_examples=6000 output.log_interval_s=0.02 > $T/splice2.log 2>&1
check "a resume into another run's output.dir: its CSVs started anew, said ($?)" \
    sh -c "grep -q '^# $T/splice/progress.csv and eval.csv: not of the checkpoint.s run, started anew' $T/splice2.log && [ \$(awk -F, 'NR > 1 && \$2 < 3000' $T/splice/progress.csv | wc -l) = 0 ] && [ \$(wc -l < $T/splice/eval.csv) = 2 ]"
# a second SIGINT or SIGTERM ends it at once: nothing written at its end
train stop2 trainer.worker_threads=1 > $T/stop3.log 2>&1 &
bg=$!
first_line $T/stop3.log
p=$(pid_of stop2); kill -INT $p; kill -TERM $p
wait $bg
rc=$?
check "SIGINT then SIGTERM: it ends at once, by the signal ($rc), no metrics.json" \
    sh -c "[ $rc = 130 -o $rc = 143 ] && ! [ -e $T/stop2/metrics.json ]"

touch $T/afile
train nockdir checkpoint.dir=$T/afile/ck > $T/nockdir.log 2>&1
check "a checkpoint.dir that cannot be made is refused before training, naming it" \
    sh -c "[ $? != 0 ] && grep -q 'checkpoint.dir = $T/afile/ck cannot hold checkpoints: .*Not a directory (checked before training)' $T/nockdir.log && ! [ -e $T/nockdir/progress.csv ]"
cp -r $T/ck $T/ck-done # its newest: the end of the data
EXTRA="--resume $T/ck-done" train doneagain trainer.worker_threads=1 > $T/doneagain.log 2>&1
check "resuming a run that had trained on all its data says there is nothing left to train" \
    sh -c "[ $? = 0 ] && grep -q '^# nothing left to train: $T/ck-done/ckpt-[0-9]* had trained on all of data.train ($N examples)' $T/doneagain.log && [ \"$(json examples $T/doneagain/metrics.json)\" = $N ]"
check "...and writes no new checkpoint (the older ones stay)" sh -c "[ \"\$(ls $T/ck-done | tr '\n' ' ')\" = \"$(ls $T/ck | tr '\n' ' ')\" ]"

# 2 trainers whose replicas differ: a resume with nothing left keeps the model as it was (the
# shadow threads' rounds changed it), and eval of the checkpoint under sync.output = average
# scores the replicas' mean, as the run's model
train nl2 job.trainers=2 sync.algo=ma sync.output=average checkpoint.dir=$T/nlck > $T/nl2.log 2>&1
cp $T/nl2/model/dense.bin $T/nl2-dense.bin
EXTRA="--resume" train nl2 job.trainers=2 sync.algo=ma sync.output=average checkpoint.dir=$T/nlck > $T/nl2b.log 2>&1
rc=$?
check "2 trainers, a resume of the final checkpoint with nothing left to train: the same model and syncs ($(json syncs $T/nl2/metrics.json))" \
    sh -c "[ $rc = 0 ] && grep -q '^# nothing left to train' $T/nl2b.log && cmp -s $T/nl2/model/dense.bin $T/nl2-dense.bin && grep -q '^train: .* syncs $(json syncs $T/nl2/metrics.json) ' $T/nl2.log"
$BIN eval configs/tiny.ini --model $T/nlck --set data.eval=$T/d/eval.tsv --set sync.output=average --predictions $T/nlck.pred > $T/nlev.log 2>&1
$BIN eval configs/tiny.ini --model $T/nl2 --set data.eval=$T/d/eval.tsv --predictions $T/nl2.pred > /dev/null 2>&1
check "...the final checkpoint's mean scores every example as the saved model does" cmp -s $T/nlck.pred $T/nl2.pred
check "eval of a checkpoint under sync.output = average: the replicas' mean, the run's NE ($(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/nlev.log) vs $(json eval_ne $T/nl2/metrics.json))" \
    sh -c "grep -q '^# model: the mean of its 2 trainers' $T/nlev.log && awk -v a=\$(sed -n 's/.*\"eval_ne\": \([0-9.]*\).*/\1/p' $T/nlev.log) -v b=$(json eval_ne $T/nl2/metrics.json) 'BEGIN { d = a - b; exit !(a != \"\" && d < 0.000001 && d > -0.000001) }'"

$BIN eval configs/tiny.ini --model $T/ck --set data.eval=$T/d/eval.tsv > $T/ev.log 2>&1
ENE=$(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/ev.log)
check "shadowsync eval reads a checkpoint as a model (the final one: NE $ENE)" near "$ENE" "$NE" 0.000001

# damage the newest: it is skipped for the one before, with a message
NEWEST=$(ls -d $T/ck/ckpt-* | tail -1); OLDER=$(ls -d $T/ck/ckpt-* | head -1)
truncate -s -100 $NEWEST/tables.bin
mkdir -p $T/ck/ckpt-999999; echo junk > $T/ck/ckpt-999999/x   # no MANIFEST: half written
EXTRA="--resume $T/ck" train run3 trainer.worker_threads=1 > $T/run3.log 2>&1
rc=$?
check "--resume DIR without checkpoint.dir goes on checkpointing into DIR" grep -q "^# checkpoint $T/ck/ckpt-" $T/run3.log
grep -q "^# checkpoint $T/ck/ckpt-" $T/run3.log || { ls -la $T/ck; tail -n 15 $T/run3.log; } | sed 's/^/  (run3) /'
check "a checkpoint without MANIFEST is skipped" grep -q "skipping checkpoint $T/ck/ckpt-999999: .*no MANIFEST" $T/run3.log
check "a damaged checkpoint is skipped, naming the part" grep -q "skipping checkpoint $NEWEST: .*tables.bin" $T/run3.log
check "...and the one before is resumed, every example once" sh -c "[ $rc = 0 ] && grep -q 'resuming from $OLDER' $T/run3.log && [ \"$(json examples $T/run3/metrics.json)\" = $N ]"
mkdir -p $T/ckmeta && cp -r $(dirname $(ls $T/ck/ckpt-*/MANIFEST | tail -1)) $T/ckmeta/ && sed -i 's/^meta examples .*/meta examples -5/' $T/ckmeta/*/MANIFEST
$BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/meta --resume $T/ckmeta > $T/meta.log 2>&1
check "a MANIFEST whose figures are no counts is refused, naming the line" \
    sh -c "[ $? != 0 ] && grep -q 'MANIFEST: meta examples = -5 is no count' $T/meta.log"
# a count changed in a meta line (still a count): the MANIFEST's own hash catches it
mkdir -p $T/ckflip && cp -r $(dirname $(ls $T/ck/ckpt-*/MANIFEST | tail -1)) $T/ckflip/ && sed -i 's/^meta examples \([0-9]*\)$/meta examples \11/' $T/ckflip/*/MANIFEST
$BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/flip --resume $T/ckflip > $T/flip.log 2>&1
rc=$?
check "a MANIFEST whose meta line was changed is refused as damaged ($rc)" \
    sh -c "[ $rc != 0 ] && grep -q '^meta examples [0-9]*1$' $T/ckflip/*/MANIFEST && grep -q 'MANIFEST: its lines do not match their hash' $T/flip.log"
grep -q 'MANIFEST: its lines do not match their hash' $T/flip.log || tail -n 5 $T/flip.log | sed 's/^/  (flip) /'
$BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --resume $T/d > $T/none.log 2>&1
rc=$?
check "--resume with no checkpoint: a clear error" sh -c "[ $rc != 0 ] && grep -q 'no checkpoint to resume from' $T/none.log"
$BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --resume $T/nosuch > $T/nosuch.log 2>&1
check "--resume naming a directory that is not there: a clear error" \
    sh -c "[ $? != 0 ] && grep -q -- '--resume $T/nosuch: no such checkpoint directory' $T/nosuch.log"
BEFORE=$(ls $T/ck | tr '\n' ' ')
train fresh trainer.worker_threads=1 checkpoint.dir=$T/ck data.max_examples=1000 > $T/fresh.log 2>&1
rc=$?
check "a run without --resume on a checkpoint.dir of an earlier run's: refused, naming the newest, nothing touched" \
    sh -c "[ $rc != 0 ] && grep -q \"checkpoint.dir = $T/ck holds an earlier run's checkpoints ($T/ck/ckpt-[0-9]* the newest complete one): continue that run with --resume\" $T/fresh.log && [ \"$BEFORE\" = \"\$(ls $T/ck | tr '\\n' ' ')\" ] && ! [ -e $T/fresh ]"
mkdir -p $T/ckhalf/ckpt-000005 # unfinished (no MANIFEST): nothing to lose, nothing to resume
train half trainer.worker_threads=1 checkpoint.dir=$T/ckhalf data.max_examples=1000 > $T/half.log 2>&1
check "a checkpoint.dir holding only an unfinished checkpoint is no earlier run's: the run goes on" test $? = 0
EXTRA="--resume $T/ck" train again trainer.worker_threads=1 checkpoint.dir= > $T/again.log 2>&1
rc=$?
check "--resume DIR with checkpoint.dir set empty: resumes, writes no checkpoint" \
    sh -c "[ $rc = 0 ] && grep -q 'resuming from $T/ck/' $T/again.log && ! grep -q '^# checkpoint ' $T/again.log"

# a checkpoint.dir that can never hold one is refused before training (one that fails
# later, a full disk below, is reported while training goes on)
train ro checkpoint.dir=/proc/nope checkpoint.interval_s=0.2 data.max_examples=50000 > $T/ro.log 2>&1
rc=$?
check "unwritable checkpoint.dir: refused before training, naming it" \
    sh -c "[ $rc != 0 ] && grep -q 'checkpoint.dir = /proc/nope cannot hold checkpoints' $T/ro.log && ! [ -e $T/ro/progress.csv ]"

# several trainers, foreground MA: pausing for checkpoints does not hang; resume with fewer trainers
train fg job.trainers=2 trainer.worker_threads=2 sync.algo=ma sync.mode=foreground sync.gap=3 \
    checkpoint.dir=$T/ckfg checkpoint.interval_s=0.1 > $T/fg.log 2>&1
rc=$?
check "2 trainers x 2 workers, foreground ma, checkpoints every 0.1 s: finishes" sh -c "[ $rc = 0 ] && [ \"$(json checkpoints $T/fg/metrics.json)\" -ge 3 ] && [ \"$(json examples $T/fg/metrics.json)\" = $N ]"
rm -rf $T/ckfg/ckpt-*; # resume a mid-run checkpoint of 2 trainers with 1
(train fg2 job.trainers=2 sync.algo=ma checkpoint.dir=$T/ckfg checkpoint.interval_s=0.3 > $T/fg2.log 2>&1 &)
wait_ckpt $T/ckfg; pkill -9 -f "output.dir=$T/fg2"; sleep 0.3
EXTRA=--resume train fg3 job.trainers=1 checkpoint.dir=$T/ckfg > $T/fg3.log 2>&1
rc=$?
check "a checkpoint of 2 trainers resumes with 1, every example once" sh -c "[ $rc = 0 ] && grep -q 'dense vectors reassigned' $T/fg3.log && [ \"$(json examples $T/fg3/metrics.json)\" = $N ]"

# the sync state is in a mid-run snapshot: the EASGD center, each trainer's
# BMUF global model and momentum (the final one, after the final sync, needs none)
for algo in easgd bmuf; do
    rm -rf $T/cks
    train s-$algo job.trainers=2 sync.algo=$algo data.max_examples=60000 checkpoint.dir=$T/cks \
        checkpoint.interval_s=0.05 > $T/s.log 2>&1
    if [ $algo = easgd ]; then want='^part center.bin '; else want='^part sync-1-1.bin '; fi
    check "$algo: a mid-run checkpoint holds its sync state" sh -c "cat $T/cks/ckpt-*/MANIFEST | grep -q '$want'"
    EXTRA="--resume $T/cks" train s2-$algo job.trainers=2 sync.algo=$algo data.max_examples=60000 > $T/s2.log 2>&1
    rc=$?
    check "$algo: resumes from it" sh -c "[ $rc = 0 ] && [ \"$(json examples $T/s2-$algo/metrics.json)\" = 60000 ]"
done

# a full disk: checkpoint.dir on a tmpfs with room for one checkpoint of
# this model (~1 MB) but not two, mounted in a private mount namespace (as
# root, or in a user namespace); the first checkpoint is written, the later
# ones fail for want of space, training goes on to its end (non-zero: its
# final checkpoint failed too), no half-written part is left, and the good
# one resumes
if unshare -rm true 2>/dev/null; then
    mkdir -p $T/small
    unshare -rm sh -c "mount -t tmpfs -o size=1600k tmpfs $T/small || exit 9
        timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
            --set output.dir=$T/fulldisk --set checkpoint.dir=$T/small/ck --set checkpoint.interval_s=0.2 \
            --set trainer.worker_threads=1 --set data.max_examples=150000 > $T/full1.log 2>&1
        echo \$? > $T/full1.rc
        ls $T/small/ck > $T/full.ls
        timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
            --set output.dir=$T/fulldisk2 --set trainer.worker_threads=1 --set data.max_examples=150000 \
            --resume $T/small/ck > $T/full2.log 2>&1
        echo \$? > $T/full2.rc"
    rc=$?
    check "full disk: the tmpfs was mounted" test $rc != 9
    check "full disk: reported ('No space left'), training goes on to its end" sh -c "grep -q 'checkpoint failed, training goes on.*No space left' $T/full1.log && [ \"$(json examples $T/fulldisk/metrics.json)\" = 150000 ] && [ \"$(json checkpoint_failures $T/fulldisk/metrics.json)\" -ge 1 ]"
    check "full disk: the final checkpoint failed too, so the run ends non-zero, saying so" sh -c "[ \"\$(cat $T/full1.rc)\" = 1 ] && grep -q \"the run's final checkpoint could not be written (above): its model is saved in $T/fulldisk/model, but checkpoint.dir = $T/small/ck holds an earlier one only\" $T/full1.log"
    check "full disk: the good checkpoint is kept and no half-written one is left ($(cat $T/full.ls | tr '\n' ' '))" sh -c "grep -q '^ckpt-[0-9]*$' $T/full.ls && ! grep -q tmp $T/full.ls"
    check "full disk: the kept checkpoint resumes, every example once (status 1: its own final checkpoint fails, below)" sh -c "[ \"\$(cat $T/full2.rc)\" = 1 ] && grep -q 'resuming from $T/small/ck/ckpt-' $T/full2.log && [ \"$(json examples $T/fulldisk2/metrics.json)\" = 150000 ]"
    check "full disk: the resumed run's final checkpoint fails, saying the one it resumed from is kept" \
        grep -q "the final checkpoint failed, the run ends without it (the one it resumed from, $T/small/ck/ckpt-[0-9]*, is kept): .*No space left" $T/full2.log
    # room for the 2 kept but not a third: the older ones go before each snapshot, said once
    # (every snapshot after the first 2 failed for room, and a resume lost all since)
    unshare -rm sh -c "mount -t tmpfs -o size=2600k tmpfs $T/small || exit 9
        timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval= \
            --set output.dir=$T/room --set checkpoint.dir=$T/small/ck3 --set checkpoint.interval_s=0.2 \
            --set trainer.worker_threads=1 --set data.epochs=4 > $T/room.log 2>&1
        echo \$? > $T/room.rc
        ls $T/small/ck3 > $T/room.ls
        grep -h '^meta examples' $T/small/ck3/ckpt-*/MANIFEST | sort -k3 -n | tail -n 1 > $T/room.last"
    check "room for 2 snapshots, not 3: each snapshot is written (the older ones removed first, said once), the last holds the whole run ($(cat $T/room.ls | tr '\n' ' '))" \
        sh -c "[ \"\$(cat $T/room.rc)\" = 0 ] && ! grep -q 'checkpoint failed' $T/room.log && [ \$(grep -c 'has room for one snapshot more only without its older ones' $T/room.log) = 1 ] && grep -q 'ckpt-00000[4-9]\|ckpt-0000[1-9]' $T/room.ls && grep -q 'meta examples $((4 * N))\$' $T/room.last"
    # an output.dir that fills up during the training: the model's save fails at the end, and
    # the message says the final checkpoint holds it and how a resume saves it
    unshare -rm sh -c "mount -t tmpfs -o size=2600k tmpfs $T/small || exit 9
        timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval= \
            --set output.dir=$T/small/out --set checkpoint.dir=$T/ckfill --set trainer.worker_threads=1 \
            --set data.epochs=3 --set output.log_interval_s=0.1 > $T/fill.log 2>&1 &
        p=\$!
        for i in \$(seq 1 400); do grep -q '^\\[ *[0-9.]*s\\] examples' $T/fill.log && break; sleep 0.025; done
        dd if=/dev/zero of=$T/small/fill bs=64k > /dev/null 2>&1
        wait \$p; echo \$? > $T/fill.rc
        rm $T/small/fill
        timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval= \
            --set output.dir=$T/small/out --set trainer.worker_threads=1 --set data.epochs=3 \
            --resume $T/ckfill > $T/fill2.log 2>&1
        echo \$? >> $T/fill.rc
        [ -s $T/small/out/model/dense.bin ] && echo saved >> $T/fill.rc"
    check "a model that cannot be saved after the training: the final checkpoint named, and a --resume saves it ($(cat $T/fill.rc | tr '\n' ' '))" \
        sh -c "[ \"\$(cat $T/fill.rc | tr '\n' ' ')\" = '1 0 saved ' ] && grep -q 'the final checkpoint $T/ckfill/ckpt-[0-9]* holds the model: once output.dir can be written, .shadowsync train CONFIG ... --resume $T/ckfill. saves it' $T/fill.log"
    # an output.dir with no room for the model saved at the end: refused before training
    unshare -rm sh -c "mount -t tmpfs -o size=300k tmpfs $T/small || exit 9
        timeout -k 10 300 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
            --set output.dir=$T/small/run > $T/fullout.log 2>&1
        echo \$? > $T/fullout.rc
        [ -e $T/small/run/progress.csv ] && echo trained >> $T/fullout.rc"
    check "an output.dir too small for the model: refused before training, with the room and the need (told apart: $(grep -o 'has [0-9.]* MB free' $T/fullout.log))" \
        sh -c "[ \"\$(cat $T/fullout.rc)\" = 1 ] && grep -q 'output.dir = $T/small/run has [0-9.]* MB free, and the model saved there at the end needs [0-9.]* MB' $T/fullout.log && ! grep -q 'has \\([0-9.]*\\) MB free, .* needs \\1 MB' $T/fullout.log"
    # a stop whose final checkpoint finds no room, and none written before: no resume is
    # promised, status 1 (75 would have a requeue loop on a resume that cannot be)
    # (the signal to the run itself: timeout passes one on twice, and a second ends it at once)
    # (the stop once a line shows examples trained: the first line may come before any)
    timeout -k 10 300 unshare -rm sh -c "mount -t tmpfs -o size=300k tmpfs $T/small || exit 9
        $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval= \
            --set output.dir=$T/fullstop --set checkpoint.dir=$T/small/ck --set trainer.worker_threads=1 \
            --set data.epochs=50 > $T/fullstop.log 2>&1 &
        p=\$!
        for i in \$(seq 1 400); do grep -q '^\\[.*examples [1-9]' $T/fullstop.log && break; sleep 0.025; done
        kill -TERM \$p; wait \$p; echo \$? > $T/fullstop.rc"
    check "a stop whose final checkpoint fails, none written before: status 1 ($(cat $T/fullstop.rc)), no resume promised" \
        sh -c "[ \"\$(cat $T/fullstop.rc)\" = 1 ] && grep -q 'the final checkpoint failed' $T/fullstop.log && grep -q 'stopped (SIGTERM) after [0-9]* examples, but no checkpoint could be written (the final one failed, above): no resume can continue this run' $T/fullstop.log && ! grep -q 'continues from checkpoint.dir' $T/fullstop.log"
else
    echo "SKIP full disk: no private mount namespace here (unshare -rm)"
fi
