#!/bin/sh
# The cluster job under mpirun on loopback (DESIGN §2): a wrong -np is
# refused naming the counts; roles go by rank, trainers first; 2 trainers +
# 2 embedding PS + 1 sync PS train easgd, ma and bmuf in shadow mode,
# easgd and allreduce in foreground mode, every example counted once, eval
# NE within 0.01 of the embedded default's on the same data, allreduce's
# final round leaving both trainer ranks with one model; placement by profile with a
# split table, the cluster model saved and evaluated, `plan`; a wrong token
# sent to a live job's PS is refused while the job goes on; killing an
# embedding PS ends the job with a message naming it; the MPI all-reduce
# (mpi_collective.c); a rank stalled before MPI_Finalize (mpi_finalize.c); embedding.wire
# bf16 and fp16 against fp32.
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
N=200000
. tests/lib.sh   # check, json, near, lt; MPIRUN and the OMPI_ variables (tools/submit's too); cluster
$BIN gen --out $T/d --examples $N --eval-examples 10000 --seed 3 --config configs/tiny.ini > /dev/null 2>&1

$MPIRUN -np 3 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv > $T/np.log 2>&1
rc=$?
check "wrong -np: clear error naming the counts" sh -c "[ $rc != 0 ] && grep -q \"started 3 ranks but the config's roles add up to 1 (job.trainers 1\" $T/np.log"
# a service that cannot listen (job.bind: an address of no machine, RFC 5737): the trainer names
# that rank instead of talking to port 0 (it read garbage there: "invalid message type 21938")
timeout -k 10 120 $MPIRUN -np 2 $BIN train configs/tiny.ini --set job.embedding_ps=1 \
    --set job.bind=192.0.2.1 --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/bind > $T/bind.log 2>&1
check "a service that cannot listen on job.bind: named by the trainer, no request sent" \
    sh -c "[ $? != 0 ] && grep -q 'embedding_ps 0 (rank 1 on .*) could not start its service at 192.0.2.1' $T/bind.log && ! grep -q 'invalid message type' $T/bind.log"
# the master's checks before the job (data.eval here) end every rank, not the master alone
timeout -k 10 120 $MPIRUN -np 3 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set data.train=$T/d/train.tsv --set data.eval=$T/nope.tsv --set output.dir=$T/noeval > $T/noeval.log 2>&1
check "cluster: a missing data.eval ends the whole job before training, naming it" \
    sh -c "[ $? != 0 ] && [ $? != 124 ] && grep -q 'data.eval: $T/nope.tsv: No such file' $T/noeval.log && ! [ -e $T/noeval/progress.csv ]"

# one worker per trainer: Hogwild's interleaving would add noise to the NE comparison
$BIN train configs/tiny.ini --set job.trainers=2 --set sync.algo=ma --set trainer.worker_threads=1 \
    --set data.train=$T/d/train.tsv \
    --set data.eval=$T/d/eval.tsv --set output.dir=$T/embedded --set output.quiet=true > /dev/null 2>&1

# the rates' schedule over the wire (each push carries its factor): decayed to 0 over the first
# example, the PS's rows are one batch's (1 trainer, 1 embedding PS, SGD)
for run in "lr0 --set optim.decay_examples=1 --set optim.decay_to=0" "lr1 --set data.max_examples=128"; do
    set -- $run; name=$1; shift
    timeout -k 10 120 $MPIRUN -np 2 $BIN train configs/tiny.ini --set job.embedding_ps=1 --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set optim.dense=sgd --set optim.emb=sgd --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.quiet=true --set output.dir=$T/$name "$@" > $T/$name.log 2>&1
done
check "cluster: decayed to 0 after the first batch, the PS's rows and the dense vector are one batch's" \
    sh -c "[ '$(json examples $T/lr0/metrics.json)' = $N ] && cmp -s $T/lr0/model/tables-ps0.bin $T/lr1/model/tables-ps0.bin && cmp -s $T/lr0/model/dense.bin $T/lr1/model/dense.bin"
# ...and with 2 trainers each counts its examples twice: decayed to 0 from the job's 257th, each
# trains 2 batches, as a job of 512 examples (the PSs' Hogwild rows move the NE by ~5e-5 between
# runs; 3 batches each would move it by 0.05)
SGD="optim.dense=sgd optim.emb=sgd sync.algo=none"
cluster lr2 $SGD optim.decay_start=256 optim.decay_examples=1 optim.decay_to=0 output.quiet=false
cluster lr2b $SGD data.max_examples=512
check "cluster, 2 trainers: the schedule counts the job's examples (eval NE $(json eval_ne $T/lr2/metrics.json) = $(json eval_ne $T/lr2b/metrics.json) of 2 batches each)" \
    sh -c "[ '$(json examples $T/lr2/metrics.json)' = $N ] && grep -q 'counted as 2 trainers x each one.s place in its share' $T/lr2.log && awk -v a='$(json eval_ne $T/lr2/metrics.json)' -v b='$(json eval_ne $T/lr2b/metrics.json)' 'BEGIN { d = a - b; exit !(a != \"\" && d < 1e-3 && d > -1e-3) }'"
# ...and through a reader service the clock is the job's place in the data, whichever trainer
# takes a batch: decayed to 0 after the job's first batch, the PSs' rows are that batch's alone
# (round_robin: a profiled plan moves with timings)
for run in "rs0 --set optim.decay_examples=1 --set optim.decay_to=0 --set output.quiet=false" "rs1 --set data.max_examples=128"; do
    set -- $run; name=$1; shift
    timeout -k 10 120 $MPIRUN -np 6 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2 \
        --set job.sync_ps=1 --set job.readers=1 --set job.bind=127.0.0.1 --set trainer.worker_threads=1 \
        --set optim.dense=sgd --set optim.emb=sgd --set sync.algo=none --set placement.strategy=round_robin \
        --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/$name "$@" > $T/$name.log 2>&1
done
check "through a reader service: decayed to 0 after the job's first batch, the PSs' rows are its alone" \
    sh -c "[ '$(json examples $T/rs0/metrics.json)' = $N ] && grep -q 'counted over the examples the reader services have handed out' $T/rs0.log && cmp -s $T/rs0/model/tables-ps0.bin $T/rs1/model/tables-ps0.bin && cmp -s $T/rs0/model/tables-ps1.bin $T/rs1/model/tables-ps1.bin"

# embedding.wire: the pooled vectors and gradients in bf16 and fp16 train as well as fp32 in
# about half the embedding PSs' bytes (each way); metrics.json counts every role's
cluster wire32 sync.algo=ma embedding.wire=fp32
for w in bf16 fp16; do
    cluster wire$w sync.algo=ma embedding.wire=$w
    M32=$T/wire32/metrics.json; MW=$T/wire$w/metrics.json
    ok=0
    held $MW $M32 && [ "$(json examples $MW)" = $N ] && awk -v w="$(json tcp_bytes_sent_embedding_ps $MW)" \
        -v f="$(json tcp_bytes_sent_embedding_ps $M32)" 'BEGIN { exit !(w > 0.45 * f && w < 0.55 * f) }' && ok=1
    check "embedding.wire = $w: $(held_is $MW $M32), the embedding PSs' bytes sent $(json tcp_bytes_sent_embedding_ps $MW) of fp32's $(json tcp_bytes_sent_embedding_ps $M32)" \
        test $ok = 1
