#!/bin/sh
# Checkpoints, resume and faults of the cluster job (DESIGN §8):
# - a whole job killed with kill -9 resumes from its newest complete
#   checkpoint onto 3 embedding PSs from a checkpoint written by 2: every
#   example once, eval NE within 0.002 of an uninterrupted run;
# - each role killed in turn (embedding PS, sync PS, reader, one trainer)
#   ends the job within the RPC timeout with a message naming the rank
#   (and, for a service, its role and host); --resume then finishes the
#   data with every example counted once;
# - resuming reader services with another job.readers is refused;
# - a trainer whose worker fails mid-run (a cut gzip file) ends the job at
#   once, naming it, though the master has data left and checkpoints run;
# - a trainer that stalls (SIGSTOP) ends the job within sync.timeout_s,
#   named by a trainer that waited on it (in a collective, a checkpoint,
#   or for its progress reports), or within twice that where nothing
#   else waits with a deadline (the final eval: every rank's heartbeat);
#   a service stalled once the trainers no longer call it the same way;
#   a stalled service within
#   job.rpc_timeout_s (an embedding PS, the sync PS, a reader), named by a
#   trainer;
# - a flood of 1,100 idle tokenless connections to an embedding PS starves
#   none of the job's checkpoints (tests/flood_conns.py); a service that
#   stalls in a checkpoint's save is named within twice job.rpc_timeout_s,
#   and so is a reader service that stalls between checkpoints.
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
T=$(mktemp -d)
trap '[ -n "$KEEP" ] && echo "kept $T" || rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="/usr/bin/python3 tools/mpiguard.py mpirun --oversubscribe --bind-to none --mca btl self,vader"
export OMPI_MCA_btl=self,vader   # tools/submit's mpirun too
export MPIGUARD_GRACE_S=5         # an mpirun stuck in an abort is ended within the checks' bounds
N=200000
$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 9 --config configs/tiny.ini > /dev/null 2>&1
json() { sed -n "s/^ *\"$1\": \([^,]*\),*$/\1/p" "$2" | tr -d '"'; }
check() { what=$1; shift; if "$@"; then echo "PASS $what"; else echo "FAIL $what: $*"; failed=1; fi; }
# on a failure, or when the test runner's watchdog stops this script: the
# jobs' last lines, and when each began
failed=0; T0=$(date +%s)
dump() { for f in $T/*.log; do echo "--- $f"; tail -8 "$f"; done; }
trap 'echo "# stopped at $(( $(date +%s) - T0 )) s"; dump; exit 1' TERM
step() { echo "# $(( $(date +%s) - T0 )) s: $*"; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && d < t && d > -t) }'; }
# job NAME NP [section.key=value ...]; EXTRA: more arguments (--resume)
job() {
    jn=$1; np=$2; shift 2
    step "job $jn"
    sets=""; for s in "$@"; do sets="$sets --set $s"; done
    timeout -k 10 150 $MPIRUN -np $np $BIN train configs/tiny.ini --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.dir=$T/$jn $sets $EXTRA > $T/$jn.log 2>&1
}
# the same through tools/submit (which names a lost rank's role)
sjob() {
    jn=$1; shift
    step "job $jn (tools/submit)"
    sets=""; for s in "$@"; do sets="$sets --set $s"; done
    timeout -k 10 150 tools/submit configs/tiny.ini --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.dir=$T/$jn $sets $EXTRA > $T/$jn.log 2>&1
}
wait_ckpt() { for i in $(seq 1 300); do tail -1 $1/ckpt-*/MANIFEST 2>/dev/null | grep -q '^end' && return 0; sleep 0.05; done; return 1; }
# pid of rank R of the job writing to output.dir $T/NAME
pid_of() { for p in $(pgrep -f "output.dir=$T/$1 "); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return; }; done; }

