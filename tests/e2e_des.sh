#!/bin/sh
# DES (DESIGN §9, after Distributed Equivalent Substitution):
# embedding.placement = trainers. The embedded default: one trainer of one
# worker trains the same model as the shared tables; 2 trainers x 2
# workers hold the NE of the PS placement, every example once, the model
# saved as one file per trainer that `shadowsync eval` reads; Persia's
# synchronous setting keeps the replicas equal, and foreground sync goes
# with checkpoints; a run killed with kill -9
# resumes onto 3 trainers, every example once; a (simulated) GPU trainer
# goes with it; what does not go with it is refused by name. The cluster
# job: trainers only (with a reader service), every example once, the NE
# held; its checkpoints pause every group and a killed job resumes.
# Multi-hot bags cross as partial sums.
BIN=${BIN:-${BUILD:-build}/shadowsync}
SIM=${BUILD:-build}/libshadowsync_gpusim.so
T=$(mktemp -d)
trap '[ -n "$KEEP" ] && echo "kept $T" || rm -rf "$T"' EXIT
CFG=configs/tiny.ini
N=60000

. tests/lib.sh

$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 5 --config $CFG > /dev/null 2>&1
DES="embedding.placement=trainers"

train one --set job.trainers=1 --set trainer.worker_threads=1
train one_des --set job.trainers=1 --set trainer.worker_threads=1 --set $DES
rc=$?
M=$T/one_des/metrics.json
check "one trainer, one worker: exits 0, every example once" test $rc = 0 -a "$(json examples $M)" = $N
check "one trainer, one worker: eval NE $(json eval_ne $M) = the shared tables' $(json eval_ne $T/one/metrics.json)" \
    near "$(json eval_ne $M)" "$(json eval_ne $T/one/metrics.json)" 0.000001

# ...and under the rates' schedule, which crosses the exchange with each push
LR="--set optim.warmup_examples=20000 --set optim.decay_start=30000 --set optim.decay_examples=30000"
train one_lr --set job.trainers=1 --set trainer.worker_threads=1 $LR
train one_des_lr --set job.trainers=1 --set trainer.worker_threads=1 --set $DES $LR
check "one trainer, one worker, warmup and decay: eval NE $(json eval_ne $T/one_des_lr/metrics.json) = the shared tables' $(json eval_ne $T/one_lr/metrics.json), not the unscheduled one's" \
    sh -c "awk -v a='$(json eval_ne $T/one_des_lr/metrics.json)' -v b='$(json eval_ne $T/one_lr/metrics.json)' -v c='$(json eval_ne $T/one/metrics.json)' 'BEGIN { d = a - b; f = a - c; exit !(a != \"\" && d < 1e-6 && d > -1e-6 && (f > 1e-4 || f < -1e-4)) }'"

# 2 trainers: a push to the other's shard steps at the pusher's factor. Decayed to 0 after the
# job's first batch, the two trainers' first batches go in one round, the data's first at 1 and
# the second at 0, so both shards are the first batch's alone, whichever trainer took it (SGD;
# round_robin: the profile's plan moves with timings)
SGD="--set optim.dense=sgd --set optim.emb=sgd --set job.trainers=2 --set trainer.worker_threads=1 --set $DES --set placement.strategy=round_robin"
train des_lr0 $SGD --set optim.decay_examples=1 --set optim.decay_to=0
train des_b1 $SGD --set data.max_examples=128
mkdir -p $T/d2 && tail -n +129 $T/d/train.tsv > $T/d2/train.tsv
train des_b2 $SGD --set data.max_examples=128 --set data.train=$T/d2/train.tsv
same_shards() { cmp -s $T/des_lr0/model/tables-trainer0.bin $T/$1/model/tables-trainer0.bin && cmp -s $T/des_lr0/model/tables-trainer1.bin $T/$1/model/tables-trainer1.bin; }
if same_shards des_b1; then ONE_BATCH=yes; else ONE_BATCH=no; fi
check "DES, 2 trainers, the data's first batch at 1 and its second at 0 in one round: both shards are the first batch's ($ONE_BATCH)" \
    sh -c "[ '$(json examples $T/des_lr0/metrics.json)' = $N ] && ! cmp -s $T/des_b1/model/tables-trainer0.bin $T/des_b2/model/tables-trainer0.bin && [ $ONE_BATCH = yes ]"