done
cluster easgd sync.algo=easgd
rc=$?
check "cluster easgd/shadow: exits 0" test $rc = 0
check "roles by rank, trainers first" sh -c "grep -q 'rank 1: trainer 1' $T/easgd.log && grep -q 'rank 3: embedding_ps 1' $T/easgd.log && grep -q 'rank 4: sync_ps 0' $T/easgd.log"
check "per-role figures: lookups served by each embedding PS" grep -q 'embedding_ps 1 (rank 3 on .*): lookups [1-9]' $T/easgd.log
check "per-role figures: syncs served by the sync PS" grep -q 'sync_ps 0 (rank 4 on .*): syncs served [1-9]' $T/easgd.log
check "per-role figures in the run directory (roles.json)" grep -q '"role": "embedding_ps", "index": 1.*"lookups_per_s"' $T/easgd/roles.json
check "cluster: optim.schedule = auto fitted by the master to data.train's $N examples, said once, every trainer's rates decayed to x0.05 at the end" \
    sh -c "[ \$(grep -c '^# optim.schedule = auto: the job.s $N examples (data.train.s 1 file, counted): the rates decay over its last $((N / 10)) examples' $T/easgd.log) = 1 ] && [ '$(json lr_scale $T/easgd/metrics.json)' = 0.05 ]"
# the master's progress lines count every trainer's examples (their reports), not its own
cluster progress sync.algo=easgd output.log_interval_s=0.2 trainer.batch_size=32 output.eval_every=10000
LINES=$(grep -c '^\[ *[0-9.]*s\]' $T/progress.log); LAST=$(grep '^\[ *[0-9.]*s\]' $T/progress.log | tail -1 | awk '{print $4}')
check "cluster progress lines: $LINES lines, the last counts both trainers' examples ($LAST of $N)" \
    sh -c "[ $LINES -ge 3 ] && [ '$LAST' = $N ] && [ '$(json examples $T/progress/metrics.json)' = $N ]"
check "cluster progress lines say done N%, the last done 100.0% (the master's share of data.train)" \
    sh -c "grep '^\[ *[0-9.]*s\]' $T/progress.log | head -1 | grep -q '  done [0-9.]*%' && grep '^\[ *[0-9.]*s\]' $T/progress.log | tail -1 | grep -q '  done 100.0%\$'"
# ...and with output.eval_every, the master scores data.eval meanwhile over its own client
check "cluster eval_every: mid-run rows at rising counts in eval.csv, the last the job's eval NE" \
    sh -c "[ \$(wc -l < $T/progress/eval.csv) -ge 3 ] && awk -F, -v n=$N 'NR > 1 { if (\$1 <= last || \$1 < 10000 || \$1 > n) bad = 1; last = \$1 } END { exit bad || last != n }' $T/progress/eval.csv && grep -q '^eval (trained [0-9]*): examples ' $T/progress.log && awk -v a=\$(tail -1 $T/progress/eval.csv | cut -d, -f4) -v b=$(json eval_ne $T/progress/metrics.json) 'BEGIN { exit !(a - b < 2e-6 && b - a < 2e-6) }'"
for run in "easgd" "ma sync.algo=ma" "bmuf sync.algo=bmuf" "easgd-fg sync.algo=easgd sync.mode=foreground sync.gap=5" \
           "allreduce-fg sync.algo=allreduce sync.mode=foreground sync.gap=1"; do
    name=${run%% *}
    [ "$name" != easgd ] && { cluster $run; rc=$?; check "cluster $name: exits 0" test $rc = 0; }
    M=$T/$name/metrics.json
    check "cluster $name: every example counted once over 2 trainers" test "$(json examples $M)" = $N
    check "cluster $name: $(held_is $M $T/embedded/metrics.json) of the embedded default" held $M $T/embedded/metrics.json
    check "cluster $name: syncs happened" sh -c "[ \"$(json syncs $M)\" -gt 0 ]"
done
# allreduce's final round leaves both trainer ranks with one model, bit for bit (replica_spread,
# computed across the ranks); ma's blend (alpha 0.5) leaves them apart
check "cluster allreduce/foreground gap 1: the trainers' replicas are identical (replica_spread $(json replica_spread $T/allreduce-fg/metrics.json))" \
    test "$(json replica_spread $T/allreduce-fg/metrics.json)" = 0
check "cluster ma: the replicas differ at the end (replica_spread $(json replica_spread $T/ma/metrics.json))" \
    lt 0 "$(json replica_spread $T/ma/metrics.json)"
check "cluster ma with a sync PS: the job says it stays idle" \
    grep -q '^# job.sync_ps = 1: sync.algo = ma does not use the sync PSs' $T/ma.log

# Uneven shares (data.split = files: trainer 0 takes one file of 10k examples, padded with
# zeros so that it is the largest; trainer 1 the other 190k). easgd: a trainer whose data has
# ended follows the center, so its output holds the other's later work (before, its final pull
# ended its rounds: NE 0.954 against ma's 0.928); ma in foreground with a huge gap: the
# finished trainer waits for the other's rounds without sync.timeout_s (it had ended the job,
# naming a healthy trainer stalled); allreduce foreground gap 1: the rounds a finished
# trainer joins are no syncs (sync_gap was 0.53)
mkdir -p $T/uneven
Z=$(printf '0%.0s' $(seq 1 440))
head -n 10000 $T/d/train.tsv | awk -F'\t' -v OFS='\t' -v z=$Z '{ for (i = 2; i <= 14; i++) if ($i != "") $i = z $i; print }' > $T/uneven/a.tsv
tail -n +10001 $T/d/train.tsv | head -n 95000 > $T/uneven/b0.tsv
tail -n +105001 $T/d/train.tsv > $T/uneven/b1.tsv
for run in "u-easgd sync.algo=easgd" "u-ma sync.algo=ma output.eval_every=20000 output.log_interval_s=0.2 checkpoint.dir=$T/ck-u checkpoint.interval_s=0.3" \
           "u-mafg sync.algo=ma sync.mode=foreground sync.gap=1000000 sync.timeout_s=1" \
           "u-arfg sync.algo=allreduce sync.mode=foreground sync.gap=1" \
           "u-lr sync.algo=none trainer.batch_size=32 optim.decay_start=150000 optim.decay_examples=1000 optim.decay_to=0.5 output.log_interval_s=0.2"; do
    cluster $run data.train=$T/uneven data.split=files
done
check "cluster, uneven shares, easgd: the output holds the longer share's work (eval NE $(json eval_ne $T/u-easgd/metrics.json), ma's $(json eval_ne $T/u-ma/metrics.json))" \
    sh -c "[ '$(json examples $T/u-easgd/metrics.json)' = $N ] && awk -v a='$(json eval_ne $T/u-easgd/metrics.json)' -v b='$(json eval_ne $T/u-ma/metrics.json)' 'BEGIN { exit !(a != \"\" && b != \"\" && a < b + 0.01) }'"
check "cluster, uneven shares, easgd: the finished trainer's follows are center reads, not syncs served" \
    grep -q '^# sync_ps 0 (rank 4 on .*): syncs served [1-9][0-9]* ([0-9.]*/s) center reads [1-9]' $T/u-easgd.log
check "cluster, uneven shares, ma foreground, gap 1000000, sync.timeout_s 1: the finished trainer waits for the other's rounds, no stall named" \
    sh -c "[ '$(json examples $T/u-mafg/metrics.json)' = $N ] && ! grep -q 'has stalled' $T/u-mafg.log"
check "cluster, uneven shares, allreduce foreground gap 1: the rounds a finished trainer joins are no syncs (sync_gap $(json avg_sync_gap $T/u-arfg/metrics.json))" \
    sh -c "[ '$(json examples $T/u-arfg/metrics.json)' = $N ] && awk -v g='$(json avg_sync_gap $T/u-arfg/metrics.json)' 'BEGIN { exit !(g >= 0.99 && g <= 1.01) }'"

