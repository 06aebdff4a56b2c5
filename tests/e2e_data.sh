#!/bin/sh
# Bringing one's own data (docs/data.md): a libFM file and its TSV twin
# train to the same eval NE (1 worker: the same steps in the same order);
# a weight of 2 trains as the id written twice; libSVM's index:value with
# data.fields; inspect reads libsvm; every path carries the weights (hot
# rows, the cache, embedding PSs, DES, reader services, binary shards);
# the bad lines and keys are named;
# configs/avazu.ini on a small file of Avazu's CSV format (columns by
# name, no dense column).
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
. tests/lib.sh
PY=/usr/bin/python3

$BIN gen --out $T/d --examples 20000 --eval-examples 4000 --seed 5 --config $CFG > /dev/null 2>&1
# to_fm W [FIELDS]: gen's TSV as libFM lines (dense field j = column 1 + j,
# table t = field 13 + t, its hex token as a decimal index, value W; W dup:
# the feature twice, each of value 1); with
# FIELDS, libSVM's index:value instead (dense j at index j + 1, table t's
# ids moved past 100 + t * 2^32: data.fields' ranges)
cat > $T/to_fm.py <<'PYEOF'
import sys
w, plain = sys.argv[1], len(sys.argv) > 2
for line in sys.stdin:
    f = line.rstrip('\n').split('\t')
    out = [f[0] if f[0] == '1' else ('-1' if plain else '0')]
    for j in range(13):
        if f[1 + j] != '':
            out.append('%d:%s' % (j + 1, f[1 + j]) if plain else '%d:%d:%s' % (j, j, f[1 + j]))
    for t in range(26):
        if f[14 + t] != '':
            v = int(f[14 + t], 16)
            if plain:
                out.append('%d:%s' % (100 + (t << 32) + v, w))
            elif w == 'dup':  # the id twice, weight 1 each
                out += ['%d:%d:1' % (13 + t, v)] * 2
            else:
                out.append('%d:%d:%s' % (13 + t, v, w))
    print(' '.join(out))
PYEOF
for s in train eval; do
    $PY $T/to_fm.py 1 < $T/d/$s.tsv > $T/$s.fm
done
FM="--set data.format=libsvm --set data.dense_cols=0-12 --set data.cat_cols=13-38 --set data.eval=$T/eval.fm"
ONE="--set trainer.worker_threads=1"

train tsv $ONE
$BIN train $CFG $FM $ONE --set data.train=$T/train.fm --set output.dir=$T/fm > $T/fm.log 2>&1
rc=$?
a=$(json eval_ne $T/tsv/metrics.json); b=$(json eval_ne $T/fm/metrics.json)
check "libFM and its TSV twin: the same eval NE to 1e-6 with 1 worker ($a, $b; rc $rc)" \
    near "$a" "$b" 0.000001
check "libFM: the run trained every line ($(json examples $T/fm/metrics.json) examples, bad lines $(json bad_lines $T/fm/metrics.json))" \
    sh -c "[ \"$(json examples $T/fm/metrics.json)\" = 20000 ] && [ \"$(json bad_lines $T/fm/metrics.json)\" = 0 ]"

# libSVM's index:value, fields by range (labels -1/+1)
ranges="1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,13-13"
for t in $(seq 0 25); do
    lo=$((100 + (t << 32))); ranges="$ranges,$lo-$((lo + 4294967295))"
done
for s in train eval; do
    $PY $T/to_fm.py 1 plain < $T/d/$s.tsv > $T/$s.svm
done
head -c 200 $T/train.svm > $T/head.svm
$BIN train $CFG $ONE --set data.format=libsvm --set data.fields=$ranges --set data.dense_cols=0-12 \
    --set data.cat_cols=13-38 --set data.train=$T/train.svm --set data.eval=$T/eval.svm \
    --set model.rows=1000 --set output.dir=$T/svm > $T/svm.log 2>&1
c=$(json eval_ne $T/svm/metrics.json)
check "libSVM index:value with data.fields trains (eval NE $c, the twin's $a: ids moved past 2^32 hash to other rows)" \
    sh -c "[ -n '$c' ] && awk -v c=$c -v a=$a 'BEGIN { d = c - a; exit !(d < 0.02 && d > -0.02) }'"