# 1 trainer + 2 PS, no sync: one worker trains the same model wherever the rows live
job ref 3 job.embedding_ps=2
REF=$(json eval_ne $T/ref/metrics.json)
(job cut 3 job.embedding_ps=2 checkpoint.dir=$T/ck checkpoint.interval_s=0.3 &)
wait_ckpt $T/ck; sleep 0.3
pkill -9 -f "output.dir=$T/cut "; sleep 0.5
check "a whole job killed with kill -9 left a complete checkpoint" sh -c "ls $T/ck | grep -q '^ckpt-[0-9]*$' && ! [ -f $T/cut/metrics.json ]"
EXTRA="--resume $T/ck" job resumed 4 job.embedding_ps=3 checkpoint.dir=$T/ck checkpoint.interval_s=0.3
rc=$?
M=$T/resumed/metrics.json
check "resume onto 3 embedding PSs from a checkpoint by 2: exits 0" test $rc = 0
check "resume onto 3 PSs: names the checkpoint, 0 batches in flight" grep -q "resuming from $T/ck/ckpt-[0-9]*: [1-9][0-9]* examples done, 0 batches in flight" $T/resumed.log
check "resume onto 3 PSs: every example once ($(json examples $M) of $N)" test "$(json examples $M)" = $N
NE=$(json eval_ne $M)
check "resume onto 3 PSs: eval NE $NE within 0.002 of the uninterrupted run's $REF" near "$NE" "$REF" 0.002
check "a cluster checkpoint holds every rank's part" sh -c "ls \$(ls -d $T/ck/ckpt-* | tail -1) | tr '\n' ' ' | grep -q 'MANIFEST dense-0.bin reader-0.pos state-0.bin tables-ps0.bin tables-ps1.bin tables-ps2.bin'"

step "eval of the checkpoint"
$BIN eval configs/tiny.ini --model $T/ck --set data.eval=$T/d/eval.tsv > $T/ev.log 2>&1
ENE=$(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/ev.log)
check "shadowsync eval reads a cluster checkpoint (the PSs' shards) as a model: NE $ENE" near "$ENE" "$NE" 0.000001

# the job token (32 hex digits, made by the master) is never printed or written
check "the job token appears in no log, run directory or checkpoint" sh -c "! grep -rIlE '(^|[^0-9a-f])[0-9a-f]{32}([^0-9a-f]|$)' $T/ref.log $T/cut.log $T/resumed.log $T/ref $T/resumed $T/ck"

