#!/bin/sh
# Hot embeddings (DESIGN §9, after FAE). The embedded default: with one
# trainer and one worker they change nothing but where the hot rows live
# (the same NE); with 2 trainers each algorithm syncs them; the figures
# (hot rows, share of lookups, examples that never reached the tables);
# checkpoints carry the hot-row list and a resume, an eval of a checkpoint
# and of the saved model read the replica; a GPU trainer (simulated) keeps
# its replica on the host and syncs it the same way. The cluster job: the master's hot rows on every trainer,
# the NE kept, the embedding PSs receive fewer bytes, the saved model
# carries them, EASGD's center on the sync PS holds them.
BIN=${BIN:-${BUILD:-build}/shadowsync}
# SS_HOT_GPU_LIB= (empty): the GPU runs on the real device (tools/gpu-session)
SIM=${SS_HOT_GPU_LIB-${BUILD:-build}/libshadowsync_gpusim.so}
ON=simulated; [ -z "$SIM" ] && ON="on the device"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
N=60000

. tests/lib.sh


$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 5 --config $CFG > /dev/null 2>&1
HOT="hot_embeddings.memory_mb=0.1"

train cold --set trainer.worker_threads=1
train hot --set trainer.worker_threads=1 --set $HOT
check "one trainer, one worker, hot rows: exits 0" test $? = 0
check "the hot rows are found and announced" \
    grep -q '^# hot embeddings: [1-9][0-9]* rows (0.10 MB) replicated on every trainer, found by profiling' $T/hot.log
check "the embedded default says its hot rows save no wire (its tables are in the process)" \
    grep -q '^# hot embeddings: the tables are in this process, so the hot rows save no wire' $T/hot.log
M=$T/hot/metrics.json
check "metrics: hot_rows $(json hot_rows $M) > 1000" lt 1000 "$(json hot_rows $M)"
check "metrics: most lookups served by the replica ($(json hot_lookup_share $M))" \
    lt 0.5 "$(json hot_lookup_share $M)"
check "metrics: some examples never reached the tables ($(json hot_example_share $M))" \
    lt 0 "$(json hot_example_share $M)"
check "metrics: wire bytes saved counted ($(json hot_bytes_saved $M))" lt 1000000 "$(json hot_bytes_saved $M)"
check "metrics without hot rows say 0" test "$(json hot_rows $T/cold/metrics.json)" = 0
NE0=$(json eval_ne $T/cold/metrics.json); NE1=$(json eval_ne $M)
check "one worker: the same train NE with and without hot rows" \
    near "$(json train_ne $M)" "$(json train_ne $T/cold/metrics.json)" 0.0001
check "one worker: the same eval NE with and without hot rows ($NE1 vs $NE0)" near "$NE1" "$NE0" 0.0001
# the rates' schedule reaches the replica's steps: decayed to 0 after the first batch, as the tables
LR="--set optim.decay_examples=1 --set optim.decay_to=0"
train cold_lr --set trainer.worker_threads=1 $LR
train hot_lr --set trainer.worker_threads=1 --set $HOT $LR
check "one worker, decayed to 0 after the first batch: the same eval NE with and without hot rows ($(json eval_ne $T/hot_lr/metrics.json) vs $(json eval_ne $T/cold_lr/metrics.json), trained $NE0)" \
    sh -c "awk -v a='$(json eval_ne $T/hot_lr/metrics.json)' -v b='$(json eval_ne $T/cold_lr/metrics.json)' -v c='$NE0' 'BEGIN { d = a - b; exit !(a != \"\" && d < 1e-4 && d > -1e-4 && a - c > 0.01) }'"