# the rates' clock of the trainer with the longer share: the job's count (its place plus the
# other's 10k), not 2 x its place (380k: it decayed from its own 75,000th example)
clock=$(sed -n 's/.*"index": 1, .*"lr_clock": \([0-9]*\).*/\1/p' $T/u-lr/roles.json)
check "cluster, uneven shares, a schedule: the longer share's last batch at the job's example $clock on the rates' clock (of $N), each trainer's examples in roles.json" \
    sh -c "awk -v c='$clock' 'BEGIN { exit !(c != \"\" && c > 0.9 * $N && c < 1.1 * $N) }' && grep -q '^# trainer 1 (rank 1 on .*): examples 190000, its last batch at the job' $T/u-lr.log"
check "cluster, uneven shares, eval_every: evals go on while the other trainer trains after the master's 10k examples have ended ($(($(wc -l < $T/u-ma/eval.csv) - 1)) rows)" \
    sh -c "awk -F, 'NR > 1 && \$1 > 10000 && \$1 < $N { n++ } END { exit !(n >= 1) }' $T/u-ma/eval.csv"
check "cluster, uneven shares: the master takes snapshots while the other trainer trains after its own share ended ($(grep -c '^# checkpoint ' $T/u-ma.log) checkpoints)" \
    sh -c "[ \$(grep -c '^# checkpoint ' $T/u-ma.log) -ge 3 ] && [ '$(json examples $T/u-ma/metrics.json)' = $N ]"
# a stop that reaches only the master after its own share ended (SIGUSR1 to rank 0 alone)
# reaches the other trainer too: the job stops short with status 75 and a resume finishes the
# data (it was lost: trainer 1 trained on, and the master said it had stopped)
(cluster u-stop sync.algo=ma data.train=$T/uneven data.split=files trainer.batch_size=32 checkpoint.dir=$T/ck-us output.log_interval_s=0.2; echo "rc=$?" >> $T/u-stop.log) &
for i in $(seq 1 400); do grep -q '^\[.*examples [0-9]\{6,\}' $T/u-stop.log 2>/dev/null && break; sleep 0.05; done
for p in $(pgrep -f "output.dir=$T/u-stop "); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0" && kill -USR1 $p
done
wait
timeout -k 10 300 $MPIRUN -np 5 $BIN train configs/tiny.ini --set job.trainers=2 \
    --set job.embedding_ps=2 --set job.sync_ps=1 --set job.bind=127.0.0.1 --set trainer.worker_threads=1 \
    --set data.train=$T/uneven --set data.split=files --set trainer.batch_size=32 --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/u-stop2 --set sync.algo=ma --set checkpoint.dir=$T/ck-us --resume > $T/u-stop2.log 2>&1
rc=$?
check "cluster, uneven shares, SIGUSR1 to the master alone after its share: the job stops short, status 75, and the resume finishes the data ($(json examples $T/u-stop/metrics.json) then $(json examples $T/u-stop2/metrics.json))" \
    sh -c "grep -q 'rc=75' $T/u-stop.log && [ '$(json examples $T/u-stop/metrics.json)' -lt $N ] && grep -q '^# stopping (SIGUSR1)' $T/u-stop.log && [ $rc = 0 ] && [ '$(json examples $T/u-stop2/metrics.json)' = $N ]"
# a checkpoint.dir with ".." in it: the services' save paths are resolved, not refused (every
# cluster checkpoint failed, and the run exited 0 with none)
cluster dotdot sync.algo=ma checkpoint.dir=$T/sub/../ckdd checkpoint.interval_s=0.2 data.max_examples=60000
rc=$?
check "cluster, checkpoint.dir with '..': its checkpoints are taken ($rc)" \
    sh -c "[ $rc = 0 ] && ls -d $T/ckdd/ckpt-* > /dev/null 2>&1 && ! grep -q 'save path refused' $T/dotdot.log"
# ...and a bare --resume takes it (the resolved path freed the string --resume named)
timeout -k 10 120 $MPIRUN -np 5 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2 \
    --set job.sync_ps=1 --set job.bind=127.0.0.1 --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv \
    --set data.eval=$T/d/eval.tsv --set output.dir=$T/dotdot2 --set sync.algo=ma \
    --set checkpoint.dir=$T/sub/../ckdd --set data.max_examples=60000 --resume > $T/dotdot2.log 2>&1
rc=$?
check "cluster, checkpoint.dir with '..', a bare --resume: resumes from it ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q 'resuming from $T/ckdd/ckpt-' $T/dotdot2.log"
# ranks that resolved different configs (a stale copy on one host): refused at once, naming them
timeout -k 10 120 $MPIRUN -np 1 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.bind=127.0.0.1 --set data.train=$T/d/train.tsv --set output.dir=$T/mixed --set sync.algo=ma : \
    -np 2 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 --set job.bind=127.0.0.1 \
    --set data.train=$T/d/train.tsv --set output.dir=$T/mixed --set sync.algo=none > $T/mixed.log 2>&1
rc=$?
check "cluster, ranks with different configs: refused before training, naming them ($rc)" \
    sh -c "[ $rc != 0 ] && [ $rc != 124 ] && grep -q 'rank(s) 1, 2 resolved another config than rank 0.s' $T/mixed.log && ! [ -e $T/mixed/metrics.json ]"

# a cluster job's check across keys names where each was set: easgd needs its sync PSs
timeout -k 10 120 $MPIRUN -np 3 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.sync_ps=0 --set job.bind=127.0.0.1 --set data.train=$T/d/train.tsv \
    --set output.dir=$T/nosps --set sync.algo=easgd > $T/nosps.log 2>&1
rc=$?
check "cluster, easgd without sync PSs: refused before training, naming both --sets ($rc)" \
    sh -c "[ $rc != 0 ] && [ $rc != 124 ] && grep -q '^shadowsync: config (--set sync.algo=easgd): sync.algo = easgd in a cluster job needs job.sync_ps >= 1 (its central copy lives there); job.sync_ps is set by --set job.sync_ps=0\$' $T/nosps.log && [ \$(grep -c 'needs job.sync_ps' $T/nosps.log) = 1 ] && ! [ -e $T/nosps/metrics.json ]"

# ranks on two hosts (the PS rank in a UTS namespace of its own, named h2): a loopback job.bind
# is refused naming the hosts, before any training; without job.bind the services announce an
# interface's address, not the loopback the host's name resolves to here (127.0.0.1)
if unshare -u true 2>/dev/null && ip -4 -o addr show scope global 2>/dev/null | grep -q inet; then
    for run in "h2bind --set job.bind=127.0.0.1" "h2auto"; do
        set -- $run; name=$1; shift
        A="configs/tiny.ini --set job.embedding_ps=1 --set data.train=$T/d/train.tsv --set data.eval= --set data.max_examples=20000 --set output.dir=$T/$name $*"
        timeout -k 10 120 $MPIRUN -np 1 $BIN train $A : -np 1 unshare -u sh -c "hostname h2 && exec $BIN train $A" > $T/$name.log 2>&1
        echo "rc=$?" >> $T/$name.log
    done
    check "ranks on 2 hosts, job.bind = 127.0.0.1: refused before training, naming the hosts" \
        sh -c "grep -q 'rc=1' $T/h2bind.log && grep -q 'job.bind = 127.0.0.1: the ranks run on 2 hosts (.*h2)' $T/h2bind.log && ! [ -e $T/h2bind/metrics.json ]"
    check "ranks on 2 hosts, job.bind empty: the PS announces an interface's address, not a loopback one ($(grep -o 'listens on [0-9.]*' $T/h2auto.log | head -1))" \
        sh -c "grep -q 'rc=0' $T/h2auto.log && grep -q 'embedding_ps 0 .*listens on [0-9]' $T/h2auto.log && ! grep -q 'listens on 127\.' $T/h2auto.log"