train ps --set job.trainers=2 --set sync.algo=ma
train des --set job.trainers=2 --set sync.algo=ma --set $DES
rc=$?
M=$T/des/metrics.json
check "2 trainers x 2 workers: exits 0, every example once" test $rc = 0 -a "$(json examples $M)" = $N
check "2 trainers x 2 workers: $(held_is $M $T/ps/metrics.json) of the PS placement" \
    held $M $T/ps/metrics.json
check "the start names the shards and the end prints the des line" \
    sh -c "grep -q '^# DES: 26 tables in [0-9]* shards over 2 trainers' $T/des.log && grep -q '^des: rounds [1-9][0-9]*  lookups [1-9]' $T/des.log"
check "metrics: the placement, the rounds and the bytes" \
    sh -c "[ \"$(json embedding_placement $M)\" = trainers ] && [ \"$(json des_rounds $M)\" -gt 0 ] && awk 'BEGIN { exit !($(json des_bytes_sent $M) > 0) }'"
check "one-process DES: its plan stays in output.dir" sh -c "[ -s $T/des/placement.txt ] && [ -s $T/des/placement.json ]"
check "the model: one file of tables per trainer, no other" \
    sh -c "ls $T/des/model | grep -c '^tables' | grep -qx 2 && [ -f $T/des/model/tables-trainer0.bin ] && [ -f $T/des/model/tables-trainer1.bin ]"
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/des/model > $T/eval.log 2>&1
check "shadowsync eval of the model: the training's eval NE" \
    near "$(eval_ne_of $T/eval.log)" "$(json eval_ne $M)" 0.000002

train sync --set job.trainers=2 --set sync.algo=allreduce --set sync.mode=foreground \
    --set sync.gap=1 --set $DES
M=$T/sync/metrics.json
check "allreduce, foreground, gap 1: every example once, the replicas equal (spread $(json replica_spread $M))" \
    sh -c "[ \"$(json examples $M)\" = $N ] && [ \"$(json replica_spread $M)\" = 0 ]"

# multi-hot data (gen --bag-size): a lookup sends one partial sum per bag
# and shard, not the bag's rows, so the wire is well under the rows' (the
# embedding lr lowered and one worker each: sums of up to 7 rows at 0.05
# train unsteadily, and 2 Hogwild workers spread the NE)
$BIN gen --out $T/mh --examples $N --eval-examples 5000 --seed 5 --config $CFG \
    --set data.multihot_cols=14-21 --bag-size 4 > $T/mhgen.log 2>&1
check "gen --bag-size: 8 multi-hot features, bags of 1 to 7 ids, the train file has them" \
    sh -c "grep -q '^# 8 multi-hot feature(s), bags of 1 to 7 ids' $T/mhgen.log && cut -f15 $T/mh/train.tsv | grep -q ','"
check "gen: a config that reads another layout (decimal ids) is refused, naming the keys" \
    sh -c "! $BIN gen --out $T/gx --examples 10 --config $CFG --set data.format=csv --set data.cat_encoding=dec 2> $T/gx.log && grep -q 'the config.s data.cat_encoding = dec (gen writes hex ids) reads another layout' $T/gx.log"
MH="--set data.train=$T/mh/train.tsv --set data.eval=$T/mh/eval.tsv --set data.multihot_cols=14-21
    --set optim.emb_lr=0.02 --set trainer.worker_threads=1"
train mhps $MH --set job.trainers=2 --set sync.algo=ma
train mhdes $MH --set job.trainers=2 --set sync.algo=ma --set $DES
rc=$?
M=$T/mhdes/metrics.json
check "multi-hot: exits 0, every example once" test $rc = 0 -a "$(json examples $M)" = $N
check "multi-hot: $(held_is $M $T/mhps/metrics.json) of the PS placement" \
    held $M $T/mhps/metrics.json
check "multi-hot: the wire $(json des_bytes_sent $M) B is under 0.75 of the rows' $(json des_bytes_rows $M) B" \
    awk "BEGIN { exit !($(json des_bytes_sent $M) < 0.75 * $(json des_bytes_rows $M)) }"

# model.pooling = mean on the same bags: a bag pools to its sum over its
# length whatever summed it (the tables in process, DES's partial sums),
# and a model or checkpoint keeps its pooling
MEAN="$MH --set model.pooling=mean"
train mhsum1 $MH
train mean1 $MEAN --set checkpoint.dir=$T/meanck
train mean1_des $MEAN --set $DES
M=$T/mean1_des/metrics.json
check "mean pooling, 1 trainer x 1 worker: DES's eval NE $(json eval_ne $M) = the tables' in process $(json eval_ne $T/mean1/metrics.json)" \
    near "$(json eval_ne $M)" "$(json eval_ne $T/mean1/metrics.json)" 0.000001
