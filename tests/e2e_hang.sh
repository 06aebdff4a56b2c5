#!/bin/sh
# Never hang (issue 30): waits that used to have no way out.
# - D1: a cluster job with reader services and periodic checkpoints whose
#   embedding PS 0 stalls (SIGSTOP) for 2 x job.rpc_timeout_s: a worker's
#   lookup fails, the worker ends, and the next checkpoint's pause used to
#   wait for ever on the prefetch that waited for room in a queue nobody
#   drained. Now the job ends within 3 x job.rpc_timeout_s + 10 s of the
#   SIGCONT, naming the PS, no process is left, and --resume trains every
#   example once.
# - D4: a pipe (FIFO) as data.train whose writer goes silent, and one as
#   data.eval with no writer: the wait is named after a few seconds, and
#   one SIGTERM ends it within 2 s: the training as at a stop (status 75,
#   its examples trained and saved), the eval failed, naming the pipe.
# - D5: the same for a file whose read never returns (a hung file system,
#   tests/slowread.c), text or a binary shard's mapping, and --resume then
#   trains every example once.
# - D6: checkpoint.dir's file system dies (its writes, opens, fsyncs never
#   return) in a periodic checkpoint, or in the final one after the stop,
#   or output.dir's in a progress line: one SIGTERM ends the run within
#   2 s, the write named; the complete checkpoints are kept, the model
#   saved where output.dir is on another mount, and --resume trains every
#   example once. A cluster job whose embedding PSs' disk dies in a save
#   ends within 2 s of a SIGUSR1 (its ranks; mpirun's kill sequence after
#   their non-zero exit adds about 2 s), naming the given-up save and the
#   PS whose part of the model cannot be written, status 75.
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
. tests/lib.sh
T=$(mktemp -d)
trap '[ -n "$KEEP" ] && echo "kept $T" || rm -rf "$T" ${O:+"$O" "$O-ck"}' EXIT
N=40000
$BIN gen --out $T/d --examples $N --eval-examples 2000 --seed 5 --config configs/tiny.ini > /dev/null 2>&1
T0=$(date +%s)
step() { echo "# $(( $(date +%s) - T0 )) s: $*"; }
RPC=3
JOB="job.trainers=2 job.embedding_ps=2 job.sync_ps=1 job.readers=1 sync.algo=easgd
     trainer.batch_size=2 job.rpc_timeout_s=$RPC sync.timeout_s=60 checkpoint.interval_s=2"
sjob() { # NAME [section.key=value ...]; EXTRA: more arguments (--resume)
    _n=$1; shift
    _sets=""; for _s in $JOB "$@"; do _sets="$_sets --set $_s"; done
    timeout -k 10 300 tools/submit configs/tiny.ini --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.dir=$T/$_n $_sets $EXTRA > $T/$_n.log 2>&1
}
pid_of() { for p in $(pgrep -f "output.dir=$T/$1 "); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return; }; done; }

