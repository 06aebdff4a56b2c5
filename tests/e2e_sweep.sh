#!/bin/sh
# `shadowsync sweep` end to end (docs/tuning.md): a grid of 3 alphas (one
# out of range) x 2 thread counts, 2 runs each, stopped by SIGTERM after
# its first runs and started again: only the missing runs run (the kept
# ones' files untouched); the table (CSV and markdown: a row per setting,
# mean and sd as the runs' metrics.json give them, the refused setting
# with its reason), the Pareto front marked as the figures say, the
# picture; a run that fails is kept failed, and run again with
# --retry-failed; a cluster job's settings through tools/submit.
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
. tests/lib.sh

$BIN gen --out $T/d --examples 20000 --eval-examples 2000 --config $CFG > /dev/null 2>&1
D="--set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set job.trainers=2 --set sync.algo=easgd --set output.save_model=false"
GRID="--vary sync.alpha=0.1,0.5,7 --vary trainer.worker_threads=1,2 --repeat 2"

$BIN sweep $CFG $D $GRID --out $T/sw > $T/first.log 2>&1 &
pid=$!
for i in $(seq 600); do
    grep -q '^sweep: run 3 of 12: done' $T/first.log && break
    sleep 0.1
done
kill -TERM $pid
wait $pid
rc=$?
first=$(grep -c ': done in ' $T/first.log)
check "sweep: SIGTERM after the first runs stops it with status 75 ($rc), $first runs finished" \
    sh -c "[ $rc = 75 ] && [ $first -ge 3 ] && [ $first -lt 8 ] && grep -q 'sweep stopped (Terminated)' $T/first.log"
check "sweep: a stopped sweep's table has the settings not run yet" \
    sh -c "grep -q 'not run' $T/sw/results.md && [ \$(grep -c '^\"' $T/sw/results.csv) = 6 ]"
ls -l --time-style=+%s.%N $T/sw/runs/*/rep*/metrics.json 2> /dev/null | awk '{ print $6, $7 }' > $T/kept.before
grep -l '"stopped_by"' $T/sw/runs/*/rep*/metrics.json > /dev/null 2>&1 && stopped=1 || stopped=0

$BIN sweep $CFG $D $GRID --out $T/sw > $T/second.log 2>&1
rc=$?
kept=$(grep -c ': kept (finished earlier)' $T/second.log)
ran=$(grep -c ': done in ' $T/second.log)
check "sweep again: keeps the $first finished runs, runs only the $((8 - first)) missing ($rc: kept $kept, ran $ran)" \
    sh -c "[ $rc = 0 ] && [ $kept = $first ] && [ $ran = $((8 - first)) ] && [ \$(grep -c '^sweep: run [0-9]* of 12: ' $T/second.log) = $((12 + ran)) ]"
ls -l --time-style=+%s.%N $T/sw/runs/*/rep*/metrics.json | awk '{ print $6, $7 }' > $T/all.after
check "sweep again: the kept runs' metrics.json untouched (a run stopped half-way: $stopped, run anew)" \
    sh -c "[ -s $T/kept.before ] && [ \$(grep -v -F -x -f $T/all.after $T/kept.before | wc -l) -le $stopped ] && [ \$(wc -l < $T/all.after) = 8 ] && ! grep -q stopped_by $T/sw/runs/*/rep*/metrics.json"
check "sweep: a progress line per run, naming its setting and repeat" \
    grep -q '^sweep: run 4 of 12: sync.alpha=0.1 trainer.worker_threads=2 (repeat 2 of 2)' $T/second.log

# the table: a row per setting, the varied keys first
csv=$T/sw/results.csv
check "sweep table: results.csv's header and 6 rows" \
    sh -c "head -1 $csv | grep -q '^sync.alpha,trainer.worker_threads,runs,failed,eps,eps_sd,train_ne,train_ne_sd,eval_ne,eval_ne_sd,eval_auc,eval_auc_sd,syncs_per_s,syncs_per_s_sd,sync_gap,sync_gap_sd,best,status$' && [ \$(wc -l < $csv) = 7 ]"
check "sweep table: the out-of-range alpha is a failed setting with its reason, the sweep went on" \
    sh -c "[ \$(grep -c '^\"7\",\"[12]\",0,2,.*\"failed: config: sync.alpha = 7 is out of range' $csv) = 2 ] && grep -q 'refused: config: sync.alpha = 7' $T/second.log"
check "sweep table: the 4 other settings ran twice each, ok" \
    sh -c "[ \$(grep -c '^\"0\.[15]\",\"[12]\",2,0,.*,\"ok\"$' $csv) = 4 ]"