check "mean pooling trains another model than sum's: eval NE $(json eval_ne $T/mean1/metrics.json) vs $(json eval_ne $T/mhsum1/metrics.json)" \
    eval "! near $(json eval_ne $T/mean1/metrics.json) $(json eval_ne $T/mhsum1/metrics.json) 0.0001 && lt $(json eval_ne $T/mean1/metrics.json) 0.98"
train meanps $MEAN --set job.trainers=2 --set sync.algo=ma
train meandes $MEAN --set job.trainers=2 --set sync.algo=ma --set $DES
check "mean pooling, 2 trainers: DES $(held_is $T/meandes/metrics.json $T/meanps/metrics.json) of the PS placement" \
    held $T/meandes/metrics.json $T/meanps/metrics.json
EVSETS="--set data.eval=$T/mh/eval.tsv --set data.multihot_cols=14-21"
$BIN eval $CFG $EVSETS --set model.pooling=mean --model $T/mean1/model > $T/meaneval.log 2>&1
check "shadowsync eval of a mean-pooled model: the training's eval NE" \
    near "$(eval_ne_of $T/meaneval.log)" "$(json eval_ne $T/mean1/metrics.json)" 0.000002
$BIN eval $CFG $EVSETS --model $T/mean1/model > $T/sumeval.log 2>&1
check "eval of a mean-pooled model with sum pooling: refused, naming both" \
    sh -c "[ $? != 0 ] && grep -q 'dense.bin: trained with model.pooling = mean, the config has sum' $T/sumeval.log"
train meanres $MH --set checkpoint.dir=$T/meanck --resume
check "resuming a mean-pooled checkpoint with sum pooling: refused, naming both" \
    sh -c "[ $? != 0 ] && grep -q 'trained with model.pooling = mean, the config has sum' $T/meanres.log"

# foreground sync with checkpoints every 0.1 s: no group waits on a paused
# trainer, no trainer on a group (3 trainers x 2 workers)
$BIN gen --out $T/big --examples 300000 --eval-examples 2000 --seed 6 --config $CFG > /dev/null 2>&1
train fgck --set data.train=$T/big/train.tsv --set job.trainers=3 --set sync.algo=ma \
    --set sync.mode=foreground --set sync.gap=2 --set $DES --set checkpoint.dir=$T/fgck \
    --set checkpoint.interval_s=0.1
rc=$?
M=$T/fgck/metrics.json
check "foreground MA with checkpoints every 0.1 s: exits 0, every example once, $(json checkpoints $M) checkpoints" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $M)\" = 300000 ] && [ \"$(json checkpoints $M)\" -ge 2 ]"

# kill -9 mid-run, then resume onto 3 trainers (the tables resharded)
wait_ckpt() { for i in $(seq 1 300); do tail -1 $1/ckpt-*/MANIFEST 2>/dev/null | grep -q '^end' && return 0; sleep 0.05; done; return 1; }
($BIN train $CFG --set data.train=$T/big/train.tsv --set data.eval= --set output.dir=$T/cut --set job.trainers=2 \
    --set sync.algo=ma --set $DES --set checkpoint.dir=$T/ck --set checkpoint.interval_s=0.2 \
    > $T/cut.log 2>&1 &)
wait_ckpt $T/ck; sleep 0.3
pkill -9 -f "output.dir=$T/cut "; sleep 0.3
check "a run killed with kill -9 left a complete checkpoint of the shards" \
    sh -c "ls $T/ck/ckpt-*/tables-trainer1.bin > /dev/null && ! [ -f $T/cut/metrics.json ]"
$BIN train $CFG --set data.train=$T/big/train.tsv --set data.eval=$T/big/eval.tsv \
    --set output.dir=$T/res --set job.trainers=3 --set sync.algo=ma --set $DES \
    --set checkpoint.dir=$T/ck --resume > $T/res.log 2>&1
rc=$?
M=$T/res/metrics.json
check "resume onto 3 trainers: exits 0, every example once over the kill ($(json examples $M))" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $M)\" = 300000 ] && grep -q 'over 3 trainers' $T/res.log"
check "resume onto 3 trainers: the eval NE of a trained model ($(json eval_ne $M))" lt "$(json eval_ne $M)" 0.95

SS_GPU_LIB=$SIM train gpu --set job.trainers=2 --set sync.algo=ma --set trainer.device=cuda --set $DES
rc=$?
M=$T/gpu/metrics.json
check "trainer.device = cuda (simulated): every example once, $(held_is $M $T/des/metrics.json) of the CPU" \
    eval "[ $rc = 0 ] && [ \"$(json examples $M)\" = $N ] && held $M $T/des/metrics.json"