else
    echo "SKIP ranks on 2 hosts: no unshare -u here, or no address but loopback"
fi
timeout -k 10 120 $MPIRUN -np 2 $BIN train configs/tiny.ini --set job.embedding_ps=1 --set job.bind=localhost \
    --set data.train=$T/d/train.tsv --set output.dir=$T/lh > $T/lh.log 2>&1
rc=$?
check "cluster, job.bind = localhost: refused before profiling, naming it ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'job.bind = localhost is not an IPv4 address' $T/lh.log && ! grep -q '^# profiling' $T/lh.log"
# placement by profile, table 0 split by row range over both PSs (pins):
# the client sums partial bags; each PS saves its shards; eval reads them all
cluster profile sync.algo=ma placement.strategy=profile placement.pin=0@0-400:0,0@400-1000:1
rc=$?
check "cluster with placement profile and a split table: exits 0" test $rc = 0
M=$T/profile/metrics.json
check "placement profile: every example counted once" test "$(json examples $M)" = $N
check "placement profile: $(held_is $M $T/embedded/metrics.json) of the embedded default" held $M $T/embedded/metrics.json
check "placement profile: the plan is printed and written (placement.json, .txt)" sh -c \
    "grep -q 'placement profile: 26 tables on 2 embedding PSs' $T/profile.log && grep -q '\"strategy\": \"profile\", \"profiled\": true' $T/profile/placement.json && grep -q 'round_robin' $T/profile/placement.txt"
check "placement profile: the pinned row ranges hold" grep -q '"table": 0, "ps": 1, "lo": 400, "hi": 1000' $T/profile/placement.json
check "placement profile: PS figures carry busy and load seconds" grep -q '"busy_s": [0-9.]*, "load_s": [0-9.]*[1-9]' $T/profile/roles.json
check "cluster model: each PS saved its shards" test -s $T/profile/model/tables-ps0.bin -a -s $T/profile/model/tables-ps1.bin
$BIN eval configs/tiny.ini --model $T/profile/model --set data.eval=$T/d/eval.tsv > $T/eval.log 2>&1
ENE=$(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/eval.log)
NE=$(json eval_ne $M)
check "cluster model: shadowsync eval of the saved shards gives the job's eval NE ($ENE vs $NE)" near "$ENE" "$NE" 0.0005
# a model missing one PS's file, or one with bytes appended: refused, naming the set or the file
mkdir -p $T/miss && cp $T/profile/model/dense.bin $T/profile/model/tables-ps0.bin $T/miss/
$BIN eval configs/tiny.ini --model $T/miss --set data.eval=$T/d/eval.tsv > $T/miss.log 2>&1
rc=$?
cp $T/profile/model/tables-ps1.bin $T/miss/ && echo junk >> $T/miss/dense.bin
$BIN eval configs/tiny.ini --model $T/miss --set data.eval=$T/d/eval.tsv > $T/junk.log 2>&1
check "cluster model: a PS's file missing is told as such ($rc); bytes appended to dense.bin are refused, naming it ($?)" \
    sh -c "[ $rc = 1 ] && grep -q 'found in the 1 file read ($T/miss/tables-ps0.bin): a file of the set is missing?' $T/miss.log && grep -q '$T/miss/dense.bin: bytes past its [0-9]* parameters' $T/junk.log"
# more embedding PSs than tables (round_robin): the one left empty idles, the job trains, checkpoints
# and saves a model that scores
CSV3="--set data.format=csv --set data.cat_cols=14-16"
timeout -k 10 300 $MPIRUN -np 5 $BIN train configs/tiny.ini --set job.embedding_ps=4 --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set placement.strategy=round_robin $CSV3 --set data.max_examples=20000 \
    --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/idle \
    --set checkpoint.dir=$T/idleck > $T/idle.log 2>&1
