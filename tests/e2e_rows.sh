#!/bin/sh
# model.rows = auto end to end (docs/data.md, "Sizing tables"): on gen data
# of known vocabularies, each table's ids seen and its rows for 1 % shared
# lookups, said at start and kept in the run's config.ini; eval NE within
# 0.002 of tables sized by hand from the vocabularies by the same rule (and
# no worse than a row per vocabulary entry); model.rows_budget_mb's cut;
# the saved model's eval and a resume taking the rows saved, not sizing
# again; binary shards; the progress line; plan, check, a cluster job
# (its master sizes, every rank the same rows); and the errors that name
# model.rows.
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
. tests/lib.sh

# 26 vocabularies of 10 to 1000 ids: 100,000 examples draw every one
V=10,20,50,100,200,300,500,1000,10,20,50,100,200,300,500,1000,10,20,50,100,200,300,500,1000,500,1000
$BIN gen --out $T/d --examples 100000 --eval-examples 20000 --seed 3 --config $CFG \
    --set model.rows=$V > /dev/null 2>&1
# rows_for N: the fewest rows for at most 1 % of lookups shared among N ids (inspect_rows_for)
rows_for() {
    awk -v n="$1" 'function sh(r) { return r <= 1 ? 1 : 1 - exp((n - 1) * log(1 - 1 / r)) }
        BEGIN { if (n <= 1) { print 1; exit }
                r = int((n - 1) / -log(0.99)) + 1; while (r > 1 && sh(r - 1) <= 0.01) r--
                while (sh(r) > 0.01) r++; print r }'
}
HAND=$(for v in $(echo $V | tr , ' '); do rows_for $v; done | paste -sd, -)
rows_of() { sed -n 's/^rows = //p' "$1" | head -1; }   # model.rows in a run's config.ini
run() { # OUT [--set ...]: tiny.ini, one worker (the same figures each time), on $T/d
    _o=$1; shift
    $BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
        --set trainer.worker_threads=1 --set output.dir=$T/$_o "$@" > $T/$_o.log 2> $T/$_o.err
}

run auto1 --set model.rows=auto
rc=$?
AUTO=$(rows_of $T/auto1/config.ini)
check "auto: the run sizes its tables and trains ($rc)" \
    sh -c "[ $rc = 0 ] && [ -s $T/auto1/metrics.json ] && grep -q '^# model.rows = auto: the distinct ids of each table in all of data.train (100,000 examples, ' $T/auto1.log && grep -qx '# model.rows = $AUTO' $T/auto1.log && [ \$(grep -c '^#   table [0-9]* (data.cat_cols column [0-9]*): [0-9,]* ids -> [0-9,]* rows ([0-9.]* [KM]iB)$' $T/auto1.log) = 26 ]"
# each table's line: its ids the vocabulary's (all but a rare few, and an empty field's id 0),
# its rows the rule's (to a row: awk's logarithms are not C's)
sed -n 's/^#   table \([0-9]*\) .*: \([0-9,]*\) ids -> \([0-9,]*\) rows.*/\1 \2 \3/p' $T/auto1.log | tr -d , > $T/lines
bad=""
i=0
for v in $(echo $V | tr , ' '); do
    set -- $(sed -n "$((i + 1))p" $T/lines)
    want=$(rows_for $2)
    { [ "$1" = $i ] && [ "$2" -ge $((v - v / 100)) ] && [ "$2" -le $((v + 1)) ] &&
      [ "$3" -ge $((want - 1)) ] && [ "$3" -le $((want + 1)) ]; } ||
        bad="$bad [table $i: $*, vocabulary $v]"
    i=$((i + 1))
done
check "auto: each table's ids within 1 % of its vocabulary (+ id 0), its rows the 1 % rule's, as config.ini keeps them${bad:+:$bad}" \
    sh -c "[ -z '$bad' ] && [ \"\$(cut -d' ' -f3 $T/lines | paste -sd, -)\" = '$AUTO' ]"

# eval NE: the mean of 3 seeds each (a seed's runs differ by up to 0.0025 from the
# embeddings' start alone, measured), auto against the hand-sized tables
for s in 1 2 3; do
    [ $s = 1 ] || run auto$s --set model.rows=auto --set job.seed=$s
    run hand$s --set model.rows=$HAND --set job.seed=$s
    run vocab$s --set model.rows=$V --set job.seed=$s
