#!/bin/sh
# The embedding cache (DESIGN §9, after HET). The embedded default: with
# staleness 0 and one worker it trains as without a cache (the same NE, to
# float rounding); with 2 trainers of 2 workers the NE holds, most lookups
# hit and fewer wire bytes would cross; checkpoints, resume, hot rows and a
# (simulated) GPU trainer go with it; bad keys are refused by name. The
# cluster job: every example once, the NE held, the embedding PSs receive
# and send fewer bytes, and the saved model holds every update (the caches
# are flushed before it is written).
BIN=${BIN:-${BUILD:-build}/shadowsync}
SIM=${BUILD:-build}/libshadowsync_gpusim.so
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
N=60000

. tests/lib.sh


$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 5 --config $CFG > /dev/null 2>&1
CACHE="embedding_cache.rows=30000"

train plain --set trainer.worker_threads=1
NE0=$(json eval_ne $T/plain/metrics.json)
train s0 --set trainer.worker_threads=1 --set $CACHE --set embedding_cache.staleness=0
rc=$?
M=$T/s0/metrics.json
check "one worker, staleness 0: exits 0, every example once" test $rc = 0 -a "$(json examples $M)" = $N
check "one worker, staleness 0: eval NE $(json eval_ne $M) = no cache's $NE0 (to rounding)" \
    near "$(json eval_ne $M)" "$NE0" 0.002
# the rates' schedule reaches the cache's steps: decayed to 0 after the first batch, as the tables
LR="--set optim.decay_examples=1 --set optim.decay_to=0"
train plain_lr --set trainer.worker_threads=1 $LR
train s2_lr --set trainer.worker_threads=1 --set $CACHE $LR
check "one worker, decayed to 0 after the first batch: the same eval NE with and without a cache ($(json eval_ne $T/s2_lr/metrics.json) vs $(json eval_ne $T/plain_lr/metrics.json), trained $NE0)" \
    sh -c "awk -v a='$(json eval_ne $T/s2_lr/metrics.json)' -v b='$(json eval_ne $T/plain_lr/metrics.json)' -v c='$NE0' 'BEGIN { d = a - b; exit !(a != \"\" && d < 1e-4 && d > -1e-4 && a - c > 0.01) }'"
# a power-of-two size uses every set: row r of each table in one set of its own, not one set
# for row r of every table (there 16384 rows hit 82 % against 16000's 97 %)
train p2 --set trainer.worker_threads=1 --set embedding_cache.rows=16384 --set data.max_examples=20000
train np2 --set trainer.worker_threads=1 --set embedding_cache.rows=16000 --set data.max_examples=20000
H2=$(json cache_hit_rate $T/p2/metrics.json); H1=$(json cache_hit_rate $T/np2/metrics.json)
check "a cache of 16384 rows hits as 16000 do ($H2 vs $H1)" \
    awk -v a="$H2" -v b="$H1" 'BEGIN { exit !(a != "" && b != "" && a > b - 0.02) }'
train capped --set trainer.worker_threads=1 --set embedding_cache.rows=100000000 --set data.max_examples=2000
check "a cache asked past twice the tables' rows: metrics.json gives the rows made ($(json cache_rows_per_worker $T/capped/metrics.json), 2 x 26 x 1000)" \
    test "$(json cache_rows_per_worker $T/capped/metrics.json)" = 52000
# the PS keeps a clock a row for the caches: the plan's memory counts it (2.6M rows x 4 B)
for k in 0 3000; do
    $BIN plan $CFG --set data.train=$T/d/train.tsv --set job.embedding_ps=1 --set model.rows=100000 \
        --set embedding_cache.rows=$k --set output.dir=$T/pm$k 2>&1 | awk '$1 == 0 { print $3 }' > $T/pm$k.mib
done
check "plan: a PS's memory counts its rows' clocks with a cache ($(cat $T/pm0.mib) vs $(cat $T/pm3000.mib) MiB)" \
    awk -v a="$(cat $T/pm0.mib)" -v b="$(cat $T/pm3000.mib)" 'BEGIN { d = b - a; exit !(a != "" && d > 9.8 && d < 10.1) }'