rc=$?
$BIN eval configs/tiny.ini --model $T/idle $CSV3 --set data.eval=$T/d/eval.tsv > $T/idle-eval.log 2>&1
INE=$(sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' $T/idle-eval.log)
near "$INE" "$(json eval_ne $T/idle/metrics.json)" 1e-5
nr=$?
check "an embedding PS the plan leaves empty idles: exits 0 ($rc), said, checkpointed, its model scores ($INE)" \
    sh -c "[ $rc = 0 ] && [ $nr = 0 ] && grep -q '# embedding_ps 3 (rank 4 on .*) holds no shard of the plan (placement.strategy = round_robin): it idles' $T/idle.log && ls -d $T/idleck/ckpt-* > /dev/null && ! [ -e $T/idle/model/tables-ps3.bin ]"

# a PS that cannot write its part of the model (its file's name taken by a folder): the master
# asked it while the services served, so the job ends 1 naming the PS, the parts written are
# removed (no half model), and the final checkpoint's --resume saves the model without training
CL2="--set job.trainers=2 --set job.embedding_ps=2 --set sync.algo=ma --set job.bind=127.0.0.1
     --set data.max_examples=20000 --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv
     --set output.dir=$T/mpart --set checkpoint.dir=$T/mpartck"
mkdir -p $T/mpart/model/tables-ps1.bin
timeout -k 10 120 $MPIRUN -np 4 $BIN train configs/tiny.ini $CL2 > $T/mpart.log 2>&1
rc=$?
left=$(ls $T/mpart/model | tr '\n' ' ')
rmdir $T/mpart/model/tables-ps1.bin
timeout -k 10 120 $MPIRUN -np 4 $BIN train configs/tiny.ini $CL2 --resume $T/mpartck > $T/mpart2.log 2>&1
rc2=$?
check "a PS's part of the model not written: ends 1 ($rc) naming the PS and the final checkpoint, no part left; its --resume saves the model ($rc2)" \
    sh -c "[ $rc = 1 ] && grep -q 'embedding_ps 1 (rank 3 on [^)]*) at [^ ]*: save failed: $T/mpart/model/tables-ps1.bin: .*Is a directory; the final checkpoint $T/mpartck/ckpt-[0-9]* holds the model' $T/mpart.log && [ '$left' = 'tables-ps1.bin ' ] && [ $rc2 = 0 ] && grep -q '^# nothing left to train' $T/mpart2.log && grep -q '^eval: examples' $T/mpart2.log && [ -s $T/mpart/model/tables-ps0.bin ] && [ -s $T/mpart/model/tables-ps1.bin ]"

# shadowsync plan: every strategy's figures; a job beyond the PSs' memory says so up front
$BIN plan configs/tiny.ini --set job.embedding_ps=3 --set job.sync_ps=2 --set placement.strategy=profile \
    --set data.train=$T/d/train.tsv --set output.dir=$T/plan > $T/plan.log 2>&1
rc=$?
check "plan: prints the plan and the three strategies" sh -c "[ $rc = 0 ] && grep -q '^profile .*<- chosen' $T/plan.log && grep -q '^round_robin ' $T/plan.log && grep -q '^hash ' $T/plan.log && grep -q 'imbalance (max/mean)' $T/plan.log"
check "plan: the sync PS partitions of the dense vector, by bytes" sh -c "grep -q '^sync_ps 0: dense floats \[0, ' $T/plan.log && grep -q '^sync_ps 1: dense floats' $T/plan.log"
check "plan: written as JSON that parses" python3 -c "import json,sys; d=json.load(open('$T/plan/placement.json')); sys.exit(not (len(d['tables']) == 26 and d['plans']['profile']['imbalance'] <= d['plans']['round_robin']['imbalance'] + 1e-9))"
$BIN plan configs/criteo_kaggle.ini --set job.embedding_ps=2 --set embedding_ps.memory_mb=1000 \
    --set placement.strategy=profile --set placement.profile_batches=0 --set output.dir= > $T/oom.log 2>&1
rc=$?
check "plan: tables beyond the PSs' memory are refused with need and capacity" sh -c "[ $rc != 0 ] && grep -q 'need 2[0-9]* MiB but 2 embedding PSs hold 2000 MiB' $T/oom.log"
timeout -k 10 120 $MPIRUN -np 3 $BIN train configs/criteo_kaggle.ini --set job.trainers=1 --set job.embedding_ps=2 \
    --set embedding_ps.memory_mb=1000 --set placement.profile_batches=0 --set data.train=$T/d/train.tsv \
    --set data.eval= --set output.dir=$T/oomjob > $T/oomjob.log 2>&1
rc=$?
check "a cluster job beyond the PSs' memory stops before allocating, naming the need" sh -c "[ $rc != 0 ] && grep -q 'placement (on the master).*need' $T/oomjob.log"

# a stranger's request (wrong token) to a live job's embedding PS is refused
# and counted while the job trains on (tests/probe_token.py speaks Thrift)
(timeout -k 10 300 $MPIRUN -np 3 $BIN train configs/tiny.ini --set job.embedding_ps=2 --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv --set data.eval= \
    --set output.dir=$T/probe > $T/probe.log 2>&1; echo $? > $T/probe.rc) &
for i in $(seq 1 240); do grep -q 'embedding_ps 0 .* listens on' $T/probe.log 2>/dev/null && break; sleep 0.5; done
EP=$(sed -n 's/^# embedding_ps 0 .* listens on \(.*\)$/\1/p' $T/probe.log)
python3 tests/probe_token.py "${EP%:*}" "${EP#*:}" > $T/probe.out 2>&1
wait
check "a live job: a request with a wrong token is refused by the embedding PS" grep -q 'request refused: missing or wrong job token' $T/probe.out
check "a live job: the PS served on and the job finished, the refusal counted" sh -c "[ \"\$(cat $T/probe.rc)\" = 0 ] && [ \"$(json examples $T/probe/metrics.json 2>/dev/null)\" = $N ] && grep -q '\"embedding_ps\", \"index\": 0.*\"refused\": 1,' $T/probe/roles.json"

# reader services: 2 trainers + 2 embedding PS + 1 sync PS + 2 readers, on
# the data with 3 bad lines added
{ cat $T/d/train.tsv; printf '1\tnot-a-number\n0\n2\t1\t2\n'; } > $T/d/train_bad.tsv
timeout -k 10 300 $MPIRUN -np 7 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2 \
    --set job.sync_ps=1 --set job.readers=2 --set sync.algo=easgd --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set data.train=$T/d/train_bad.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/readers --set output.log_interval_s=0.2 > $T/readers.log 2>&1
rc=$?
check "cluster with 2 reader services: exits 0" test $rc = 0
check "reader services: every example counted once" test "$(json examples $T/readers/metrics.json)" = $N
check "reader services: $(held_is $T/readers/metrics.json $T/embedded/metrics.json) of the embedded default" held $T/readers/metrics.json $T/embedded/metrics.json
check "reader services: the readers' bad lines reach metrics.json" test "$(json bad_lines $T/readers/metrics.json)" = 3
check "reader services: the progress lines say how far the readers are, done 100.0% at the end" \
    sh -c "grep '^\[ *[0-9.]*s\]' $T/readers.log | grep -q '  done [0-9.]*%' && grep '^\[ *[0-9.]*s\]' $T/readers.log | tail -1 | grep -q '  done 100.0%\$' && tail -1 $T/readers/progress.csv | grep -q ',1.0000\$'"
check "reader services: batches served per reader reported" grep -q 'reader 1 (rank 6 on .*): batches served [1-9]' $T/readers.log
# a batch larger than 4096 examples through a reader service (its cap was 4096: the job
# failed after startup with "bad request: max = 8192 (1..4096)")
timeout -k 10 120 $MPIRUN -np 3 $BIN train configs/tiny.ini --set job.embedding_ps=1 --set job.readers=1 \
    --set job.bind=127.0.0.1 --set trainer.worker_threads=1 --set trainer.batch_size=8192 \
    --set data.train=$T/d/train.tsv --set data.max_examples=40000 --set data.eval= \
    --set output.dir=$T/rdbig > $T/rdbig.log 2>&1
rc=$?
check "a reader service serves batches of trainer.batch_size = 8192 (over 4096)" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $T/rdbig/metrics.json)\" = 40000 ] && ! grep -q 'bad request' $T/rdbig.log"

# data.split: the same data as 4 files, split by whole files between the 2 trainers reading
# it themselves (auto: they spread evenly), and between 2 reader services (files)
mkdir -p $T/d4 && (cd $T/d4 && split -n l/4 -d --additional-suffix=.tsv ../d/train.tsv part-)
cluster split4 data.train=$T/d4 sync.algo=ma output.log_interval_s=0.1
check "data.split = auto, 4 even files, 2 trainers: whole files each, every example once" \
    sh -c "[ \"$(json examples $T/split4/metrics.json)\" = $N ] && grep -q '^# data.train: split by whole files between the 2 trainers, the busiest with 1.0[0-9]x' $T/split4.log"
check "data.split = files, 2 trainers: done (their mean place) rises to 1 at the end" \
    awk -F, 'NR > 1 { if ($7 < last) bad = 1; last = $7; n++ } END { exit bad || n < 2 || last != 1 }' $T/split4/progress.csv
timeout -k 10 300 $MPIRUN -np 7 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2 \
    --set job.sync_ps=1 --set job.readers=2 --set sync.algo=easgd --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set data.train=$T/d4 --set data.eval=$T/d/eval.tsv \
    --set data.split=files --set data.max_examples=250001 --set data.epochs=2 --set output.dir=$T/split4r > $T/split4r.log 2>&1
check "data.split = files, 2 reader services, 2 passes: whole files each, max_examples in all (into the second pass)" \
    sh -c "[ \"$(json examples $T/split4r/metrics.json)\" = 250001 ] && grep -q '^# data.train: split by whole files between the 2 readers' $T/split4r.log"
cluster split1 sync.algo=ma data.max_examples=50000
check "data.split = auto, one file: line by line between the trainers, saying why" \
    grep -q '^# data.train: split line by line between the 2 trainers, each reading every file (fewer files than trainers)' $T/split1.log

cluster two-workers sync.algo=ma trainer.worker_threads=2
rc=$?
check "cluster with 2 workers per trainer (a Thrift client each): exits 0" test $rc = 0
check "cluster with 2 workers per trainer: every example counted once" test "$(json examples $T/two-workers/metrics.json)" = $N

# tools/submit counts the ranks and runs the job
tools/submit configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 --set job.bind=127.0.0.1 \
    --set sync.algo=bmuf --set data.train=$T/d/train.tsv --set data.max_examples=5000 \
    --set data.eval= --set output.dir=$T/submit --set output.quiet=true > $T/submit.log 2>&1
rc=$?
check "tools/submit: runs -np 3 for 2 trainers + 1 embedding PS" sh -c "[ $rc = 0 ] && grep -q 'mpirun -np 3' $T/submit.log"

# tools/mpiguard.py: an mpirun that hangs after its ranks ended (Open MPI's
# PMIx shutdown hang, simulated: the child exits 3, the parent never reaps
# it and ignores SIGTERM) is killed after the grace, with the rank's status
HANG="import os,time,signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); pid=os.fork(); os._exit(3) if pid==0 else time.sleep(1000)"
t0=$(date +%s)
MPIGUARD_GRACE_S=1 /usr/bin/python3 tools/mpiguard.py /usr/bin/python3 -c "$HANG" > $T/guard.log 2>&1
rc=$?
check "mpiguard: a launcher hung after its ranks ended is stopped, with their status ($rc, $(( $(date +%s) - t0 )) s)" \
    sh -c "[ $rc = 3 ] && [ $(( $(date +%s) - t0 )) -le 10 ] && grep -q 'an Open MPI shutdown hang' $T/guard.log"
