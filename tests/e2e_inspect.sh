#!/bin/sh
# `shadowsync inspect` end to end (docs/data.md, "inspect"): on gen data of
# known shape, the whole pass's distinct ids within 3 % of the exact count
# (a --sample over the whole file), the exact counts as awk counts the
# fields, a short --sample, the JSON's fields, CTR and dense figures as awk
# computes them; the counted share of shared rows on hand-made ids, bags,
# bad lines, binary shards, the progress line, and the errors that name
# their flag or key; a run's start-up collision check (the tables named on
# data of more ids, none on data that fits, off, the threshold, a cluster
# job's master).
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
. tests/lib.sh

# 26 tables of 10 to 20M rows: gen draws each one's ids from that many, so
# some tables hold a few ids (counted) and some tens of thousands (sketched)
R=10,100,1000,10000,100000,1000000,10,100,1000,10000,100000,1000000,10,100,1000,10000,100000,1000000,10,100,1000,10000,100000,1000000,5000000,20000000
$BIN gen --out $T/d --examples 60000 --eval-examples 10 --seed 3 --config $CFG \
    --set model.rows=$R > /dev/null 2>&1
D="--set data.train=$T/d/train.tsv --set model.rows=$R"
# ids_of FILE: each table's ids, one a line, in table order
ids_of() { sed -n 's/.*{"table": [0-9]*, .*"ids": \([0-9]*\),.*/\1/p' "$1"; }

$BIN inspect $CFG $D --json $T/whole.json > $T/whole.txt 2> $T/whole.err
rc=$?
check "inspect: the whole pass succeeds ($rc)" sh -c "[ $rc = 0 ] && [ -s $T/whole.json ]"
$BIN inspect $CFG $D --sample 1000000 --json $T/exact.json > $T/exact.txt 2>&1
ids_of $T/whole.json > $T/whole.ids; ids_of $T/exact.json > $T/exact.ids
worst=$(paste $T/whole.ids $T/exact.ids | awk '{ d = ($1 - $2) / $2; d = d < 0 ? -d : d; if (d > w) w = d; n++ } END { if (n != 26) print "missing"; else printf "%.4f", w }')
check "inspect: every table's distinct ids within 3 % of the exact count (worst $worst)" \
    lt "$worst" 0.03
sketched=$(grep -c '"ids_exact": false' $T/whole.json)
check "inspect: tables past 4096 ids are HyperLogLog estimates ($sketched of 26), marked ~" \
    sh -c "[ $sketched -ge 10 ] && [ \$(grep -c '^[0-9]* .* ~[0-9]' $T/whole.txt) = $sketched ] && grep -q '\"shared_method\": \"uniform hashing\"' $T/whole.json"

# the exact counts: every distinct field (an empty one is id 0) of columns 14-39
awk -F'\t' '{ for (i = 15; i <= 40; i++) if (!seen[i, $i]++) n[i]++ } END { for (i = 15; i <= 40; i++) print n[i] }' \
    $T/d/train.tsv > $T/awk.ids
check "inspect --sample over the whole file: each table's ids exactly as awk counts them" \
    sh -c "[ \$(wc -l < $T/awk.ids) = 26 ] && cmp -s $T/awk.ids $T/exact.ids && ! grep -q '\"ids_exact\": false' $T/exact.json"
$BIN inspect $CFG $D --sample 1000 --json $T/s1k.json > /dev/null 2>&1
head -1000 $T/d/train.tsv | awk -F'\t' '{ for (i = 15; i <= 40; i++) if (!seen[i, $i]++) n[i]++ } END { for (i = 15; i <= 40; i++) print n[i] }' > $T/awk1k.ids
ids_of $T/s1k.json > $T/s1k.ids
check "inspect --sample 1000: 1000 examples, their ids exact" \
    sh -c "[ \"$(json examples $T/s1k.json)\" = 1000 ] && [ \"$(json sample $T/s1k.json)\" = 1000 ] && [ \"$(json pass $T/s1k.json)\" = sample ] && cmp -s $T/awk1k.ids $T/s1k.ids"