# each role killed in turn: 2 trainers + 2 PS + 1 sync PS + 2 readers, easgd
ROLES="0:trainer 2:embedding_ps 4:sync_ps 5:reader"
FULL="job.trainers=2 job.embedding_ps=2 job.sync_ps=1 job.readers=2 sync.algo=easgd job.rpc_timeout_s=2"
for rr in $ROLES; do
    rank=${rr%%:*}; role=${rr#*:}; [ $rank = 0 ] && rank=1   # trainer 1 (rank 0 is the master)
    name=kill-$role
    (sjob $name $FULL checkpoint.dir=$T/ck-$role checkpoint.interval_s=0.3 &)
    wait_ckpt $T/ck-$role; sleep 0.2
    victim=$(pid_of $name $rank)
    t0=$(date +%s)
    [ -n "$victim" ] && kill -9 $victim
    for i in $(seq 1 300); do pgrep -f "output.dir=$T/$name " > /dev/null || break; sleep 0.1; done
    took=$(( $(date +%s) - t0 ))
    alive=$(pgrep -f "output.dir=$T/$name " | wc -l)
    check "killed $role (rank $rank): the job ends within the RPC timeout ($took s)" sh -c "[ -n '$victim' ] && [ $took -le 12 ] && [ $alive = 0 ]"
    check "killed $role: a message names it by role, rank and host" grep -qE "submit: lost $role [0-9]+ \(rank $rank on [^)]+\): it exited on signal 9|$role [0-9]+ \(rank $rank on [^)]+\) at [^ ]+: .*failed" $T/$name.log
    EXTRA="--resume $T/ck-$role" sjob $name-resumed $FULL checkpoint.dir=$T/ck-$role
    rc=$?
    M=$T/$name-resumed/metrics.json
    check "killed $role: --resume finishes the data, every example once ($(json examples $M 2>/dev/null) of $N)" sh -c "[ $rc = 0 ] && [ \"$(json examples $M 2>/dev/null)\" = $N ]"
done

# a whole job of 2 trainers killed, resumed with 3 (the reader services keep their shares)
(job cut2 7 $FULL checkpoint.dir=$T/ck-t2 checkpoint.interval_s=0.3 &)
wait_ckpt $T/ck-t2; sleep 0.2
pkill -9 -f "output.dir=$T/cut2 "; sleep 0.5
EXTRA="--resume $T/ck-t2" job trainers3 8 job.trainers=3 job.embedding_ps=2 job.sync_ps=1 job.readers=2 sync.algo=easgd
rc=$?
M=$T/trainers3/metrics.json
check "a cluster checkpoint of 2 trainers resumes with 3: every example once ($(json examples $M 2>/dev/null) of $N), 3 trainers" sh -c "[ $rc = 0 ] && ! [ -f $T/cut2/metrics.json ] && grep -q 'resuming from .*ck-t2.*dense vectors reassigned' $T/trainers3.log && [ \"$(json examples $M 2>/dev/null)\" = $N ] && [ \"$(json trainers $M 2>/dev/null)\" = 3 ]"

EXTRA="--resume $T/ck-reader" job readers3 8 job.trainers=2 job.embedding_ps=2 job.sync_ps=1 job.readers=3 sync.algo=easgd
rc=$?
check "resuming reader services with another job.readers is refused, saying why" sh -c "[ $rc != 0 ] && grep -q 'another number of readers than job.readers = 3' $T/readers3.log"
EXTRA="--resume $T/ck" job readers1 4 job.embedding_ps=2 job.readers=1
rc=$?
check "resuming a job without reader services with job.readers = 1 is refused, saying why" \
    sh -c "[ $rc != 0 ] && grep -q 'was written by a job without reader services (its trainers read data.train themselves): resume with job.readers = 0' $T/readers1.log"

# a rank that stalls without exiting (SIGSTOP; nothing tells Open MPI). A
# trainer: a sync round's all-reduce, a DES exchange, the master's
# checkpoint wait and the trainers' progress reports (easgd or none, no
# checkpoints; the master stalled too) each end the job within
# sync.timeout_s, naming the wait and the trainer. A service: the calls to
# it time out (job.rpc_timeout_s) and the trainers name it, at once even
# when only the shadow thread calls it (the sync PS)
stalled() { # NAME NP VICTIM_RANK [section.key=value ...]: took, alive; AT: the log line it stops at
    name=$1; np=$2; vr=$3; shift 3
    (job $name $np job.trainers=2 trainer.batch_size=8 sync.timeout_s=3 job.rpc_timeout_s=2 "$@" &)
    for i in $(seq 1 300); do grep -q "${AT:-^\[}" $T/$name.log 2>/dev/null && break; sleep 0.05; done
    victim=$(pid_of $name $vr)
    t0=$(date +%s)
    [ -n "$victim" ] && kill -STOP $victim
    for i in $(seq 1 300); do pgrep -f "output.dir=$T/$name " > /dev/null || break; sleep 0.1; done
    took=$(( $(date +%s) - t0 ))
    alive=$(pgrep -f "output.dir=$T/$name " | wc -l)
    if [ $alive != 0 ]; then # what each process waits in, for the failure's report
        echo "# $name: $alive process(es) still there after $took s (victim ${victim:-not found}):"
        ps -o pid,stat,wchan:28,args -p "$(pgrep -d, -f "output.dir=$T/$name ")" | cut -c1-150
        pkill -9 -f "output.dir=$T/$name "
    fi
    [ -n "$victim" ] && [ $alive = 0 ]
}
stall() { # NAME NP VICTIM WHAT [section.key=value ...]
    name=$1; np=$2; vr=$3; waited=$4; shift 4
    other=$(( 1 - vr ))
    stalled $name $np $vr "$@"
    check "a stalled trainer $vr, $waited: the job ends within sync.timeout_s ($took s)" \
        sh -c "[ $? = 0 ] && [ $took -le 12 ]"
    check "a stalled trainer $vr, $waited: trainer $other names the wait and trainer $vr" \
        grep -q "^shadowsync: trainer $other (rank $other on [^)]*): $waited has waited 3 s (sync.timeout_s) for trainer $vr (rank $vr on [^)]*), which has stalled" $T/$name.log
}
stall stall-ma 4 1 "the trainers' all-reduce (a sync round)" job.embedding_ps=2 sync.algo=ma
stall stall-des 2 1 "a DES exchange (the tables' all-to-all)" job.embedding_ps=0 \
    embedding.placement=trainers
stall stall-ckpt 5 1 "the checkpoint" job.embedding_ps=2 job.sync_ps=1 sync.algo=easgd \
    checkpoint.dir=$T/ck-stall checkpoint.interval_s=0.5
stall stall-easgd 5 1 "the job's progress" job.embedding_ps=2 job.sync_ps=1 sync.algo=easgd \
    output.log_interval_s=0.5
stall stall-master 4 0 "the job's progress" job.embedding_ps=2 sync.algo=none \
    output.log_interval_s=0.5
# the master stalled in its final eval, where the others wait at the job's
# end with no deadline of their own: their heartbeat threads find it
# seconds of eval (on every core: 4 copies), so it is stopped in it
cat $T/d/train.tsv $T/d/train.tsv $T/d/train.tsv $T/d/train.tsv > $T/eval-big.tsv
AT='^train:'
stalled stall-final 4 0 job.embedding_ps=2 sync.algo=none data.max_examples=20000 \
    data.eval=$T/eval-big.tsv
ok=$?; AT=
check "a trainer stalled in the final eval: the job ends within twice sync.timeout_s ($took s)" \
    sh -c "[ $ok = 0 ] && [ $took -le 14 ] && ! grep -q '^eval:' $T/stall-final.log"
check "a trainer stalled in the final eval: trainer 1 names it" \
    grep -q "^shadowsync: trainer 1 (rank 1 on [^)]*): trainer 0 (rank 0 on [^)]*) has not been heard from for 6 s (twice sync.timeout_s)" $T/stall-final.log
# a rank stalled in the job's start (here the embedding PS, stopped while the master profiles
# the data for placement; the heartbeat starts with the roles): every other rank's guard on the
# start ends the job past twice sync.timeout_s (at least 10 s; it waited for ever)
AT='^# profiling'
stalled stall-start 3 2 job.embedding_ps=1 sync.algo=none placement.profile_batches=25000
ok=$?; AT=
check "a rank stalled in the job's start: the job ends past 10 s, saying so ($took s)" \
    sh -c "[ $ok = 0 ] && [ $took -le 25 ] && grep -q \"^shadowsync: trainer 0 (rank 0 on [^)]*): the job's start (its checks, placement, services and connections) has not ended in 10 s\" $T/stall-start.log"
# ...and a service stalled once the trainers no longer call it (the sync
# PS, after the final sync round): nothing waits on it but the job's end,
# where the next rank's heartbeat (in a ring: rank 0 after the last) or,
# past the last barrier, the master's wait for every rank's figures
# finds it
AT='^train:'
stalled stall-syncps-end 5 4 job.embedding_ps=2 job.sync_ps=1 sync.algo=easgd \
    data.max_examples=20000 data.eval=$T/eval-big.tsv
ok=$?; AT=
check "a sync PS stalled after the last sync round: the job ends within twice sync.timeout_s after the eval ($took s)" \
    sh -c "[ $ok = 0 ] && [ $took -le 20 ]"
check "a sync PS stalled after the last sync round: no other rank is named as stalled" \
    sh -c "! grep 'has not been heard from\|which has stalled' $T/stall-syncps-end.log | grep -v 'sync_ps 0 (rank 4 on [^)]*) has not been heard from' | grep -q ."
check "a sync PS stalled after the last sync round: the master names it" \
    grep -qE "^shadowsync: trainer 0 \(rank 0 on [^)]*\): (sync_ps 0 \(rank 4 on [^)]*\) has not been heard from for 6 s|the job's end has waited 6 s \(twice sync.timeout_s\) for the figures of sync_ps 0 \(rank 4 )" $T/stall-syncps-end.log

# split_job NAME LIMIT_S DATA [section.key=value ...]: 2 trainers, 1 embedding
# PS, 1 EASGD sync PS; trainer 1 reads DATA, the others $T/d/train.tsv; its
# status in rc, its seconds in took
split_job() {
    jn=$1; lim=$2; data1=$3; shift 3
    step "job $jn"
    t0=$(date +%s)
    sj="configs/tiny.ini --set job.bind=127.0.0.1 --set trainer.worker_threads=1 --set data.eval=$T/d/eval.tsv --set output.dir=$T/$jn --set job.trainers=2 --set job.embedding_ps=1 --set job.sync_ps=1 --set sync.algo=easgd"
    for s in "$@"; do sj="$sj --set $s"; done
    timeout -k 10 $lim $MPIRUN -np 1 $BIN train $sj --set data.train=$T/d/train.tsv : \
        -np 1 $BIN train $sj --set data.train=$data1 : \
        -np 2 $BIN train $sj --set data.train=$T/d/train.tsv > $T/$jn.log 2>&1
    rc=$?; took=$(( $(date +%s) - t0 ))
}
# one trainer fails in its own start (here its data file is missing; a
# device that cannot be used, a bad checkpoint file): the job ends at
# once, naming it, rather than leave the others waiting on it
split_job startfail 60 $T/missing.tsv
check "a trainer that fails in its own start ends the job at once, naming its error ($rc, $took s)" \
    sh -c "[ $rc != 0 ] && [ $took -le 20 ] && grep -q '^shadowsync: trainer 1 (rank 1 on [^)]*): data.train: $T/missing.tsv: No such file' $T/startfail.log"
# one trainer's worker fails mid-run (its gzip file is cut short) while the
# master has 30 passes of data left, with checkpoints on (the other
# trainers serve the master's snapshots): the job ends at once, naming it
gzip -1 -c $T/d/train.tsv | head -c 3000000 > $T/cut.gz
split_job workfail 120 $T/cut.gz checkpoint.dir=$T/ck-wf checkpoint.interval_s=0.3 data.epochs=30
check "a non-master trainer's failed worker ends the job at once, checkpoints on ($rc, $took s)" \
    sh -c "[ $rc != 0 ] && [ $took -le 20 ] && grep -q '^shadowsync: trainer 1 (rank 1 on [^)]*): $T/cut.gz: the gzip stream is truncated' $T/workfail.log"
for vr in 2:embedding_ps 4:sync_ps; do # (a stalled reader: below, with checkpoints)
    rank=${vr%%:*}; role=${vr#*:}
    stalled stall-$role 6 $rank job.embedding_ps=2 job.sync_ps=1 job.readers=1 sync.algo=easgd
    check "a stalled $role: the job ends within job.rpc_timeout_s ($took s)" sh -c "[ $? = 0 ] && [ $took -le 8 ]"
    check "a stalled $role: a trainer names it and the timeout" \
        grep -qE "^shadowsync: trainer [01] \(rank [01] on [^)]*\): $role 0 \(rank $rank on [^)]*\) at [^ ]*: [a-z_ ]* failed: no answer within job.rpc_timeout_s" $T/stall-$role.log
done

# a flood (issue 30, D3): 1,100 idle connections that never send the job's
# token, opened to embedding PS 0 and reopened as it closes them (any local
# process may), while the job checkpoints every 0.5 s: the service holds its
# most, closes strangers' connections to serve the job's, and every
# checkpoint is written, the final one included; exit 0 (4 passes: the
# flood takes ~7 s to open its 1,100 connections, and the job must outlast it)
FLOOD_EPOCHS=4
(job flood 3 job.embedding_ps=2 job.rpc_timeout_s=10 trainer.batch_size=32 \
    checkpoint.dir=$T/ck-flood checkpoint.interval_s=0.5 data.epochs=$FLOOD_EPOCHS; echo $? > $T/flood.rc) &
for i in $(seq 1 300); do grep -q 'embedding_ps 0 .* listens on' $T/flood.log 2>/dev/null && break; sleep 0.05; done
EP=$(sed -n 's/^# embedding_ps 0 .* listens on \(.*\)$/\1/p' $T/flood.log)
python3 tests/flood_conns.py "${EP%:*}" "${EP#*:}" 1100 > $T/flood.out 2>&1 &
fpid=$!
wait %1
kill $fpid; wait $fpid 2>/dev/null
M=$T/flood/metrics.json
# (the last few connects may still wait out a SYN retry when the job ends,
# and the ones the service closed are being reopened when it is killed: the
# most ever open, past the service's 1,024 slots, is what fills it)
nf=$(sed -n 's/^open \([0-9]*\).*/\1/p' $T/flood.out | sort -n | tail -1)
check "a flood of 1,100 tokenless connections to an embedding PS: it filled the service ($(cat $T/flood.out))" \
    sh -c "[ \"${nf:-0}\" -gt 1024 ] && grep -q 'embedding_ps 0 (rank 1 on [^)]*): its connections are full: closed the newest one that never sent the job.s token' $T/flood.log"
check "a flood: the job exits 0, every checkpoint written ($(json checkpoints $M 2>/dev/null) of them), the final one with every example" \
    sh -c "[ \"\$(cat $T/flood.rc)\" = 0 ] && ! grep -q 'checkpoint failed' $T/flood.log && [ \"$(json checkpoint_failures $M)\" = 0 ] && grep -q 'meta examples $((FLOOD_EPOCHS * N))\$' \$(ls -d $T/ck-flood/ckpt-* | tail -1)/MANIFEST"

# a service that stalls (SIGSTOP) when a checkpoint next saves it (issue 30,
# D2): the sync PS of an EASGD job that syncs in the foreground only at its
# start and end (sync.gap beyond the data), so the save is the first call
# to meet the stall. It is named within the next checkpoint (0.5 s) and
# twice job.rpc_timeout_s (the save took 10 times that); continued, the job
# goes on, writes its final checkpoint and exits 0
ms() { echo $(( $(date +%s%N) / 1000000 )); }
# stall NAME CKPT_DIR PATTERN JOB_ARGS...: job NAME in the background, its
# rank 2 stopped (SIGSTOP) once CKPT_DIR has a checkpoint, until its log
# says PATTERN (at most 20 s), then continued: sets victim, took (ms to
# PATTERN); NAME.rc holds the job's status
stall() {
    _n=$1; _ck=$2; _pat=$3; shift 3
    (job $_n "$@"; echo $? > $T/$_n.rc) &
    wait_ckpt $_ck
    for i in $(seq 1 50); do victim=$(pid_of $_n 2); [ -n "$victim" ] && break; sleep 0.1; done
    t0=$(ms)
    [ -n "$victim" ] && kill -STOP $victim
    for i in $(seq 1 400); do grep -q "$_pat" $T/$_n.log && break; sleep 0.05; done
    took=$(( $(ms) - t0 ))
    [ -n "$victim" ] && kill -CONT $victim
    wait
}
stall stall-save $T/ck-ss 'checkpoint failed' 3 job.embedding_ps=1 job.sync_ps=1 sync.algo=easgd \
    sync.mode=foreground sync.gap=1000000 job.rpc_timeout_s=2 trainer.batch_size=32 \
    checkpoint.dir=$T/ck-ss checkpoint.interval_s=0.5
check "a sync PS stalled in a checkpoint's save: named within 0.5 s + 2 x job.rpc_timeout_s ($took ms)" \
    sh -c "[ -n '$victim' ] && [ $took -le 4500 ] && grep -q '^shadowsync: a checkpoint failed, training goes on (the last good one is kept): sync_ps 0 (rank 2 on [^)]*) at [^ ]*: save failed: no answer within job.rpc_timeout_s = 2 s, and [^ ]*center-0.bin did not grow meanwhile (the service has stalled)' $T/stall-save.log"
check "a sync PS stalled in a save, then continued: the job ends well, its final checkpoint written" \
    sh -c "[ \"\$(cat $T/stall-save.rc)\" = 0 ] && grep -q 'meta examples $N\$' \$(ls -d $T/ck-ss/ckpt-* | tail -1)/MANIFEST"

# a reader service that stalls (SIGSTOP) once a checkpoint is written, the
# next due in 0.5 s (issue 30, D2: a stalled reader was named only once it
# went on): the next batch's pull or the next save meets it, and either
# names it within 2 x job.rpc_timeout_s; --resume then trains every example once
RS="job.embedding_ps=1 job.readers=1 job.rpc_timeout_s=2 trainer.batch_size=32 checkpoint.dir=$T/ck-sr checkpoint.interval_s=0.5"
stall stall-reader $T/ck-sr '^shadowsync: trainer 0 (rank 0 on [^)]*): reader 0 (rank 2 on [^)]*) at [^ ]*: [a-z_ ]* failed: no answer within job.rpc_timeout_s' 3 $RS
check "a reader service stalled after a checkpoint: named within 0.5 s + 2 x job.rpc_timeout_s ($took ms), the job failed" \
    sh -c "[ -n '$victim' ] && [ $took -le 4500 ] && [ \"\$(cat $T/stall-reader.rc)\" != 0 ]"
EXTRA="--resume $T/ck-sr" job stall-reader-resumed 3 $RS
rc=$?
E=$(json examples $T/stall-reader-resumed/metrics.json 2>/dev/null)
check "a reader service stalled after a checkpoint: --resume trains every example once (${E:-none} of $N)" \
    sh -c "[ $rc = 0 ] && [ '$E' = $N ]"
[ $failed = 0 ] || dump