# mean and sd of the setting alpha 0.5 x 2 threads from its runs' metrics.json
R=$T/sw/runs/sync.alpha=0.5,trainer.worker_threads=2
a=$(json eval_ne $R/rep1/metrics.json); b=$(json eval_ne $R/rep2/metrics.json)
row=$(grep '^"0.5","2",' $csv)
got_mean=$(echo "$row" | cut -d, -f9); got_sd=$(echo "$row" | cut -d, -f10)
want=$(awk -v a=$a -v b=$b 'BEGIN { m = (a + b) / 2; d = a - m; printf "%.6f %.6f", m, sqrt(2 * d * d) }')
mean_sd() { near "$got_mean" "${want% *}" 0.000002 && near "$got_sd" "${want#* }" 0.000002 &&
    grep -q '^seed = 2' $R/rep2/config.ini && grep -q '^seed = 1' $R/rep1/config.ini; }
check "sweep table: eval NE mean and sd of the runs' $a and $b (job.seed 1 and 2) as computed ($got_mean $got_sd, $want)" mean_sd
check "sweep table: results.md has a row per setting with mean ± sd" \
    sh -c "[ \$(grep -c '^| 0\.[15] | [12] | 2 | [0-9]* ± [0-9]* |' $T/sw/results.md) = 4 ] && [ \$(grep -c '^| 7 | [12] | 0 |' $T/sw/results.md) = 2 ]"
# the Pareto front: a row is best exactly when no other has both EPS >= and eval NE <= (one strictly)
bad=$(awk -F, 'NR > 1 && $5 != "" { n++; eps[n] = $5; ne[n] = $9; best[n] = $17 }
    END { for (i = 1; i <= n; i++) { dom = 0
            for (k = 1; k <= n; k++) if (k != i && eps[k] >= eps[i] && ne[k] <= ne[i] && (eps[k] > eps[i] || ne[k] < ne[i])) dom = 1
            if ((best[i] == "yes") == dom) bad++ }
          print bad + 0, n }' $csv)
check "sweep table: best marks the Pareto front of EPS and eval NE (rows wrong, rows: $bad)" \
    sh -c "[ '$bad' = '0 4' ] && grep -q '\*\*best\*\*' $T/sw/results.md"
if command -v gnuplot > /dev/null; then
    check "sweep picture: sweep.png, a point per setting that ran, the front drawn" \
        sh -c "[ \"\$(od -An -tx1 -N8 $T/sw/sweep.png | tr -d ' \n')\" = 89504e470d0a1a0a ] && [ \$(wc -c < $T/sw/sweep.png) -gt 10000 ] && [ \$(sed -n '/^\$all << EOD/,/^EOD/p' $T/sw/sweep.gp | grep -c '\"0\.[15], [12]\"') = 4 ] && grep -q 'Pareto front' $T/sw/sweep.gp"
else
    echo "SKIP sweep picture: gnuplot is not installed here (apt-get install gnuplot-nox)"
fi

# a run that fails (its data missing): reported, kept failed, run again when asked
F="--vary data.train=$T/d/train.tsv,$T/missing.tsv --out $T/fail"
$BIN sweep $CFG $D $F > $T/fail1.log 2>&1
rc=$?
check "sweep: a failing run is reported with its reason, the next still runs ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q '^sweep: run 2 of 2: failed: data.train: $T/missing.tsv: No such file' $T/fail1.log && grep -q 'failed: data.train: $T/missing.tsv' $T/fail/results.csv && [ -s $T/fail/runs/data.train=_tmp*missing.tsv-*/rep1/failed.txt ]"
$BIN sweep $CFG $D $F > $T/fail2.log 2>&1
$BIN sweep $CFG $D $F --retry-failed > $T/fail3.log 2>&1
check "sweep again: the failed run is not retried unless --retry-failed" \
    sh -c "grep -q 'run 2 of 2: .*: failed earlier (--retry-failed runs it again): data.train' $T/fail2.log && grep -q '^sweep: run 2 of 2: failed: data.train' $T/fail3.log && grep -q 'run 1 of 2: .*kept' $T/fail3.log"

$BIN sweep $CFG $D --vary sync.alph=0.1 > /dev/null 2> $T/badkey.err
rc=$?
check "sweep: an unknown --vary key is refused before any run, with the nearest key ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'unknown key sync.alph (did you mean sync.alpha?)' $T/badkey.err"

# a cluster job's settings go through tools/submit (mpirun), one job each
$BIN sweep $CFG $D --set job.embedding_ps=2 --set job.sync_ps=1 --set job.bind=127.0.0.1 \
    --set trainer.worker_threads=1 --vary sync.algo=easgd,ma --out $T/clu > $T/clu.log 2>&1
rc=$?
check "sweep of a cluster job: each setting through tools/submit, both in the table ($rc)" \
    sh -c "[ $rc = 0 ] && [ \$(grep -c ',\"ok\"$' $T/clu/results.csv) = 2 ] && grep -q '^# submit: 5 ranks' $T/clu/runs/sync.algo=ma/rep1/train.log && grep -q '^# cluster job: 5 ranks' $T/clu/runs/sync.algo=easgd/rep1/train.log"