missing=""
for k in data_train pass sample lines examples bad_lines labeled ctr exact_ids_max hll_registers \
    ids_std_error dim bytes_per_row seconds peak_rss_mb; do
    grep -q "^  \"$k\": " $T/whole.json || missing="$missing $k"
done
for k in table col ids ids_exact lookups empty rows shared shared_method shared_uniform rows_1pct \
    memory_bytes memory_bytes_1pct; do
    [ "$(grep '{"table": ' $T/whole.json | grep -c "\"$k\": ")" = 26 ] || missing="$missing categorical.$k"
done
for k in feature col missing min max mean; do
    [ "$(grep '{"feature": ' $T/whole.json | grep -c "\"$k\": ")" = 13 ] || missing="$missing dense.$k"
done
check "inspect --json: every field, 26 tables and 13 dense features${missing:+ (missing:$missing)}" \
    sh -c "[ -z \"$missing\" ] && python3 -m json.tool $T/whole.json > /dev/null"
check "inspect: 26 table and 13 dense lines in the text" \
    sh -c "[ \$(grep -c '^[0-9]' $T/whole.txt) = 39 ] && grep -q '^table  *col  *ids  *lookups' $T/whole.txt && grep -q '^dense  *col  *missing' $T/whole.txt"

# CTR and dense column 1 (feature 0) as awk computes them
awk -F'\t' '{ y += $1; if ($2 == "") m++; else { v = $2 + 0; if (!k++ || v < lo) lo = v; if (v > hi) hi = v; s += v } }
    END { printf "%.6f %.6f %g %g %.6f\n", y / NR, m / NR, lo, hi, s / k }' $T/d/train.tsv > $T/awk.dense
read ctr miss lo hi mean < $T/awk.dense
d0=$(grep '{"feature": 0,' $T/whole.json)
got() { echo "$d0" | sed -n "s/.*\"$1\": \([-0-9.e]*\).*/\1/p"; }
check "inspect: CTR $(json ctr $T/whole.json) as awk's $ctr" near "$(json ctr $T/whole.json)" "$ctr" 1e-6
check "inspect: dense 0 missing $(got missing), min $(got min), max $(got max), mean $(got mean) as awk's" \
    sh -c "awk -v a=$(got missing) -v b=$miss 'BEGIN { exit !(a - b < 1e-6 && b - a < 1e-6) }' && [ $(got min) = $lo ] && [ $(got max) = $hi ] && awk -v a=$(got mean) -v b=$mean 'BEGIN { exit !(a - b < 1e-4 * b && b - a < 1e-4 * b) }'"

# counted shares on ids whose rows are known: dec ids 1, 6, 2 in 5 rows share
# row 1 (2 of 3 lookups); in 10 rows none. A bad dense value is a bad line.
printf '1,0.5,1\n0,,6\n0,2,2\n1,x,2\n' > $T/dec.csv
CSV="--set data.train=$T/dec.csv --set data.format=csv --set data.separator=, --set data.label_col=0 --set data.dense_cols=1 --set data.cat_cols=2 --set data.cat_encoding=dec"
$BIN inspect $CFG $CSV --set model.rows=5 --json $T/dec5.json > $T/dec5.txt 2> $T/dec5.err
$BIN inspect $CFG $CSV --set model.rows=10 --json $T/dec10.json > /dev/null 2>&1
t5=$(grep '{"table": 0,' $T/dec5.json); t10=$(grep '{"table": 0,' $T/dec10.json)
check "inspect: ids 1, 6, 2 in 5 rows: 2 of 3 lookups shared, counted; none in 10 rows" \
    sh -c "echo '$t5' | grep -q '\"ids\": 3, \"ids_exact\": true, \"lookups\": 3, .*\"shared\": 0.66666667, \"shared_method\": \"counted\", \"shared_uniform\": 0.36,' && echo '$t10' | grep -q '\"shared\": 0,'"
check "inspect: the bad line named and counted; dense missing 1/3, mean 1.25; CTR 1/3" \
    sh -c "grep -q 'dec.csv:4: column 1: dense value \"x\" is not a number' $T/dec5.err && [ \"$(json bad_lines $T/dec5.json)\" = 1 ] && grep -q '{\"feature\": 0, \"col\": 1, \"missing\": 0.33333333, \"min\": 0.5, \"max\": 2, \"mean\": 1.25}' $T/dec5.json && [ \"$(json ctr $T/dec5.json)\" = 0.33333333 ]"