ms() { echo $(( $(date +%s%N) / 1000000 )); }
# stop1 NAME PATTERN CMD...: CMD in the background until its log
# ($T/NAME.log) says PATTERN, then one SIGTERM: sets took (ms from it to
# CMD's end) and rc
stop1() {
    _n=$1; _pat=$2; shift 2
    "$@" > $T/$_n.log 2>&1 &
    _p=$!
    for _i in $(seq 1 200); do grep -q "$_pat" $T/$_n.log && break; sleep 0.1; done
    _t0=$(ms); kill -TERM $_p
    for _i in $(seq 1 100); do kill -0 $_p 2> /dev/null || break; sleep 0.05; done
    took=$(( $(ms) - _t0 )); kill -9 $_p 2> /dev/null; wait $_p; rc=$?
}
# d4 NAME KEY WRITER: a run whose KEY is the FIFO $T/NAME.fifo, fed by
# WRITER (none: no writer), stopped by one SIGTERM once it says it waits
d4() {
    _f=$T/$1.fifo; mkfifo $_f; _w=
    [ "$3" != none ] && { sh -c "$3; exec sleep 60" > $_f & _w=$!; }
    stop1 $1 "$_f: a pipe with nothing to read" $BIN train configs/tiny.ini \
        --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set $2=$_f \
        --set output.dir=$T/$1
    [ -n "$_w" ] && kill $_w 2> /dev/null
}
# d5 NAME FILE AFTER [--set ...]: a run whose FILE's reads hang for ever
# (tests/slowread.c: not even a signal ends them, as on a hard-mounted NFS
# share) past its first AFTER bytes, stopped by one SIGTERM once it says it
# waits
d5() {
    _n=$1; _f=$(realpath $2); _a=$3; shift 3
    stop1 $_n "$_f: a read has not returned for 3 s" env SLOWREAD_PATH=$_f SLOWREAD_AFTER=$_a \
        LD_PRELOAD=$BUILD/tests/libslowread.so $BIN train configs/tiny.ini \
        --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/$_n \
        --set checkpoint.dir=$T/$_n-ck --set checkpoint.interval_s=1 \
        --set data.collision_check_batches=0 "$@" # (the start-up pass would meet the hang first)
}
# d5_resumed NAME [--set ...]: d5's NAME resumed (no hang): sets rc
d5_resumed() {
    _n=$1; shift
    $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
        --set output.dir=$T/$_n-r --set checkpoint.dir=$T/$_n-ck --resume $T/$_n-ck "$@" > $T/$_n-r.log 2>&1
    rc=$?
}
step "D4: a FIFO as data.train whose writer goes silent after 3000 lines"
d4 d4t data.train "head -3000 $T/d/train.tsv"
check "D4: data.train's silent pipe is named, one SIGTERM ends the run in ${took} ms (bound 2000), status 75 ($rc)" \
    sh -c "grep -q 'a pipe with nothing to read for 3 s: waiting for its writer to go on' $T/d4t.log && [ $took -le 2000 ] && [ $rc = 75 ]"
check "D4: its 3000 examples trained, the model saved, stopped_by SIGTERM" \
    sh -c "[ '$(json examples $T/d4t/metrics.json)' = 3000 ] && grep -q '\"stopped_by\": \"SIGTERM\"' $T/d4t/metrics.json && [ -s $T/d4t/model/dense.bin ]"
step "D4: a FIFO with no writer as data.eval"
d4 d4e data.eval none
check "D4: data.eval's pipe with no writer is named, one SIGTERM ends the run in ${took} ms (bound 2000), status 1 ($rc)" \
    sh -c "grep -q 'a pipe with nothing to read for 3 s: waiting for a writer' $T/d4e.log && [ $took -le 2000 ] && [ $rc = 1 ]"
check "D4: the eval is named as stopped, the model kept" \
    sh -c "grep -q 'data.eval: $T/d4e.fifo: stopped (SIGTERM) while waiting on it, a pipe, after 0 examples: not scored; the training.s model and figures' $T/d4e.log && [ -s $T/d4e/model/dense.bin ]"