# ...and one stuck with a rank left running, stopped (SIGSTOP), after
# another aborted (exit 3, never reaped): the guard ends that rank too
HANG2="import os,time,signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); a=os.fork(); a or os._exit(3); b=os.fork(); b or os.kill(os.getpid(), signal.SIGSTOP); print(b, flush=True); time.sleep(1000)"
t0=$(date +%s)
MPIGUARD_GRACE_S=1 /usr/bin/python3 tools/mpiguard.py /usr/bin/python3 -c "$HANG2" > $T/guard2.log 2>&1
rc=$?
stopped=$(head -1 $T/guard2.log)
check "mpiguard: a launcher stuck after one rank aborted, another stopped, is stopped with both ($rc, $(( $(date +%s) - t0 )) s)" \
    sh -c "[ $rc = 3 ] && [ $(( $(date +%s) - t0 )) -le 10 ] && grep -q 'unreaped.*and its 1 rank(s) still running' $T/guard2.log && [ -n '$stopped' ] && ! grep -q '^State:.*[RSTD]' /proc/$stopped/status 2> /dev/null"
check "tools/submit: the job trains" test "$(json examples $T/submit/metrics.json)" = 5000
rm -f shadowsync-*.sbatch
# a config that does not check stops submit before anything is launched or scripted, with
# shadowsync's own message (python read "2_0" as 20 and launched 20 ranks; -3 workers
# gave "--cpus-per-task=-2")
tools/submit configs/tiny.ini --set job.trainers=2_0 > $T/sub-bad1.log 2>&1
rc=$?
tools/submit configs/tiny.ini --slurm --dry-run --set trainer.worker_threads=-3 > $T/sub-bad2.log 2>&1
rc2=$?
check "tools/submit: a config that does not check launches nothing, naming the key ($rc, $rc2)" \
    sh -c "[ $rc = 2 ] && [ $rc2 = 2 ] && grep -q 'job.trainers = \"2_0\" is not an integer' $T/sub-bad1.log && grep -q 'nothing launched' $T/sub-bad1.log && ! grep -q 'mpirun -np' $T/sub-bad1.log && grep -q 'trainer.worker_threads = -3 is out of range' $T/sub-bad2.log && ! grep -q SBATCH $T/sub-bad2.log"
tools/submit configs/tiny.ini --slurm --dry-run --set job.trainers=4 > $T/slurm.log 2>&1
check "tools/submit --slurm --dry-run prints the sbatch script and writes no file" \
    sh -c "grep -q 'SBATCH --ntasks=4' $T/slurm.log && ! ls shadowsync-*.sbatch > /dev/null 2>&1"
if ! command -v sbatch > /dev/null; then
    tools/submit configs/tiny.ini --slurm --set job.trainers=4 > $T/slurm2.log 2>&1
    check "tools/submit --slurm without sbatch: prints the script, says it was not submitted, writes no file" \
        sh -c "[ $? = 2 ] && grep -q 'SBATCH --ntasks=4' $T/slurm2.log && grep -q 'sbatch not found here: the script above was not submitted' $T/slurm2.log && ! ls shadowsync-*.sbatch > /dev/null 2>&1"
fi
rm -f shadowsync-*.sbatch

# killing an embedding PS mid-run ends the job, naming it
$BIN gen --out $T/big --examples 2000000 --eval-examples 100 --seed 4 --config configs/tiny.ini > /dev/null 2>&1
timeout -k 10 120 $MPIRUN -np 5 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2 \
    --set job.sync_ps=1 --set sync.algo=ma --set job.bind=127.0.0.1 --set trainer.worker_threads=1 \
    --set data.train=$T/big/train.tsv --set data.eval= --set output.dir=$T/kill --set output.quiet=true > $T/kill.log 2>&1 &
sleep 3
victim=$(pgrep -f "^$BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2" | sed -n 3p)
kill -9 $victim
start=$(date +%s)
wait
took=$(( $(date +%s) - start ))
check "a killed embedding PS ends the job within the RPC timeout ($took s)" test $took -le 30
check "the error names the lost embedding PS by role, rank and host" grep -q 'embedding_ps [01] (rank [23] on' $T/kill.log

# SIGUSR1 to the launcher (mpiguard -> mpirun -> every rank): the trainers stop as at the
# end of their data, the reader services' prefetched batches trained first; the job ends with
# its final checkpoint, model and metrics; --resume trains the rest, every example once (the
# data as 4 files, the 2 readers each with whole files of its own)
mkdir -p $T/big4 && (cd $T/big4 && split -n l/4 -d --additional-suffix=.tsv ../big/train.tsv part-)
usr1_job() { # OUT [--resume]
    timeout -k 10 120 $MPIRUN -np 6 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
        --set job.sync_ps=1 --set job.readers=2 --set sync.algo=easgd --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/big4 --set data.split=files --set data.max_examples=400000 \
        --set data.eval=$T/d/eval.tsv --set checkpoint.dir=$T/usr1ck --set output.log_interval_s=0.2 \
        --set output.dir=$T/$1 $2 > $T/$1.log 2>&1
}
usr1_job usr1 &
bg=$!
for i in $(seq 1 600); do grep -q '^\[ *[0-9.]*s\]' $T/usr1.log && break; sleep 0.05; done
kill -USR1 $(pgrep -f "^/usr/bin/python3 tools/mpiguard.py mpirun .*output.dir=$T/usr1\$") # not timeout's

wait $bg
rc=$?
M=$T/usr1/metrics.json
check "SIGUSR1 to the launcher: the job stops short of its data ($(json examples $M) of 400000), status 75 ($rc)" \
    sh -c "[ $rc = 75 ] && grep -q '^shadowsync: stopped (SIGUSR1) after [0-9]* examples: .*--resume' $T/usr1.log && grep -q '\"stopped_by\": ' $M && [ $(json examples $M) -lt 400000 ] && [ -s $T/usr1/model/dense.bin ]"
usr1_job usr1b --resume
rc=$?
check "after SIGUSR1, --resume: exits 0, every example once ($(json examples $T/usr1b/metrics.json) of 400000)" \
    sh -c "[ $rc = 0 ] && [ $(json examples $T/usr1b/metrics.json) = 400000 ]"

# a checkpoint of trainers that read their own shares cannot be taken up by
# one process's one reader: refused, naming the way
cluster ownck sync.algo=easgd data.max_examples=20000 checkpoint.dir=$T/ownck
$BIN train configs/tiny.ini --set job.trainers=2 --set sync.algo=easgd --set data.train=$T/d/train.tsv \
    --set data.eval= --set output.dir=$T/ownck-embedded --resume $T/ownck > $T/ownck-embedded.log 2>&1
check "a cluster checkpoint of own shares resumed in one process: refused, naming tools/submit --resume" \
    sh -c "[ $? = 1 ] && grep -q 'written by a cluster job whose 2 trainers read their own shares of data.train: resume it as one (tools/submit' $T/ownck-embedded.log"
# a line too long to read, split line by line over 2 trainers: named and counted once (each
# reader counted it: bad_lines 2, and it was named twice)
head -n 5000 $T/d/train.tsv > $T/long.tsv
awk 'BEGIN { printf "1\t"; for (i = 0; i < 100000; i++) printf "0123456789abcdef0123456789abcdef0123456789abcdef"; print "" }' >> $T/long.tsv
tail -n 5000 $T/d/train.tsv >> $T/long.tsv
timeout -k 10 120 $MPIRUN -np 3 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.bind=127.0.0.1 --set data.split=lines --set data.train=$T/long.tsv --set data.eval= \
    --set output.dir=$T/long > $T/long.log 2>&1