# a bag's ids are each a lookup
printf '1\t0.5\t1,6,6\n0\t\t2\n' > $T/bag.tsv
$BIN inspect $CFG --set data.train=$T/bag.tsv --set data.format=csv --set data.label_col=0 \
    --set data.dense_cols=1 --set data.cat_cols=2 --set data.multihot_cols=2 \
    --set data.cat_encoding=dec --set model.rows=100 --json $T/bag.json > /dev/null 2>&1
check "inspect: a bag's ids each a lookup (4 lookups, 3 ids)" \
    grep -q '{"table": 0, "col": 2, "ids": 3, "ids_exact": true, "lookups": 4,' $T/bag.json

# binary shards: the same ids; no missing mark
$BIN convert $CFG --in $T/d/train.tsv --out $T/bin > /dev/null 2>&1
$BIN inspect $CFG --set data.train=$T/bin --set model.rows=$R --sample 1000000 --json $T/bin.json > $T/bin.txt 2>&1
ids_of $T/bin.json > $T/bin.ids
check "inspect on binary shards: the text's exact ids, missing and col null" \
    sh -c "cmp -s $T/exact.ids $T/bin.ids && grep -q '{\"feature\": 0, \"col\": null, \"missing\": null,' $T/bin.json"

$BIN inspect $CFG $D --set output.log_interval_s=0.001 > /dev/null 2> $T/prog.err
$BIN inspect $CFG $D --set output.log_interval_s=0.001 --set output.quiet=true > /dev/null 2> $T/quiet.err
check "inspect: progress lines on stderr every output.log_interval_s, none when quiet" \
    sh -c "grep -q '^shadowsync: inspect: [0-9]* examples, 0 bad lines, done [0-9.]*% ([0-9]* examples/s)' $T/prog.err && ! grep -q inspect: $T/quiet.err"

# errors name their flag or key
errs=""
expect() { # RC PATTERN ARGS...: the run fails with RC, its stderr matching PATTERN
    _rc=$1; _pat=$2; shift 2
    $BIN inspect "$@" > $T/err.out 2> $T/err.log
    _got=$?
    { [ $_got = $_rc ] && grep -q -- "$_pat" $T/err.log; } || errs="$errs [$* -> $_got: $(head -1 $T/err.log)]"
}
expect 2 "--sample 0 reads no example" $CFG $D --sample 0
expect 2 '--sample = "many" is not a non-negative integer' $CFG $D --sample many
expect 2 "unknown option or missing value: --rows" $CFG $D --rows 5
expect 2 "inspect needs a CONFIG file" $D
expect 1 "data.train is empty" $CFG --set data.train=
expect 1 "model.rows lists 3 tables, the data in data.train = .* has 26 categorical" $CFG \
    --set data.train=$T/d/train.tsv --set model.rows=1,2,3
expect 1 "--json $T/d/train.tsv" $CFG $D --json $T/d/train.tsv
expect 1 "--json $T/none/x.json: No such file" $CFG $D --json $T/none/x.json
printf 'not data\n' > $T/bad.tsv
expect 1 "no example was read from data.train = $T/bad.tsv (1 bad lines" $CFG \
    --set data.train=$T/bad.tsv --json $T/bad.json
check "inspect: errors name the flag or key, usage errors exit 2${errs:+:$errs}" \
    sh -c "[ -z '$errs' ] && [ ! -e $T/bad.json ]"