# d5_check NAME FILE: the checks of a d5 run of data.train and its resume
d5_check() {
    _c=$1; M=$T/$1/metrics.json; E=$(json examples $M 2>/dev/null)
    check "D5 $1: the hung read is named, one SIGTERM ends the run in ${took} ms (bound 2000), status 75 ($rc)" \
        sh -c "grep -q '$2: stopped (SIGTERM) while a read of it had not returned' $T/$1.log && [ $took -le 2000 ] && [ $rc = 75 ]"
    check "D5 $1: what it read before is trained and saved (${E:-no} examples), stopped_by SIGTERM" \
        sh -c "[ '${E:-0}' -gt 0 ] && [ '${E:-0}' -lt $N ] && grep -q '\"stopped_by\": \"SIGTERM\"' $M && [ -s $T/$1/model/dense.bin ]"
    shift 2
    d5_resumed $_c "$@"
    E=$(json examples $T/$_c-r/metrics.json 2>/dev/null)
    check "D5 $_c: --resume trains every example once (${E:-none} of $N)" sh -c "[ $rc = 0 ] && [ '$E' = $N ]"
}
step "D5: data.train's file system hangs in a read after 4 MiB"
d5 d5t $T/d/train.tsv 4194304
d5_check d5t train.tsv
step "D5: binary shards: a page of data.train's mapping hangs after 8 MiB"
$BIN convert configs/tiny.ini --in $T/d/train.tsv --out $T/bin > /dev/null 2>&1
$BIN convert configs/tiny.ini --in $T/d/eval.tsv --out $T/binev > /dev/null 2>&1
SHARDS="--set data.format=binary --set data.train=$T/bin --set data.eval=$T/binev"
d5 d5s $T/bin/part-00000.bin 8388608 $SHARDS
d5_check d5s part-00000.bin $SHARDS
step "D5: data.eval's file system hangs in its second read (its first is the start-up probe's)"
d5 d5e $T/d/eval.tsv 1
check "D5: data.eval's hung read is named, one SIGTERM ends the run in ${took} ms (bound 2000), status 1 ($rc)" \
    sh -c "grep -q 'data.eval: .*eval.tsv: stopped (SIGTERM) while waiting on it, a read that had not returned, after [0-9]* examples: not scored' $T/d5e.log && [ $took -le 2000 ] && [ $rc = 1 ] && [ -s $T/d5e/model/dense.bin ]"

# d6 NAME DIR AFTER PATTERN [--set ...]: a run (output.dir $T/NAME,
# checkpoint.dir $T/NAME-ck) whose DIR's file system dies once AFTER bytes
# were written there, or once $T/NAME.kill exists, stopped by one SIGTERM
# once its log says PATTERN
d6() {
    _n=$1; _d=$2; _a=$3; _p=$4; shift 4
    stop1 $_n "$_p" env SLOWWRITE_DIR=$_d SLOWWRITE_AFTER=$_a SLOWWRITE_MARK=$T/$_n.dead \
        SLOWWRITE_KILL=$T/$_n.kill LD_PRELOAD=$BUILD/tests/libslowread.so $BIN train \
        configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
        --set output.dir=$T/$_n --set checkpoint.dir=$T/$_n-ck --set data.collision_check_batches=0 \
        --set data.epochs=10 "$@"
}
# output.dir on another mount than $T's (whose file system the run sees die)
O=/dev/shm/ss-hang-$$
[ -d /dev/shm ] && [ "$(stat -c %d /dev/shm)" != "$(stat -c %d $T)" ] || O=
step "D6: checkpoint.dir's file system dies in the second checkpoint${O:+ (output.dir on /dev/shm)}"
SLOW="--set trainer.batch_size=2 --set trainer.worker_threads=1" # (~40k examples/s: the data
# outlasts the hang's 3 s, whose note the SIGTERM waits for; the resumes run at full speed)
d6 d6p $T/d6p-ck 1500000 "a write has made no progress for 3 s" --set checkpoint.interval_s=1 \
    --set data.epochs=8 $SLOW ${O:+--set output.dir=$O}
check "D6: the hung write is named, one SIGTERM ends the run in ${took} ms (bound 2000), status 75 ($rc)" \
    sh -c "[ -f $T/d6p.dead ] && grep -q 'ckpt-000002.tmp/tables.bin: stopped (SIGTERM) while a write to it had made no progress' $T/d6p.log && [ $took -le 2000 ] && [ $rc = 75 ]"
check "D6: the checkpoint before it is kept, the run's resume names it" \
    sh -c "[ -s $T/d6p-ck/ckpt-000001/MANIFEST ] && [ ! -e $T/d6p-ck/ckpt-000002 ] && grep -q 'continues from checkpoint.dir = $T/d6p-ck, its last good checkpoint' $T/d6p.log"
if [ -n "$O" ]; then
    check "D6: the model is saved on the other mount, stopped_by SIGTERM" \
        sh -c "[ -s $O/model/dense.bin ] && grep -q '\"stopped_by\": \"SIGTERM\"' $O/metrics.json"