done
mean() { for s in 1 2 3; do json eval_ne $T/$1$s/metrics.json; done | awk '{ s += $1; n++ } END { if (n == 3) printf "%.5f", s / n }'; }
a=$(mean auto); h=$(mean hand); v=$(mean vocab)
check "auto: eval NE $a within 0.002 of the tables sized by hand from the vocabularies ($h)" near "$a" "$h" 0.002
check "auto: eval NE $a no worse than a row per vocabulary entry ($v) + 0.002" lt "$a" "$(awk -v v=$v 'BEGIN { print v + 0.002 }')"

# the saved model scores with the rows it was trained with
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --set model.rows=auto --model $T/auto1 > $T/ev.log 2>&1
rc=$?
check "eval: model.rows = auto takes the saved model's rows, the run's NE ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q '^# model.rows = auto: the rows saved in $T/auto1/model' $T/ev.log && grep -qx '# model.rows = $AUTO' $T/ev.log && awk -v a=\"$(eval_ne_of $T/ev.log)\" -v b=\"$(json eval_ne $T/auto1/metrics.json)\" 'BEGIN { exit !(a != \"\" && a - b < 1e-5 && b - a < 1e-5) }'"
ODD=$(echo $AUTO | awk -F, '{ $3 = $3 + 1; print }' OFS=,)
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --set model.rows=$ODD --model $T/auto1 > $T/ev2.log 2>&1
rc=$?
check "eval: other rows than the model's are refused, naming model.rows and auto ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'table 2 has [0-9]* rows, the config.s [0-9]* (model.rows: give the model.s own, or auto to take them)' $T/ev2.log"

# the budget: every auto table scaled by one factor, within it
run budget --set model.rows=auto --set model.rows_budget_mb=0.5 --set data.max_examples=5000
rc=$?
B=$(rows_of $T/budget/config.ini)
check "model.rows_budget_mb = 0.5: the auto tables scaled down to fit, said ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q '^# model.rows = auto: at 1 % the auto tables would take [0-9.]* MiB, over model.rows_budget_mb = 0.5: each one.s rows scaled by 0.[0-9]*, to [0-9.]* KiB, up to [0-9.]* % of a table.s lookups on shared rows' $T/budget.log && echo $B | tr , '\n' | awk '{ s += \$1 } END { exit !(NR == 26 && s * 36 <= 0.5 * 1048576 && s * 36 > 0.45 * 1048576) }'"
run mixed --set model.rows=7,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto,auto \
    --set data.max_examples=5000
check "a number among the autos is kept, said as given" \
    sh -c "grep -q '^#   table 0 (data.cat_cols column 14): model.rows gives 7 rows' $T/mixed.log && echo '$(rows_of $T/mixed/config.ini)' | grep -q '^7,[0-9]'"

# a resume takes the checkpoint's rows: sizing again (here at another budget) would not
# (the first run sized from its data.max_examples)
run ck1 --set model.rows=auto --set checkpoint.dir=$T/ck --set data.max_examples=50000
run ck2 --set model.rows=auto --set checkpoint.dir=$T/ck --set model.rows_budget_mb=0.5 --resume $T/ck
rc=$?
check "--resume: model.rows = auto takes the rows of the checkpoint it continues from ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q '^# model.rows = auto: the rows saved in $T/ck/ckpt-000001' $T/ck2.log && [ \"$(rows_of $T/ck2/config.ini)\" = \"$(rows_of $T/ck1/config.ini)\" ] && [ \"$(rows_of $T/ck1/config.ini)\" != '$AUTO' ] && grep -q 'resuming from' $T/ck2.log"

# the progress line of a long pass (none when quiet, nor the sizing's lines)
run prog --set model.rows=auto --set output.log_interval_s=0.001 --set data.max_examples=1000
run quiet --set model.rows=auto --set output.log_interval_s=0.001 --set output.quiet=true --set data.max_examples=1000
check "auto: progress lines on stderr every output.log_interval_s, nothing with output.quiet" \
    sh -c "grep -q '^shadowsync: model.rows = auto: [0-9]* examples, 0 bad lines, done [0-9.]*% ([0-9]* examples/s)' $T/prog.err && ! grep -q 'model.rows' $T/quiet.err $T/quiet.log"