# weighted bags: a weight of 2 is the id twice (SGD on the rows: the same steps)
$PY $T/to_fm.py 2 < $T/d/train.tsv > $T/w2.fm
$PY $T/to_fm.py dup < $T/d/train.tsv > $T/dup.fm
SGD="--set optim.emb=sgd --set optim.emb_lr=0.02"
# pair NAME [--set ...]: w2.fm and dup.fm trained (SGD on the rows, 1 worker)
# into $T/NAMEw2 and $T/NAMEdup; $w2 and $dup their eval NE
pair() {
    _n=$1; shift
    for _f in w2 dup; do
        $BIN train $CFG $FM $ONE $SGD --set data.train=$T/$_f.fm --set output.dir=$T/$_n$_f "$@" \
            > $T/$_n$_f.log 2>&1
    done
    w2=$(json eval_ne $T/${_n}w2/metrics.json); dup=$(json eval_ne $T/${_n}dup/metrics.json)
}
# same A B: within 1e-4
same() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-4 && d > -1e-4) }'; }
pair plain
w=$w2
check "a weight of 2 trains as the id written twice (eval NE $w2, $dup)" same "$w2" "$dup"
check "the weights change the model (weight 2: $w; weight 1: $b)" \
    sh -c "! awk -v a=$w -v b=$b 'BEGIN { d = a - b; exit !(d < 0.0001 && d > -0.0001) }'"

# hot rows pool and step weighted ids as the tables do
pair hot --set hot_embeddings.memory_mb=0.05
share=$(json hot_lookup_share $T/hotw2/metrics.json)
check "with hot rows too, a weight of 2 trains as the id twice (eval NE $w2, $dup; hot lookups $share)" \
    sh -c "awk -v a='$w2' -v b='$dup' -v s='$share' 'BEGIN { d = a - b; exit !(a != \"\" && d < 0.0001 && d > -0.0001 && s > 0.3) }'"

# a cluster job's wires carry the weights: a reader service sends them, the
# embedding PSs pool and step with them (1 trainer, 1 worker, fp32 on the
# wire: the embedded run's steps)
timeout -k 10 300 $MPIRUN -np 4 $BIN train $CFG $FM $ONE $SGD --set job.trainers=1 \
    --set job.embedding_ps=2 --set job.sync_ps=0 --set job.readers=1 --set job.bind=127.0.0.1 \
    --set embedding.wire=fp32 --set data.train=$T/w2.fm --set output.dir=$T/cw2 > $T/cw2.log 2>&1
rc=$?
cw=$(json eval_ne $T/cw2/metrics.json)
check "a cluster job (a reader service, 2 embedding PSs) trains weighted bags as the embedded run does (eval NE $cw, $w; rc $rc)" \
    near "$cw" "$w" 0.000001

# DES (the tables' shards on the trainers) sends each id's weight with its
# lookups: weight 2 trains as the id twice there too (2 trainers, no sync:
# the rounds in lockstep, the same steps each run; no schedule, whose clock
# takes each trainer's share times the others' pace from their reports)
for f in w2 dup train; do
    timeout -k 10 300 $MPIRUN -np 2 $BIN train $CFG $FM $ONE $SGD --set job.trainers=2 \
        --set job.embedding_ps=0 --set job.sync_ps=0 --set job.bind=127.0.0.1 \
        --set embedding.placement=trainers --set sync.algo=none --set data.train=$T/$f.fm \
        --set optim.schedule=manual \
        --set output.dir=$T/des$f > $T/des$f.log 2>&1
done
a=$(json eval_ne $T/desw2/metrics.json); b1=$(json eval_ne $T/desdup/metrics.json)
o=$(json eval_ne $T/destrain/metrics.json)
check "DES: a weight of 2 trains as the id twice (eval NE $a, $b1; weight 1: $o)" \
    sh -c "awk -v a='$a' -v b='$b1' -v o='$o' 'BEGIN { d = a - b; e = a - o; exit !(a != \"\" && d < 1e-6 && d > -1e-6 && (e > 1e-4 || e < -1e-4)) }'"

# the embedding cache pools and steps its rows with the weights too
pair cache --set embedding_cache.rows=1000
check "with the embedding cache, a weight of 2 trains as the id twice (eval NE $w2, $dup; hits $(json cache_hit_rate $T/cachew2/metrics.json))" \
    same "$w2" "$dup"