train hot --set $DES --set hot_embeddings.memory_mb=0.1
check "hot embeddings with DES: refused naming both keys" \
    sh -c "[ $? != 0 ] && grep -q 'embedding.placement = trainers with hot_embeddings.memory_mb > 0' $T/hot.log"
# a checkpoint with hot rows resumed under DES: refused naming both (it crashed)
train hotck --set hot_embeddings.memory_mb=0.01 --set data.max_examples=10000 --set checkpoint.dir=$T/hotck_ck
train hotdes --set $DES --set checkpoint.dir=$T/hotck_ck --resume
check "a checkpoint with hot rows resumed under DES: refused, naming the checkpoint and embedding.placement" \
    sh -c "[ $? = 1 ] && grep -q 'hotck_ck/ckpt-[0-9]*: the checkpoint keeps [0-9]* hot rows replicated on every trainer, which embedding.placement = trainers (DES) does not support.*embedding.placement = ps' $T/hotdes.log"
train cache --set $DES --set embedding_cache.rows=1000
check "an embedding cache with DES: refused naming both keys" \
    sh -c "[ $? != 0 ] && grep -q 'embedding.placement = trainers with embedding_cache.rows > 0' $T/cache.log"
train bad --set embedding.placement=workers
check "a bad embedding.placement: refused with the choices" \
    sh -c "[ $? != 0 ] && grep -q 'embedding.placement' $T/bad.log && grep -q 'trainers' $T/bad.log"

# the cluster job: 2 trainers and a reader service
des_job() {
    _name=$1; _np=$2; shift 2
    _sets=""; for _s in "$@"; do _sets="$_sets --set $_s"; done
    timeout -k 10 200 $MPIRUN -np $_np $BIN train $CFG --set job.trainers=2 --set job.embedding_ps=0 \
        --set job.bind=127.0.0.1 --set $DES --set sync.algo=ma --set output.dir=$T/$_name $_sets \
        $EXTRA > $T/$_name.log 2>&1
}
des_job c 3 job.readers=1 data.train=$T/d/train.tsv data.eval=$T/d/eval.tsv
rc=$?
M=$T/c/metrics.json
check "cluster, 2 trainers + a reader: exits 0, every example once" test $rc = 0 -a "$(json examples $M)" = $N
check "cluster: $(held_is $M $T/des/metrics.json) of the embedded default" \
    held $M $T/des/metrics.json
check "cluster: each trainer saved its shards" \
    sh -c "[ -f $T/c/model/tables-trainer0.bin ] && [ -f $T/c/model/tables-trainer1.bin ]"
des_job cps 4 job.readers=1 job.embedding_ps=1 data.train=$T/d/train.tsv
check "cluster: embedding PSs with DES are refused" \
    sh -c "[ $? != 0 ] && grep -q 'set job.embedding_ps = 0' $T/cps.log"
des_job cfg 2 data.train=$T/big/train.tsv data.eval=$T/big/eval.tsv trainer.worker_threads=1 sync.algo=bmuf \
    sync.mode=foreground sync.gap=1 checkpoint.dir=$T/cfgck checkpoint.interval_s=0.1
rc=$?
M=$T/cfg/metrics.json
check "cluster: foreground BMUF, gap 1, checkpoints every 0.1 s: exits 0, every example once" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $M)\" = 300000 ] && [ \"$(json checkpoints $M)\" -ge 2 ]"
rm -rf $T/ck
(des_job ccut 3 job.readers=1 data.train=$T/big/train.tsv data.eval= checkpoint.dir=$T/ck checkpoint.interval_s=0.3 &)
wait_ckpt $T/ck; sleep 0.4
pkill -9 -f "output.dir=$T/ccut "; sleep 0.5
check "cluster: a job killed with kill -9 left a complete checkpoint" \
    sh -c "ls $T/ck/ckpt-*/tables-trainer0.bin > /dev/null && ! [ -f $T/ccut/metrics.json ]"
EXTRA=--resume des_job cres 3 job.readers=1 data.train=$T/big/train.tsv data.eval=$T/big/eval.tsv \
    checkpoint.dir=$T/ck checkpoint.interval_s=0.3
rc=$?
M=$T/cres/metrics.json
check "cluster: the resumed job exits 0, every example once ($(json examples $M)), checkpoints taken" \
    sh -c "[ $rc = 0 ] && [ \"$(json examples $M)\" = 300000 ] && [ \"$(json checkpoints $M)\" -ge 1 ]"