check "cluster, split by lines: a line too long is named once and counted once ($(grep -c 'line longer than' $T/long.log) named, bad_lines $(json bad_lines $T/long/metrics.json))" \
    sh -c "[ \$(grep -c '^$T/long.tsv:5001: line longer than' $T/long.log) = 1 ] && [ '$(json bad_lines $T/long/metrics.json)' = 1 ] && [ '$(json examples $T/long/metrics.json)' = 10000 ]"
# ...and the other way: one process's checkpoint of 2 trainers (one reader) resumes as a
# cluster job of one trainer, every example once; with 2 trainer ranks the job says so (the
# advice had gone in circles: job.trainers = 2, then "no reader's position", then readers = 0)
$BIN train configs/tiny.ini --set job.trainers=2 --set sync.algo=ma --set data.train=$T/d/train.tsv \
    --set data.eval= --set output.dir=$T/oneck-e --set checkpoint.dir=$T/oneck --set data.max_examples=20000 > /dev/null 2>&1
timeout -k 10 120 $MPIRUN -np 3 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.bind=127.0.0.1 --set data.train=$T/d/train.tsv --set data.eval= --set output.dir=$T/oneck-c2 \
    --set checkpoint.dir= --resume $T/oneck > $T/oneck-c2.log 2>&1
rc=$?
timeout -k 10 120 $MPIRUN -np 2 $BIN train configs/tiny.ini --set job.trainers=1 --set job.embedding_ps=1 \
    --set job.bind=127.0.0.1 --set data.train=$T/d/train.tsv --set data.eval= --set output.dir=$T/oneck-c1 \
    --set checkpoint.dir= --set data.max_examples=40000 --resume $T/oneck > $T/oneck-c1.log 2>&1
rc1=$?
check "one process's checkpoint of 2 trainers: a cluster job of 2 is told to take 1 ($rc); one of 1 trains the rest, every example once ($rc1, $(json examples $T/oneck-c1/metrics.json))" \
    sh -c "[ $rc = 1 ] && grep -q 'was written by one reader over all of data.train (2 trainers in one process, or one trainer rank): a cluster job resumes it with job.trainers = 1' $T/oneck-c2.log && [ $rc1 = 0 ] && [ '$(json examples $T/oneck-c1/metrics.json)' = 40000 ]"

# SIGUSR1 over and over to every rank once the training has ended (the master's final eval
# over its connections to the PS): no call fails for it (the signals wait for a thread of
# their own, so none interrupts a socket's recv), and the job ends as it would, status 0
$BIN gen --out $T/ev --examples 1000 --eval-examples 300000 --seed 6 --config configs/tiny.ini > /dev/null 2>&1
timeout -k 10 120 $MPIRUN -np 4 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.sync_ps=1 --set sync.algo=ma --set job.bind=127.0.0.1 --set trainer.worker_threads=1 \
    --set data.train=$T/d/train.tsv --set data.max_examples=20000 --set data.eval=$T/ev/eval.tsv \
    --set output.dir=$T/usr1late > $T/usr1late.log 2>&1 &
bg=$!
for i in $(seq 1 3000); do grep -q '^train:' $T/usr1late.log && break; sleep 0.01; done
sent=0
while pids=$(pgrep -f "^$BIN train .*output.dir=$T/usr1late\$"); do
    kill -USR1 $pids 2> /dev/null && sent=$((sent + 1)); sleep 0.005
done
wait $bg
rc=$?
check "SIGUSR1 to every rank $sent times in the final eval: status 0 ($rc), no failed call, no stopped_by, every eval example" \
    sh -c "[ $rc = 0 ] && [ $sent -gt 10 ] && ! grep -q 'Interrupted system call' $T/usr1late.log && ! grep -q stopped_by $T/usr1late/metrics.json && [ '$(json eval_examples $T/usr1late/metrics.json)' = 300000 ]"

# a SIGUSR1 that comes while the ranks start (MPI_Init, the plan) waits for its taker, and
# a thread made before it was blocked (OpenBLAS's) only marks it: no rank dies of it
timeout -k 10 120 $MPIRUN -np 4 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.sync_ps=1 --set sync.algo=ma --set job.bind=127.0.0.1 --set trainer.worker_threads=1 \
    --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set checkpoint.dir=$T/ckearly \
    --set output.dir=$T/usr1early > $T/usr1early.log 2>&1 &
bg=$!
blocked=0
for i in $(seq 1 3000); do # each rank once its main thread blocks SIGUSR1 (bit 10 of SigBlk)
    pids=$(pgrep -f "^$BIN train .*output.dir=$T/usr1early\$")
    blocked=0
    for p in $pids; do
        m=$(awk '/^SigBlk/ { print $2 }' /proc/$p/status 2> /dev/null)
        [ -n "$m" ] && [ $(( 0x$m & 512 )) != 0 ] && blocked=$((blocked + 1))
    done
    [ "$blocked" = 4 ] && break
    sleep 0.005
done
kill -USR1 $pids 2> /dev/null
wait $bg
rc=$?
check "SIGUSR1 to every rank as it starts ($blocked of 4 blocking it): none dies of it, the job stops (status $rc)" \
    sh -c "[ $blocked = 4 ] && [ $rc = 75 -o $rc = 1 ] && grep -q 'stopped (SIGUSR1)' $T/usr1early.log && ! grep -qi 'signal 10\|User defined signal' $T/usr1early.log"
# ...stopped before any example, it takes no checkpoint (as embedded: the stop's lead time
# is not spent writing the untrained model); stopped after some, a checkpoint to resume
if grep -q 'stopped (SIGUSR1) before any example was trained' $T/usr1early.log; then
    check "...stopped before any example: no checkpoint taken, said" \
        sh -c "! ls -d $T/ckearly/ckpt-* > /dev/null 2>&1 && grep -q 'no checkpoint taken (run it again without --resume)' $T/usr1early.log"
else
    check "...stopped after some examples: a checkpoint to resume from" sh -c "ls -d $T/ckearly/ckpt-* > /dev/null 2>&1"
fi

# the same through tools/submit --slurm's script, Slurm's USR1 to the batch shell played by
# hand (a host file in place of Slurm's allocation): its trap passes it to mpirun
tools/submit configs/tiny.ini --slurm --dry-run --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.sync_ps=1 --set job.readers=2 --set sync.algo=easgd --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set data.train=$T/big/train.tsv --set data.max_examples=400000 \
    --set data.eval=$T/d/eval.tsv --set output.log_interval_s=0.2 --set output.dir=$T/sbatch \
    > $T/job.sbatch 2> $T/job.sbatch.err
echo "localhost slots=6" > $T/hosts
OMPI_MCA_orte_default_hostfile=$T/hosts timeout -k 10 120 sh $T/job.sbatch > $T/sbatch.log 2>&1 &
bg=$!
for i in $(seq 1 600); do grep -q '^\[ *[0-9.]*s\]' $T/sbatch.log && break; sleep 0.05; done
kill -USR1 $(pgrep -f "^sh $T/job.sbatch")
wait $bg
rc=$?
check "tools/submit --slurm's script passes SIGUSR1 on: the job stops, status 75 ($rc), its model saved" \
    sh -c "[ $rc = 75 ] && grep -q '^#SBATCH --signal=B:USR1@120' $T/job.sbatch && grep -q '^shadowsync: stopped (SIGUSR1) after [0-9]* examples; no checkpoint.dir' $T/sbatch.log && [ $(json examples $T/sbatch/metrics.json) -lt 400000 ] && [ -s $T/sbatch/model/dense.bin ]"