# binary shards of libsvm data keep each id's weight: trained on, they give
# the text's eval NE (1 worker)
$BIN convert $CFG $FM --in $T/w2.fm --out $T/w2bin > $T/conv.log 2>&1
rc=$?
$BIN train $CFG $FM $ONE $SGD --set data.train=$T/w2bin --set output.dir=$T/w2b > $T/w2b.log 2>&1
sb=$(json eval_ne $T/w2b/metrics.json)
check "libsvm into binary shards keeps the weights: the text's eval NE ($sb, $w; convert rc $rc)" \
    near "$sb" "$w" 0.000001
# inspect reads libsvm
$BIN inspect $CFG $FM --set data.train=$T/train.fm --sample 5000 --json $T/fm.json > $T/fm.txt 2>&1
$BIN inspect $CFG --set data.train=$T/d/train.tsv --sample 5000 --json $T/tsv.json > /dev/null 2>&1
ids() { sed -n 's/.*{"table": [0-9]*, .*"ids": \([0-9]*\),.*/\1/p' "$1" | tr '\n' ' '; }
check "inspect on libFM: each table's ids as on its TSV twin" \
    sh -c "[ -n \"$(ids $T/fm.json)\" ] && [ \"$(ids $T/fm.json)\" = \"$(ids $T/tsv.json)\" ]"

# bad lines and keys, named
printf '1 13:5:1\n2 13:5:1\nx\n0 13:zz:1\n' > $T/bad.fm
$BIN train $CFG $FM --set data.train=$T/bad.fm --set data.eval= --set output.dir=$T/bad > $T/bad.log 2>&1
check "libsvm bad lines named by file:line and reason" \
    sh -c "grep -q 'bad.fm:2: label \"2\" is not 0/1 or -1/+1' $T/bad.log && grep -q 'bad.fm:4: feature \"13:zz:1\" is not' $T/bad.log"
$BIN train $CFG $FM --set data.fields=1-5,3-9 --set data.train=$T/train.fm > $T/key.log 2>&1
check "an overlapping data.fields is named" grep -q "data.fields: fields 0 and 1 share indices" $T/key.log

# configs/avazu.ini on a small file in Avazu's own format (tests/avazu_like.py:
# its header and columns, clicks from a few of them): columns by name, no
# dense column (the bottom MLP's constant input), ids hashed
$PY tests/avazu_like.py 30000 1 > $T/av_train.csv
$PY tests/avazu_like.py 5000 2 > $T/av_eval.csv
AV="--set data.train=$T/av_train.csv --set data.eval=$T/av_eval.csv --set model.rows=20000"
$BIN train configs/avazu.ini $AV --set output.dir=$T/av > $T/av.log 2>&1
rc=$?
ne=$(json eval_ne $T/av/metrics.json); auc=$(json eval_auc $T/av/metrics.json)
check "configs/avazu.ini trains on Avazu's CSV (rc $rc, eval NE $ne, AUC $auc: the clicks follow site, app and hour)" \
    sh -c "[ $rc = 0 ] && [ \"$(json bad_lines $T/av/metrics.json)\" = 0 ] && awk -v n=$ne -v a=$auc 'BEGIN { exit !(n < 0.95 && a > 0.7) }'"
$BIN inspect configs/avazu.ini $AV --json $T/av.json > $T/av.txt 2>&1
check "inspect on Avazu's CSV: 22 tables by name, hour's 24 ids exact, no dense column" \
    sh -c "[ \$(grep -c '{\"table\": ' $T/av.json) = 22 ] && grep -q '{\"table\": 0, \"col\": 2, \"ids\": 24,' $T/av.json && grep -q '^0 *none ' $T/av.txt"
$BIN train configs/avazu.ini $AV --set data.cat_cols=hour,C99 > $T/avbad.log 2>&1
check "a column name not in the header is named, with the file and its names" \
    grep -q "no column is named \"C99\" in the header of $T/av_train.csv (data.separator \",\"): id, click, hour" $T/avbad.log
$BIN train configs/avazu.ini $AV --set data.header=0 > $T/avh.log 2>&1
check "names without data.header say to set it" grep -q "set data.header = 1" $T/avh.log
$BIN train configs/avazu.ini $AV --set model.bottom=13-16 > $T/avb.log 2>&1
check "no dense column with a bottom MLP of 13 inputs: told to start model.bottom at 1" \
    grep -q "start model.bottom at 1" $T/avb.log