train stale --set embedding_cache.rows=3000 --set embedding_cache.staleness=1000 --set data.max_examples=2000
check "staleness 1000 with 2 worker caches: warned, naming the key; staleness 0 with one: not" \
    sh -c "grep -q 'warning: embedding_cache.staleness = 1000 with 2 worker caches' $T/stale.log && ! grep -q 'warning: embedding_cache.staleness' $T/s0.log"
check "one worker, staleness 0: the cache announced and its line printed" \
    sh -c "grep -q '^# embedding cache: 30000 rows per worker thread (.* MB each), staleness 0' $T/s0.log && grep -q '^cache: hits [0-9.]* %' $T/s0.log"
# caches past the memory free here, on any machine: refused before any is made (3968 workers x
# 5.2M rows, twice the tables' 2.6M, x 96 bytes: 2 TB; the thread cap is 4096 with the shadow
# threads)
train cbig --set model.rows=100000 --set job.trainers=128 --set trainer.worker_threads=31 \
    --set embedding_cache.rows=10000000
check "embedding caches past the free memory: refused before training, with the need and the room, capped at twice the tables' rows" \
    sh -c "[ $? = 1 ] && grep -q '^shadowsync: the embedding caches here need [0-9]* MB (3968 worker thread(s) x 5200000 rows of model.dim 8 and their deltas), more than the [0-9]* MB of memory free here: fewer embedding_cache.rows' $T/cbig.log && ! [ -e $T/cbig/progress.csv ]"

# a mid-run eval scores the updates the caches hold back: the rates decayed to 0 over the first
# 20000 examples, every eval after that of one worker is the frozen model's, with or without
# a cache that sends nothing on its own (staleness 1e6)
EV="--set trainer.worker_threads=1 --set optim.decay_examples=20000 --set output.eval_every=15000"
train ev_plain $EV
train ev_cache $EV --set $CACHE --set embedding_cache.staleness=1000000
# (to 1e-5: the tables add the cache's deltas in another order; without the flush it was 0.08 off)
REF=$(tail -1 $T/ev_plain/eval.csv | cut -d, -f4)
check "mid-run evals with a cache score its held-back updates: the frozen model's NE ($(awk -F, 'NR > 1 && $1 > 25000 { printf "%s ", $4 }' $T/ev_cache/eval.csv)vs $REF)" \
    awk -F, -v r="$REF" 'NR > 1 && $1 > 25000 { n++; d = $4 - r; if (d > 1e-5 || d < -1e-5) bad = 1 } END { exit !(r != "" && n >= 2 && !bad) }' $T/ev_cache/eval.csv

train t2 --set job.trainers=2 --set sync.algo=ma
train t2c --set job.trainers=2 --set sync.algo=ma --set $CACHE
M=$T/t2c/metrics.json
check "2 trainers x 2 workers, staleness 2: $(held_is $M $T/t2/metrics.json) of no cache" \
    held $M $T/t2/metrics.json
check "metrics: lookups hit ($(json cache_hit_rate $M))" lt 0.2 "$(json cache_hit_rate $M)"
check "metrics: none uncached with room for every row ($(json cache_uncached_share $M))" \
    test "$(json cache_uncached_share $M)" = 0
check "metrics: wire bytes saved ($(json cache_bytes_saved $M) of $(json cache_bytes_sent $M) sent)" \
    lt "$(json cache_bytes_sent $M)" "$(json cache_bytes_saved $M)"
check "metrics: rows fetched, refreshed and deltas pushed counted" \
    sh -c "test $(json cache_rows_fetched $M) -gt 0 -a $(json cache_rows_refreshed $M) -gt 0 -a $(json cache_deltas_pushed $M) -gt 0"

train small --set job.trainers=2 --set sync.algo=ma --set embedding_cache.rows=600
M=$T/small/metrics.json
check "a cache smaller than a batch's rows: the rest as without one (uncached $(json cache_uncached_share $M)), $(held_is $M $T/t2/metrics.json)" \
    eval "$(json cache_uncached_share $M | awk '{ print ($1 > 0.1) ? "true" : "false" }') && held $M $T/t2/metrics.json"