EV=$($BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/hot/model 2>&1 | sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p')
check "the saved model's tables carry the hot rows: eval NE $EV = the run's $NE1" near "$EV" "$NE1" 0.00001

for algo in ma easgd bmuf allreduce; do
    train $algo --set job.trainers=2 --set sync.algo=$algo --set $HOT --set sync.output=average
    rc=$?
    M=$T/$algo/metrics.json
    check "2 trainers, $algo, hot rows: exits 0, every example once" \
        test $rc = 0 -a "$(json examples $M)" = $N
    check "2 trainers, $algo: $(held_is $M $T/cold/metrics.json) of no hot rows" \
        held $M $T/cold/metrics.json
done
check "allreduce syncs the hot rows too: one model at the end ($(json replica_spread $T/allreduce/metrics.json))" \
    test "$(json replica_spread $T/allreduce/metrics.json)" = 0
train none --set job.trainers=2 --set sync.algo=none --set $HOT
check "sync none: said that the hot rows are never synced" grep -q 'sync.algo = none never syncs them' $T/none.log

# checkpoints: the list of hot rows with the replicas; eval and resume read them
CK=$T/ck
train part --set job.trainers=2 --set sync.algo=ma --set $HOT --set checkpoint.dir=$CK \
    --set data.max_examples=30000
check "a checkpoint keeps the hot-row list" sh -c "ls $CK/ckpt-*/hot-rows.bin > /dev/null"
EV=$($BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $CK 2>&1 | sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p')
check "eval of the checkpoint reads trainer 0's replica ($EV vs the run's $(json eval_ne $T/part/metrics.json))" \
    near "$EV" "$(json eval_ne $T/part/metrics.json)" 0.002
$BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/resumed \
    --set job.trainers=2 --set sync.algo=ma --set checkpoint.dir=$CK --resume > $T/resumed.log 2>&1
rc=$?
M=$T/resumed/metrics.json
check "resume: exits 0 with the checkpoint's hot rows (no key given)" \
    sh -c "[ $rc = 0 ] && grep -q 'rows (0.10 MB) replicated on every trainer, as in the checkpoint' $T/resumed.log"
check "resume: trains the rest, every example once in all" test "$(json examples $M)" = $N
check "resume: $(held_is $M $T/cold/metrics.json) of no hot rows" held $M $T/cold/metrics.json
check "resume: the hot figures of the resumed part ($(json hot_lookup_share $M))" lt 0.5 "$(json hot_lookup_share $M)"

# resumed from a checkpoint taken mid-run, where each trainer's replica
# holds steps not yet synced: the first round agrees on them, and
# allreduce's last round still leaves one model
CK2=$T/ck2
train mid --set job.trainers=2 --set sync.algo=allreduce --set $HOT --set checkpoint.dir=$CK2 \
    --set checkpoint.interval_s=0.02 --set data.max_examples=30000
OLDER=$(ls -d $CK2/ckpt-* | sort | head -1)
mkdir -p $T/ck3 && cp -r "$OLDER" $T/ck3/
$BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/mid2 \
    --set job.trainers=2 --set sync.algo=allreduce --set checkpoint.dir=$T/ck3 --resume > $T/mid2.log 2>&1
rc=$?
check "resumed mid-run ($(basename "$OLDER")) under allreduce: exits 0, one model at the end (spread $(json replica_spread $T/mid2/metrics.json))" \
    test $rc = 0 -a "$(json replica_spread $T/mid2/metrics.json)" = 0

# a GPU trainer (the device library's CPU simulation): its replica lives
# on the host beside the staging copy; one trainer of one worker trains what
# the CPU trainer does, 2 trainers sync the replicas, checkpoints carry them
SS_GPU_LIB=$SIM train gpu1 --set trainer.device=cuda --set trainer.worker_threads=1 --set $HOT
rc=$?
M=$T/gpu1/metrics.json
check "trainer.device = cuda with hot rows, 1 x 1: exits 0, every example once, $(json hot_rows $M) hot rows" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $M)\" = $N ] && [ \"$(json hot_rows $M)\" = \"$(json hot_rows $T/hot/metrics.json)\" ]"
check "trainer.device = cuda with hot rows, 1 x 1: eval NE $(json eval_ne $M) within 0.002 of the CPU's $(json eval_ne $T/hot/metrics.json)" \
    near "$(json eval_ne $M)" "$(json eval_ne $T/hot/metrics.json)" 0.002
SS_GPU_LIB=$SIM train gpu2 --set trainer.device=cuda --set job.trainers=2 --set sync.algo=allreduce \
    --set sync.mode=foreground --set sync.gap=1 --set trainer.worker_threads=1 --set $HOT \
    --set checkpoint.dir=$T/gpuck --set checkpoint.interval_s=0.05
rc=$?
M=$T/gpu2/metrics.json
check "GPU trainers, 2 x 1, allreduce gap 1 with hot rows: exits 0, the replicas (hot rows too) equal (spread $(json replica_spread $M)), lookups on them $(json hot_lookup_share $M)" \
    sh -c "[ $rc = 0 ] && [ \"$(json replica_spread $M)\" = 0 ] && awk 'BEGIN { exit !($(json hot_lookup_share $M) > 0.5) }'"
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/gpu2/model > $T/gpu2-eval.log 2>&1
check "GPU trainers with hot rows: the checkpoint holds the hot-row list" sh -c "ls $T/gpuck/ckpt-*/hot-rows.bin > /dev/null"
check "GPU trainers with hot rows: the saved model evaluates to its eval NE" \
    near "$(eval_ne_of $T/gpu2-eval.log)" "$(json eval_ne $M)" 0.000002
OLDER=$(ls -d $T/gpuck/ckpt-* | sort | head -1)
mkdir -p $T/gpuck2 && cp -r "$OLDER" $T/gpuck2/
SS_GPU_LIB=$SIM train gpu3 --set trainer.device=cuda --set job.trainers=2 --set sync.algo=allreduce \
    --set sync.mode=foreground --set sync.gap=1 --set trainer.worker_threads=1 \
    --set checkpoint.dir=$T/gpuck2 --resume
rc=$?
M=$T/gpu3/metrics.json
check "GPU trainers resumed mid-run ($(basename "$OLDER")) with their hot rows: exits 0, every example once ($(json examples $M)), spread $(json replica_spread $M), $(held_is $M $T/gpu2/metrics.json) of the uninterrupted run" \
    eval "[ $rc = 0 ] && [ \"$(json examples $M)\" = $N ] && [ \"$(json replica_spread $M)\" = 0 ] && grep -q 'hot embeddings: [1-9][0-9]* rows .* as in the checkpoint' $T/gpu3.log && held $M $T/gpu2/metrics.json"
train none-hot --set $HOT --set hot_embeddings.min_lookups=100000000
check "no row hot enough: said so, and it trains without" sh -c \
    "grep -q 'no row is looked up 100000000 times' $T/none-hot.log && test \"\$(sed -n 's/^ *\"hot_rows\": \([0-9]*\),/\1/p' $T/none-hot/metrics.json)\" = 0"
train tiny-hot --set hot_embeddings.memory_mb=0.00002 --set hot_embeddings.min_lookups=1 --set data.max_examples=2000
check "hot_embeddings.memory_mb below one row: said so (not min_lookups), it trains without" sh -c \
    "grep -q '^# hot embeddings: hot_embeddings.memory_mb = 2e-05 holds no row (one takes' $T/tiny-hot.log && ! grep -q '^# hot embeddings: .*min_lookups' $T/tiny-hot.log"
# plan: the sync PSs' partitions of a center that holds the hot rows after the dense floats
$BIN plan $CFG --set data.train=$T/d/train.tsv --set job.embedding_ps=2 --set job.sync_ps=2 \
    --set $HOT --set output.dir=$T/hotplan > $T/hotplan.log 2>&1
check "plan with hot rows: the sync PSs split the center of dense floats and hot rows" \
    sh -c "[ $? = 0 ] && grep -q '^# hot embeddings: [1-9][0-9]* rows, in the center' $T/hotplan.log && grep -q '^sync_ps 1: center floats \[[0-9]*, [0-9]*)' $T/hotplan.log"
train bad --set $HOT --set hot_embeddings.min_lookups=0
check "hot_embeddings.min_lookups = 0: refused, naming the key" grep -q 'hot_embeddings.min_lookups' $T/bad.log

# the cluster job: the master's hot rows on every rank, the sync PSs' center
# holds them too (easgd), the PSs see fewer bytes; the saved model carries them
ps_in() { sed -n 's/^# embedding_ps 0 (rank 2 .* in \([0-9.]*\) MB out.*/\1/p' $1; }
cluster c-cold sync.algo=ma
cluster c-hot sync.algo=ma $HOT
rc=$?
M=$T/c-hot/metrics.json
check "cluster ma with hot rows: exits 0, every example once over 2 trainers" \
    test $rc = 0 -a "$(json examples $M)" = $N
check "cluster: the master's hot rows announced, and not as saving no wire" \
    sh -c "grep -q '^# hot embeddings: [1-9][0-9]* rows' $T/c-hot.log && ! grep -q 'save no wire' $T/c-hot.log"
check "cluster: $(held_is $M $T/cold/metrics.json) of the embedded default" \
    held $M $T/cold/metrics.json
check "cluster: hot figures summed over the trainers ($(json hot_lookup_share $M) of lookups)" \
    sh -c "$(json hot_lookup_share $M | awk '{ print ($1 > 0.5) ? "true" : "false" }') && \
           test $(json hot_batches_without_tables $M) -ge 0"
IN0=$(ps_in $T/c-cold.log); IN1=$(ps_in $T/c-hot.log)
check "cluster: an embedding PS receives fewer bytes ($IN1 MB vs $IN0 MB without hot rows)" lt "$IN1" "$IN0"
EV=$($BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/c-hot/model 2>&1 | sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p')
check "cluster: the saved model (hot.bin beside the PSs' tables) reproduces eval NE $(json eval_ne $M)" \
    near "$EV" "$(json eval_ne $M)" 0.00001
SS_GPU_LIB=$SIM cluster c-gpu sync.algo=ma trainer.device=cuda $HOT
rc=$?
M=$T/c-gpu/metrics.json
check "cluster, GPU trainers ($ON) with hot rows: exits 0, every example once, $(held_is $M $T/c-hot/metrics.json) of the CPU trainers" \
    eval "[ $rc = 0 ] && [ \"$(json examples $M)\" = $N ] && grep -q 'the dense layers on CUDA device' $T/c-gpu.log && held $M $T/c-hot/metrics.json"
cluster c-easgd sync.algo=easgd $HOT
rc=$?
check "cluster easgd with hot rows: the sync PS's center holds them, exits 0" \
    test $rc = 0 -a "$(json examples $T/c-easgd/metrics.json)" = $N