else
    check "D6: the model on the same mount is named as not saved" grep -q "the model is not saved" $T/d6p.log
fi
rm -rf "$O"
d5_resumed d6p --set data.epochs=8
E=$(json examples $T/d6p-r/metrics.json 2>/dev/null)
check "D6: --resume trains every example once (${E:-none} of $((8 * N)))" sh -c "[ $rc = 0 ] && [ '$E' = $((8 * N)) ]"
step "D6: checkpoint.dir's file system dies in the final checkpoint, after the stop"
# (the write is given up past 1.0 s without progress: a loaded machine says 1.1 or 1.2)
d6 d6f $T/d6f-ck 500000 "examples .*eps" --set checkpoint.interval_s=0 --set data.epochs=8 $SLOW
check "D6: one SIGTERM ends the run in ${took} ms (bound 2000): the final checkpoint's hung write given up, nothing kept, status 1 ($rc)" \
    sh -c "[ -f $T/d6f.dead ] && grep -q 'the final checkpoint failed, the run ends without it (none has been written yet): .*stopped (SIGTERM) while a write to it had made no progress for 1\.[0-9] s' $T/d6f.log && grep -q 'neither a checkpoint nor the model could be written (above): nothing of this run is kept' $T/d6f.log && [ $took -le 2000 ] && [ $rc = 1 ]"

step "D6: output.dir's file system dies in a progress line after the first checkpoint"
CK=${O:-$T/d6o}-ck # (on another mount where there is one: the final checkpoint is written)
( for i in $(seq 1 200); do grep -q "# checkpoint" $T/d6o.log 2>/dev/null && break; sleep 0.1; done
  touch $T/d6o.kill ) &
d6 d6o $T/d6o 100000000000 "progress.csv: a write has made no progress for 3 s" \
    --set checkpoint.dir=$CK --set checkpoint.interval_s=1 --set data.epochs=16 $SLOW
check "D6: the hung progress line is named, one SIGTERM ends the run in ${took} ms (bound 2000), status 75 ($rc)" \
    sh -c "[ -f $T/d6o.dead ] && grep -q 'the model is not saved (.*), nor the run.s figures: .*d6o/model: not written: a write to .*d6o/progress.csv made no progress' $T/d6o.log && [ $took -le 2000 ] && [ $rc = 75 ]"
$BIN train configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/d6o-r --set checkpoint.dir=$CK --set data.epochs=16 --resume $CK > $T/d6o-r.log 2>&1
rc=$?; E=$(json examples $T/d6o-r/metrics.json 2>/dev/null)
check "D6: --resume from its checkpoints trains every example once (${E:-none} of $((16 * N)))" \
    sh -c "[ $rc = 0 ] && [ '$E' = $((16 * N)) ]"
rm -rf "$O" "$O-ck"

step "D6: a cluster job whose services' checkpoint.dir dies in a save; SIGUSR1 to tools/submit"
# (job.rpc_timeout_s = 30: the save's RPC would wait that long; the stop gives the
# service's write up within a second instead. The master then asks the PSs for the
# model's tables: refused at once on the hung mount.)
env SLOWWRITE_DIR=$T/d6c-ck SLOWWRITE_AFTER=700000 LD_PRELOAD=$PWD/$BUILD/tests/libslowread.so \
    tools/submit configs/tiny.ini --set job.bind=127.0.0.1 --set job.trainers=2 \
    --set job.embedding_ps=2 --set job.sync_ps=1 --set job.readers=1 --set sync.algo=easgd \
    --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/d6c --set checkpoint.dir=$T/d6c-ck --set checkpoint.interval_s=1 \
    --set job.rpc_timeout_s=30 --set data.epochs=32 > $T/d6c.log 2>&1 &