# checkpoints: every worker flushes its cache before the snapshot
CK=$T/ck
train mid --set job.trainers=2 --set sync.algo=ma --set $CACHE --set checkpoint.dir=$CK \
    --set checkpoint.interval_s=0.02 --set data.max_examples=30000
OLDER=$(ls -d $CK/ckpt-* | sort -t- -k2 -n | head -1)
rm -rf $T/ck2 && mkdir -p $T/ck2 && cp -r "$OLDER" $T/ck2/
$BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set output.dir=$T/res \
    --set job.trainers=2 --set sync.algo=ma --set $CACHE --set checkpoint.dir=$T/ck2 --resume > $T/res.log 2>&1
rc=$?
M=$T/res/metrics.json
check "resumed from a mid-run checkpoint ($(basename "$OLDER")): exits 0, every example once" \
    test $rc = 0 -a "$(json examples $M)" = $N
check "resumed: $(held_is $M $T/t2/metrics.json) of no cache" held $M $T/t2/metrics.json

train hot --set job.trainers=2 --set sync.algo=ma --set $CACHE --set hot_embeddings.memory_mb=0.05
M=$T/hot/metrics.json
check "with hot rows: the cache serves the cold ids ($(json hot_lookup_share $M) hot, $(json cache_hit_rate $M) hits), $(held_is $M $T/t2/metrics.json)" \
    eval "$(json cache_hit_rate $M | awk '{ print ($1 > 0.3) ? "true" : "false" }') && held $M $T/t2/metrics.json"

SS_GPU_LIB=$SIM train gpu --set trainer.device=cuda --set trainer.worker_threads=1 --set $CACHE \
    --set embedding_cache.staleness=0
M=$T/gpu/metrics.json
check "a GPU trainer (simulated) with the cache: eval NE $(json eval_ne $M) near no cache's $NE0" \
    near "$(json eval_ne $M)" "$NE0" 0.01

train bad --set embedding_cache.staleness=-1
check "embedding_cache.staleness = -1: refused, naming the key" \
    sh -c "! grep -q '^train:' $T/bad.log && grep -q 'embedding_cache.staleness' $T/bad.log"

# the cluster job: 2 trainers, 2 embedding PSs
ps_mb() { sed -n "s/^# embedding_ps 0 (rank 2 .* in \([0-9.]*\) MB out \([0-9.]*\) MB.*/\\$2/p" $1; }
# (the cache's rows and deltas travel in fp32 whatever embedding.wire says: against the bf16
# default's lookups and pushes this job's PS got 5 % more bytes with the cache, 2026-12-02; the
# bytes compared here are on one wire)
cluster c-plain sync.algo=ma embedding.wire=fp32
cluster c-cache sync.algo=ma $CACHE embedding.wire=fp32
rc=$?
M=$T/c-cache/metrics.json
check "cluster ma with the cache: exits 0, every example once over 2 trainers" \
    test $rc = 0 -a "$(json examples $M)" = $N
check "cluster: $(held_is $M $T/c-plain/metrics.json) of no cache" \
    held $M $T/c-plain/metrics.json
check "cluster: cache figures summed over the trainers ($(json cache_hit_rate $M) hits)" \
    lt 0.2 "$(json cache_hit_rate $M)"
IN0=$(ps_mb $T/c-plain.log 1); IN1=$(ps_mb $T/c-cache.log 1)
OUT0=$(ps_mb $T/c-plain.log 2); OUT1=$(ps_mb $T/c-cache.log 2)
check "cluster, fp32 on the wire: an embedding PS receives fewer bytes ($IN1 MB vs $IN0 MB without the cache)" \
    lt "$IN1" "$IN0"
check "cluster: ...and sends fewer ($OUT1 MB vs $OUT0 MB)" lt "$OUT1" "$OUT0"
EV=$($BIN eval $CFG --set data.eval=$T/d/eval.tsv --model $T/c-cache/model 2>&1 | sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p')
check "cluster: the saved model holds every update (eval NE $EV = the run's $(json eval_ne $M))" \
    near "$EV" "$(json eval_ne $M)" 0.00001