check "tools/submit --slurm --dry-run: standard output is the script alone (from #!/bin/sh), the rank count on standard error" \
    sh -c "[ \"\$(head -1 $T/job.sbatch)\" = '#!/bin/sh' ] && grep -q '^# submit: 6 ranks = 2 trainers' $T/job.sbatch.err"
# trainer.device = cuda: the script asks for a GPU per trainer on each node (--gres), or
# --gpus-per-node G; a CPU job asks for none
tools/submit configs/tiny.ini --slurm --dry-run --set job.trainers=3 --set trainer.device=cuda > $T/gpu.txt 2> /dev/null
tools/submit configs/tiny.ini --slurm --dry-run --set trainer.device=cuda --gpus-per-node 8 > $T/gpu8.txt 2> /dev/null
tools/submit configs/tiny.ini --slurm --dry-run --set job.trainers=3 > $T/gpu0.txt 2> /dev/null
check "tools/submit --slurm, trainer.device = cuda: asks for the GPUs (--gres=gpu:3 for 3 trainers, --gpus-per-node 8), none for a CPU job" \
    sh -c "grep -qx '#SBATCH --gres=gpu:3' $T/gpu.txt && grep -qx '#SBATCH --gres=gpu:8' $T/gpu8.txt && ! grep -q 'gres\|gpu' $T/gpu0.txt"
# keys read as shadowsync (GKeyFile) reads them: an indented line is a key of its own (Python's
# configparser took it for a continuation of the line above); submit has shadowsync check it
printf '[job]\nembedding_ps = 1\n  trainers = 2\n[data]\nheader = 0\n    max_examples = 7\n' > $T/indent.ini
tools/submit $T/indent.ini --dry-run > $T/indent.txt 2>&1
rc=$?
check "tools/submit reads an indented key as GKeyFile does (3 ranks: 2 trainers + 1 embedding PS)" \
    sh -c "[ $rc = 0 ] && grep -q 'mpirun -np 3 ' $T/indent.txt"
tools/submit configs/tiny.ini --slurm --dry-run --signal-lead 900 > $T/lead.txt 2>&1
check "tools/submit --slurm --signal-lead 900: the script asks for SIGUSR1 15 minutes ahead" \
    grep -q '^#SBATCH --signal=B:USR1@900$' $T/lead.txt
tools/submit configs/tiny.ini --slurm --dry-run --signal-lead 0 > $T/lead0.txt 2>&1
check "tools/submit --signal-lead 0: refused (status 2), naming the range" \
    sh -c "[ $? = 2 ] && grep -q 'signal-lead 0: seconds from 1 to 65535' $T/lead0.txt"

# a finished job resumed (a requeue that always passes --resume): nothing left, so its model,
# syncs and eval.csv stay as they were, however often (its shadow rounds changed the model)
mkdir -p $T/fin-d && head -20000 $T/d/train.tsv > $T/fin-d/train.tsv
fin() {
    timeout -k 10 120 $MPIRUN -np 4 $BIN train configs/tiny.ini --set job.trainers=2 \
        --set job.embedding_ps=1 --set job.sync_ps=1 --set sync.algo=easgd --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/fin-d/train.tsv --set data.eval=$T/d/eval.tsv \
        --set output.dir=$T/fin --set checkpoint.dir=$T/finck "$@" > $T/fin.log 2>&1
}
fin
cp $T/fin/model/dense.bin $T/fin-dense.bin; S0=$(json syncs $T/fin/metrics.json)
fin --resume && fin --resume
rc=$?
check "a finished cluster job resumed twice: nothing left, the same model, syncs ($S0) and one eval row" \
    sh -c "[ $rc = 0 ] && grep -q '^# nothing left to train' $T/fin.log && cmp -s $T/fin/model/dense.bin $T/fin-dense.bin && [ '$(json syncs $T/fin/metrics.json)' = '$S0' ] && [ \$(wc -l < $T/fin/eval.csv) = 2 ]"

# two reader services feeding one trainer of one worker: a stop and its resume train the
# uninterrupted run's model, bit for bit (its queue goes on with the reader it would have asked
# next, kept in feed-0.pos; it began with the first, so an odd count of batches swapped them)
ord_job() { # OUT [--resume]
    timeout -k 10 120 $MPIRUN -np 4 $BIN train configs/tiny.ini --set job.trainers=1 \
        --set job.embedding_ps=1 --set job.readers=2 --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/fin-d/train.tsv --set data.epochs=8 \
        --set data.eval=$T/d/eval.tsv --set output.log_interval_s=0.1 --set output.quiet=false \
        --set checkpoint.dir=$T/ck-$1 --set output.dir=$T/$1 $2 > $T/$1$2.log 2>&1
}
ord_job ordfull
ord_job ord &
bg=$!
for i in $(seq 1 600); do grep -q '^\[ *[0-9.]*s\]' $T/ord.log && break; sleep 0.05; done
kill -USR1 $(pgrep -f "^/usr/bin/python3 tools/mpiguard.py mpirun .*output.dir=$T/ord\$")
wait $bg
stopped=$(json examples $T/ord/metrics.json)
ord_job ord --resume
rc=$?
check "2 reader services, a stop ($stopped of 160000) and its resume: the uninterrupted run's model, bit for bit" \
    sh -c "[ $rc = 0 ] && [ '$stopped' -lt 160000 ] && ls $T/ck-ord/ckpt-*/feed-0.pos > /dev/null && [ '$(json examples $T/ord/metrics.json)' = 160000 ] && diff -rq $T/ordfull/model $T/ord/model"

# a checkpoint taken under ma resumed under easgd: the sync PSs' center starts as trainer 0's
# replica (it was refused: no center-*.bin)
cluster ma2e sync.algo=ma data.max_examples=20000 checkpoint.dir=$T/ma2eck
timeout -k 10 120 $MPIRUN -np 5 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=2 \
    --set job.sync_ps=1 --set job.bind=127.0.0.1 --set trainer.worker_threads=1 --set sync.algo=easgd \
    --set data.train=$T/d/train.tsv --set data.max_examples=40000 --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/ma2e --set checkpoint.dir=$T/ma2eck --resume > $T/ma2e-b.log 2>&1
rc=$?
check "a cluster checkpoint of ma resumed under easgd: the center starts as trainer 0's replica, the job trains on ($(json examples $T/ma2e/metrics.json))" \
    sh -c "[ $rc = 0 ] && grep -q 'keeps no EASGD center (taken under another sync.algo): the center starts as trainer 0.s replica' $T/ma2e-b.log && [ '$(json examples $T/ma2e/metrics.json)' = 40000 ]"

$MPIRUN -np 3 $BUILD/tests/mpi_collective 2>&1 | grep -E '^(PASS|FAIL)'

# the job's end with a rank stalled before MPI_Finalize, which waits for
# every rank: past twice end_wait_s (here 2 s) the others end the job
timeout -k 5 60 $MPIRUN -np 3 $BUILD/tests/mpi_finalize > $T/fin.log 2>&1
check "every rank finalizes at the job's end" sh -c "[ $? = 0 ] && grep -q '^finalized' $T/fin.log"
start=$(date +%s)
timeout -k 5 60 $MPIRUN -np 3 $BUILD/tests/mpi_finalize stall > $T/fin-stall.log 2>&1
rc=$?; took=$(( $(date +%s) - start ))
check "a rank stalled before MPI_Finalize: the job ends past twice end_wait_s, naming the wait ($rc, $took s)" \
    sh -c "[ $rc != 0 ] && [ $took -le 15 ] && grep -q '^shadowsync: trainer [02] (rank [02] on node[02]): MPI_Finalize has not finished in 2 s' $T/fin-stall.log && ! ps -eo stat=,args= | grep -v '^Z' | grep -q '[m]pi_finalize'"
exit 0