sub=$!
for i in $(seq 1 300); do grep -q "tables-ps[01].bin: a write has made no progress for 3 s" $T/d6c.log && break; sleep 0.1; done
t0=$(ms); kill -USR1 $sub
ranks=-1
for i in $(seq 1 600); do
    [ $ranks = -1 ] && ! pgrep -f "^[^ ]*/shadowsync train .*output.dir=$T/d6c " > /dev/null &&
        ranks=$(( $(ms) - t0 ))
    kill -0 $sub 2> /dev/null || break; sleep 0.05
done
took=$(( $(ms) - t0 )); wait $sub; rc=$?
alive=$(pgrep -f "output.dir=$T/d6c " | wc -l); pkill -9 -f "output.dir=$T/d6c "
# (a rank's non-zero exit sets off Open MPI's kill sequence, about 2 s: tools/mpiguard.py)
check "D6: the job's ranks end ${ranks} ms after the SIGUSR1 (bound 2000), tools/submit ${took} ms (bound 5000), the service's hung write named, no process left" \
    sh -c "[ $ranks -ge 0 ] && [ $ranks -le 2000 ] && [ $took -le 5000 ] && [ $alive = 0 ] && grep -q 'save failed: .*tables-ps[01].bin: stopped (SIGUSR1) while a write to it had made no progress' $T/d6c.log"
check "D6: its last complete checkpoint is kept and named, status 75 ($rc); the model's tables asked of the PSs, not written, the service named" \
    sh -c "[ -s $T/d6c-ck/ckpt-000001/MANIFEST ] && grep -q 'continues from checkpoint.dir = $T/d6c-ck, its last good checkpoint' $T/d6c.log && [ $rc = 75 ] && grep -q 'the model is not saved (.*embedding_ps [01] (rank [23] on [^)]*) at [^ ]*: save failed: $T/d6c/model: not written' $T/d6c.log && [ ! -e $T/d6c/model/tables-ps0.bin ]"

step "D1: embedding PS 0 stalled for $((2 * RPC)) s after the second checkpoint"
# (3 passes over the data: the second checkpoint comes ~4 s in, where one pass of it
# had all but ended, and a job that ended first has nothing to stall)
(sjob d1 checkpoint.dir=$T/ck data.epochs=3 &)
for i in $(seq 1 1200); do [ -f $T/ck/ckpt-000002/MANIFEST ] && break; sleep 0.1; done
victim=$(pid_of d1 2)   # ranks: 2 trainers, then the embedding PSs
[ -n "$victim" ] && kill -STOP $victim
sleep $((2 * RPC))
[ -n "$victim" ] && kill -CONT $victim 2>/dev/null
t0=$(date +%s)
bound=$((3 * RPC + 10))
for i in $(seq 1 $((10 * bound + 100))); do pgrep -f "output.dir=$T/d1 " > /dev/null || break; sleep 0.1; done
took=$(( $(date +%s) - t0 ))
alive=$(pgrep -f "output.dir=$T/d1 " | wc -l)
if [ $alive != 0 ]; then
    ps -o pid,stat,wchan:28,args -p "$(pgrep -d, -f "output.dir=$T/d1 ")" | cut -c1-150
    pkill -9 -f "output.dir=$T/d1 "
fi
check "D1: the job ends ${took} s after the SIGCONT (bound 3 x job.rpc_timeout_s + 10 s = $bound s), no process left" \
    sh -c "[ -n '$victim' ] && [ $took -le $bound ] && [ $alive = 0 ]"
check "D1: the stalled embedding PS is named" grep -qE "embedding_ps 0 \(rank 2 on [^)]+\)" $T/d1.log
check "D1: the job did not end well (no metrics.json)" test ! -f $T/d1/metrics.json
step "D1: --resume"
EXTRA="--resume $T/ck" sjob d1-resumed checkpoint.dir=$T/ck data.epochs=3
rc=$?
M=$T/d1-resumed/metrics.json
check "D1: --resume trains every example once ($(json examples $M 2>/dev/null) of 3 x $N)" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $M 2>/dev/null)\" = $((3 * N)) ]"
echo "# the stalled job's last lines:"; tail -5 $T/d1.log | sed 's/^/#   /'
