#!/bin/sh
# `shadowsync plan --trainers` end to end (docs/cluster.md, "Planning the
# sync side"): costs from a real 1-trainer shadow EASGD cluster job on
# loopback (its metrics.json), a line per trainer count that gives back the
# run's own sync gap at 1 trainer and grows with trainers, the CSV and the
# picture, the sync PSs that foreground sync on slow sync-PS links needs,
# and every bad option refused by name.
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
. tests/lib.sh

$BIN gen --out $T/d --examples 30000 --eval-examples 1000 --config $CFG > /dev/null 2>&1
timeout -k 10 300 $MPIRUN -np 3 $BIN train $CFG --set job.trainers=1 --set job.embedding_ps=1 \
    --set job.sync_ps=1 --set sync.algo=easgd --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/one > $T/one.log 2>&1
rc=$?
check "plan's costs: a 1-trainer shadow EASGD cluster job runs ($rc)" \
    sh -c "[ $rc = 0 ] && [ \"\$(sed -n 's/^ *\"syncs\": \([0-9]*\).*/\1/p' $T/one/metrics.json)\" -gt 10 ]"

PLAN="$BIN plan $CFG --set output.dir= --set sync.algo=easgd --set job.sync_ps=1 --set trainer.worker_threads=1"
$PLAN --set output.dir=$T/pl --trainers 1,2,4,8-10 --from $T/one --out $T/plan.png > $T/plan.out 2> $T/plan.err
rc=$?
rows=$(awk '$1 ~ /^[0-9]+$/' $T/plan.out | wc -l)
check "plan --trainers 1,2,4,8-10 --from RUN: a line a count, the run's figures said ($rc, $rows lines$(head -c 300 $T/plan.err | sed 's/^/: /'))" \
    sh -c "[ $rc = 0 ] && [ $rows = 6 ] && grep -q '^# from $T/one/metrics.json: [0-9]* examples/s over 1 trainer(s).*its rounds took' $T/plan.out"
gap_run=$(json avg_sync_gap $T/one/metrics.json)
gap1=$(awk '$1 == 1 { print $6 }' $T/plan.out)
check "plan: at 1 trainer it gives back the run's own sync gap ($gap1 vs $gap_run)" \
    awk -v a="$gap1" -v b="$gap_run" 'BEGIN { exit !(a > 0.8 * b && a < 1.25 * b) }'
check "plan: the shadow's gap and each sync PS's load grow with trainers" \
    sh -c "awk '\$1 ~ /^[0-9]+\$/ { if (n++ && (\$6 < g || \$5 < l)) bad = 1; g = \$6; l = \$5 } END { exit bad }' $T/plan.out"
check "plan: sync_plan.csv in output.dir, a row a count" \
    sh -c "[ \$(wc -l < $T/pl/sync_plan.csv) = 7 ] && head -1 $T/pl/sync_plan.csv | grep -q '^trainers,sync_ps,round_ms'"
if command -v gnuplot > /dev/null; then
    check "plan --out: the picture drawn, its script beside it" \
        sh -c "[ \$(wc -c < $T/plan.png) -gt 10000 ] && grep -q 'foreground gap' $T/plan.gp"
fi

# foreground gap 5 on 10 Mbit/s sync-PS links: 8 trainers need more sync PSs
$PLAN --set sync.mode=foreground --set sync.gap=5 --trainers 8 --trainer-eps 3000 \
    --link 10gbit --sync-link 10mbit > $T/fg.out 2>&1
need=$(awk '$1 == 8 { print $10 }' $T/fg.out)
$PLAN --set sync.mode=foreground --set sync.gap=5 --set job.sync_ps=${need:-1} --trainers 8 \
    --trainer-eps 3000 --link 10gbit --sync-link 10mbit > $T/fg2.out 2>&1
share=$(awk '$1 == 8 { sub("%", "", $9); print $9 }' $T/fg2.out)
check "plan: foreground gap 5 on slow sync-PS links names the sync PSs for 90 % ($need), and with them it gets there ($share %)" \
    sh -c "[ \"${need:-0}\" -gt 1 ] 2>/dev/null && awk -v s='$share' 'BEGIN { exit !(s >= 90) }'"

# refused, naming what is wrong
refused() { # WHAT PATTERN ARGS...: status 1 or 2, PATTERN on stderr
    _w=$1 _p=$2; shift 2
    $PLAN "$@" > /dev/null 2> $T/err.txt
    _rc=$?
    check "plan refuses $_w ($_rc: $(head -c 200 $T/err.txt))" sh -c "[ $_rc -ne 0 ] && grep -q -- '$_p' $T/err.txt"
}
refused "trainer counts out of order" "--trainers 4,2" --trainers 4,2 --trainer-eps 1000
refused "a rate tc would not take" "--link 1gb" --trainers 2 --trainer-eps 1000 --link 1gb
refused "a plan with no trainer EPS" "--trainer-eps E" --trainers 2
refused "sync.algo = none" "sync.algo" --trainers 2 --trainer-eps 1000 --set sync.algo=none
refused "--from without --trainers" "needs --trainers" --from $T/one
refused "--from a directory with no run" "no metrics.json" --trainers 2 --from $T/d