# binary shards: their ids counted as the text's
$BIN convert $CFG --in $T/d/train.tsv --out $T/bin > /dev/null 2>&1
$BIN train $CFG --set data.train=$T/bin --set data.eval= --set model.rows=auto \
    --set data.max_examples=1000 --set output.dir=$T/binrun > $T/bin.log 2>&1
rc=$?
check "binary shards: sized from their ids, the text's rows (the first 1000 examples: data.max_examples) ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q '^#   table 0 (binary shards): ' $T/bin.log && [ \"$(rows_of $T/binrun/config.ini)\" = \"$(rows_of $T/prog/config.ini)\" ]"

# plan sizes as train does; check leaves it to the start, saying so
$BIN plan $CFG --set data.train=$T/d/train.tsv --set model.rows=auto --set job.embedding_ps=2 \
    --set output.dir= > $T/plan.log 2>&1
rc=$?
check "plan: the auto tables sized, then placed ($rc)" \
    sh -c "[ $rc = 0 ] && grep -qx '# model.rows = $AUTO' $T/plan.log && grep -q '^placement profile: 26 tables on 2 embedding PSs' $T/plan.log"
$BIN check $CFG --set model.rows=auto > $T/check.out 2> $T/check.err
rc=$?
check "check: the counts, and a note that the auto tables are sized at start ($rc)" \
    sh -c "[ $rc = 0 ] && grep -qx 'trainers 1 embedding_ps 0 sync_ps 0 readers 0' $T/check.out && grep -q 'note: model.rows = auto: the auto tables are sized from data.train when the job starts' $T/check.err"

# errors name model.rows
errs=""
expect() { # PATTERN VERB ARGS...: the command fails with status 1, its stderr matching PATTERN
    _pat=$1; shift
    $BIN "$@" > $T/err.out 2> $T/err.log
    _got=$?
    { [ $_got = 1 ] && grep -q -- "$_pat" $T/err.log; } || errs="$errs [$* -> $_got: $(head -1 $T/err.log)]"
}
expect "gen: model.rows = auto: gen draws each table's ids from as many values as its model.rows" \
    gen --out $T/g --examples 10 --config $CFG --set model.rows=auto
expect "model.rows = auto sizes the tables from the ids in data.train, which is empty" \
    plan $CFG --set data.train= --set model.rows=auto --set job.embedding_ps=1
mkfifo $T/fifo
expect "model.rows = auto reads data.train = $T/fifo before training, and a pipe there cannot be read twice" \
    train $CFG --set data.train=$T/fifo --set data.eval= --set model.rows=auto --set output.dir=$T/ff
expect "model.rows lists 2 tables, the data in data.train = $T/d/train.tsv has 26" \
    train $CFG --set data.train=$T/d/train.tsv --set data.eval= --set model.rows=auto,auto --set output.dir=$T/e2
expect 'model.rows = "auto,x" is not a positive integer (or auto)' \
    train $CFG --set model.rows=auto,x
check "errors name model.rows${errs:+:$errs}" sh -c "[ -z '$errs' ]"

# a cluster job: the master sizes (once, said once), every rank takes the same rows
# (under ASan, Open MPI's own allocations at MPI_Init would read as leaks)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" cluster cl model.rows=auto
rc=$?
check "cluster job: the master sizes the tables as the embedded default does, once ($rc)" \
    sh -c "[ $rc = 0 ] && [ \$(grep -c '^# model.rows = auto: the distinct ids' $T/cl.log) = 1 ] && [ \"$(rows_of $T/cl/config.ini)\" = '$AUTO' ] && grep -q '^eval: examples 20000' $T/cl.log"
$BIN eval $CFG --set data.eval=$T/d/eval.tsv --set model.rows=auto --model $T/cl > $T/clev.log 2>&1
rc=$?
check "cluster job: its saved model (a file per embedding PS) evals with model.rows = auto ($rc)" \
    sh -c "[ $rc = 0 ] && awk -v a=\"$(eval_ne_of $T/clev.log)\" -v b=\"$(json eval_ne $T/cl/metrics.json)\" 'BEGIN { exit !(a != \"\" && a - b < 1e-5 && b - a < 1e-5) }'"