# A run's start-up collision check (data.collision_check_batches, docs/data.md):
# configs/criteo_kaggle.ini's tables (at dim 2, to allocate little: the check
# reads model.rows alone) on data of the peer's shape, 200,000 ids a
# column, warn of its 16 tables with fewer rows than the ids in the first
# 200 batches; on data of its own shape (gen --config), none
$BIN gen --out $T/peer --examples 30000 --eval-examples 10 --seed 5 --config configs/peer.ini > /dev/null 2>&1
$BIN gen --out $T/ck --examples 30000 --eval-examples 10 --seed 5 --config configs/criteo_kaggle.ini > /dev/null 2>&1
ck() { # OUT DATA [--set ...]: criteo_kaggle.ini, briefly, its stderr in $T/OUT.err
    _o=$1 _d=$2; shift 2
    $BIN train configs/criteo_kaggle.ini --set data.train=$T/$_d/train.tsv --set data.eval= \
        --set data.max_examples=256 --set output.dir=$T/$_o --set output.quiet=true \
        --set model.dim=2 --set model.bottom=13-2 --set model.top=auto-1 \
        --set trainer.worker_threads=1 "$@" > $T/$_o.out 2> $T/$_o.err
}
ck ckpeer peer
rc=$?
W='^shadowsync: warning: table'
check "collision check: criteo_kaggle.ini on the peer's data names its small tables, once, even with output.quiet ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q '$W 5 (data.cat_cols column 19): [0-9,]* distinct ids in the first 25,600 examples share model.rows = 24 rows: 100.0 % of its lookups land on a row shared with another id; model.rows >= [0-9,]* would bring that under 1 % ([0-9.]* MiB)' $T/ckpeer.err && grep -q '$W 8 (data.cat_cols column 22): .* model.rows = 3 rows' $T/ckpeer.err && [ \$(grep -c '$W' $T/ckpeer.err) = 10 ] && grep -q 'warning: and 6 more tables like them' $T/ckpeer.err && grep -q 'warning: 16 of 26 tables hold more distinct ids than rows, over 10 % of their lookups on shared rows (data.collision_warn), in the first 25,600 examples of data.train' $T/ckpeer.err && ! grep -q '$W 2 ' $T/ckpeer.err"
ck ckown ck
rc=$?
check "collision check: criteo_kaggle.ini on data of its own shape warns of nothing ($rc)" \
    sh -c "[ $rc = 0 ] && ! grep -q 'distinct ids' $T/ckown.err && grep -q '^train: examples 256 ' $T/ckown.out"
ck ckoff peer --set data.collision_check_batches=0
rc=$?
check "collision check: data.collision_check_batches = 0 checks nothing ($rc)" \
    sh -c "[ $rc = 0 ] && ! grep -q 'distinct ids' $T/ckoff.err"
tiny() { # OUT [--set ...]: tiny.ini with 50 rows a table on the peer's data
    _o=$1; shift
    $BIN train $CFG --set data.train=$T/peer/train.tsv --set data.eval= --set model.rows=50 \
        --set data.max_examples=256 --set output.dir=$T/$_o "$@" > $T/$_o.out 2> $T/$_o.err
}
tiny t2 --set data.collision_check_batches=2
check "collision check: 2 batches of 128 examples, the first 10 tables named, then the rest counted" \
    sh -c "[ \$(grep -c '$W [0-9]* (.*in the first 256 examples share model.rows = 50 rows' $T/t2.err) = 10 ] && grep -q 'warning: and 16 more tables like them' $T/t2.err && grep -q 'warning: 26 of 26 tables .* in the first 256 examples' $T/t2.err"
tiny t1 --set data.collision_warn=1
check "collision check: none over data.collision_warn = 1" sh -c "! grep -q 'distinct ids' $T/t1.err && [ -s $T/t1.out ]"
# (under e2e_sanitize's ASan, Open MPI's own allocations at MPI_Init would
# read as leaks: the check's code is the embedded runs' above, leaks checked)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    timeout -k 10 120 $MPIRUN -np 2 $BIN train $CFG --set job.embedding_ps=1 --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set data.train=$T/peer/train.tsv --set data.eval= \
    --set model.rows=50 --set data.max_examples=256 --set output.dir=$T/tc > $T/tc.log 2>&1
rc=$?
check "collision check: a cluster job's master warns as the embedded default does, once ($rc)" \
    sh -c "[ $rc = 0 ] && [ \$(grep -c '$W [0-9]* (.*in the first 25,600 examples share model.rows = 50 rows' $T/tc.log) = 10 ] && [ \$(grep -c 'warning: 26 of 26 tables' $T/tc.log) = 1 ]"
