#!/bin/sh
# `shadowsync plot` and output.plot end to end (docs/plots.md): two runs
# (easgd in the shadow thread, ma in the foreground at gap 10) in one PNG
# (its magic bytes, its size in pixels and bytes), the legend naming each
# run's algorithm/mode/trainers in the gnuplot script written beside it and
# a curve per run in every panel; output.plot's own plot.png, a cluster
# job's from its master with a line per trainer from its trainers.csv (and
# a run of one trainer's without one); without gnuplot, plot names the package and a
# training with output.plot = true still succeeds, with a warning.
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
. tests/lib.sh

$BIN gen --out $T/d --examples 20000 --eval-examples 2000 --config $CFG > /dev/null 2>&1
TRAIN_SETS="--set job.trainers=2 --set output.log_interval_s=0.05 --set output.eval_every=5000"
train easgd --set sync.algo=easgd
rc_a=$?
train ma --set sync.algo=ma --set sync.mode=foreground --set sync.gap=10 --set output.plot=true
rc_b=$?
check "plot: the two runs train ($rc_a, $rc_b)" sh -c "[ $rc_a = 0 ] && [ $rc_b = 0 ]"

# is_png FILE W H: PNG magic bytes, W x H pixels in its IHDR, over 10 kB
is_png() {
    [ "$(od -An -tx1 -N8 "$1" 2>/dev/null | tr -d ' \n')" = 89504e470d0a1a0a ] &&
        [ "$(od -An -tu1 -j16 -N8 "$1" | awk '{ printf "%d %d", $1 * 16777216 + $2 * 65536 + $3 * 256 + $4, $5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }')" = "$2 $3" ] &&
        [ "$(wc -c < "$1")" -gt 10000 ]
}

if command -v gnuplot > /dev/null; then
    $BIN plot $T/easgd $T/ma --out $T/both.png > $T/plot.out 2> $T/plot.err
    rc=$?
    check "plot: two runs into one PNG, said ($rc$(head -c 300 $T/plot.err | sed 's/^/: /'))" \
        sh -c "[ $rc = 0 ] && grep -q 'plot: $T/both.png' $T/plot.out && [ ! -e $T/both.png.tmp ]"
    check "plot: the file is a PNG of plausible size ($(wc -c < $T/both.png 2>/dev/null) bytes)" \
        is_png $T/both.png 1500 1350
    check "plot: its gnuplot script beside it names each run in the legend" \
        sh -c "grep -q \"title 'easgd/shadow/2 trainers x 2 workers'\" $T/both.gp && grep -q \"title 'ma/foreground gap 10/2 trainers x 2 workers'\" $T/both.gp"
    # every panel draws both runs: 5 panels x 2 curves, the legend 2 more
    curves=$(grep -c 'ls [12] notitle' $T/both.gp)
    check "plot: train NE, eval NE, EPS, syncs/s and sync gap each have both runs' curves ($curves of 10)" \
        sh -c "[ $curves = 10 ] && grep -q 'eval NE against examples' $T/both.gp && grep -q 'sync gap against time' $T/both.gp"
    rows=$(sed -n '/^\$e1 << EOD/,/^EOD/p' $T/both.gp | grep -c '^ [0-9]')
    check "plot: ma's eval curve has eval.csv's rows ($rows of $(($(wc -l < $T/ma/eval.csv) - 1)))" \
        sh -c "[ $rows -ge 2 ] && [ $rows = $(($(wc -l < $T/ma/eval.csv) - 1)) ]"
    own_plot() { is_png $T/ma/plot.png 1500 1350 && [ -s $T/ma/plot.gp ] && grep -q "^# plot: $T/ma/plot.png" $T/ma.log; }
    check "output.plot = true: the run's own plot.png (and plot.gp), said at the end" own_plot
    $BIN plot $T/easgd > /dev/null 2>&1
    check "plot of one run: RUN_DIR/plot.png by default" is_png $T/easgd/plot.png 1500 1350
    check "plot of several runs: the jobs' lines alone, no trainer's" \
        sh -c "! grep -q 'trainer 0' $T/both.gp"
    cluster clu sync.algo=ma output.plot=true output.log_interval_s=0.05
    rc=$?
    check "output.plot in a cluster job: the master plots the job's curves ($rc)" \
        sh -c "[ $rc = 0 ] && [ -s $T/clu/plot.png ] && grep -q \"title 'ma/shadow/2 trainers x 1 worker'\" $T/clu/plot.gp"
    # trainers.csv: the master writes each trainer's reports as they come
    each_rows() { awk -F, -v t=$2 'NR > 1 && $2 == t && $3 > 0' $1/trainers.csv | wc -l; }
    check "cluster job: trainers.csv has rows of trainer 0 ($(each_rows $T/clu 0)) and 1 ($(each_rows $T/clu 1))" \
        sh -c "head -1 $T/clu/trainers.csv | grep -qx 'elapsed_s,trainer,examples,eps,train_ne,syncs_per_s,sync_gap' && [ $(each_rows $T/clu 0) -ge 1 ] && [ $(each_rows $T/clu 1) -ge 1 ]"
    last=$(awk -F, 'NR > 1 { n[$2] = $3 } END { print n[0] + n[1] }' $T/clu/trainers.csv)
    check "cluster job: the trainers' last rows add up to the job's examples ($last)" \
        sh -c "[ '$last' = 20000 ]"
    check "cluster job: its plot has a line per trainer, titled, in train NE, EPS, syncs/s and sync gap" \
        sh -c "grep -q \"title 'ma/shadow/2 trainers x 1 worker trainer 0'\" $T/clu/plot.gp && grep -q \"title 'ma/shadow/2 trainers x 1 worker trainer 1'\" $T/clu/plot.gp && [ \$(grep -c '^ *\\\$p0_1 using' $T/clu/plot.gp) = 4 ]"
    check "one process of 2 trainers: trainers.csv, and a line per trainer in its own plot" \
        sh -c "[ $(each_rows $T/easgd 1) -ge 1 ] && grep -q \"trainer 1'\" $T/easgd/plot.gp"
    train one --set job.trainers=1
    $BIN plot $T/one > /dev/null 2>&1
    rc=$?
    one_plot() { [ $rc = 0 ] && [ ! -e $T/one/trainers.csv ] && is_png $T/one/plot.png 1500 1350 && ! grep -q 'trainer 0' $T/one/plot.gp; }
    check "one trainer (no trainers.csv, as an older run's): plots the job's lines as before ($rc)" one_plot
else
    echo "SKIP plot: the pictures: gnuplot is not installed here (apt-get install gnuplot-nox)"
fi

$BIN plot $T/d > /dev/null 2> $T/nodir.err
rc=$?
check "plot: a directory without progress.csv is refused, named ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q '$T/d: no progress.csv' $T/nodir.err"

# without gnuplot: its PATH holds none
PATH=/nonexistent $BIN plot $T/easgd --out $T/none.png > /dev/null 2> $T/none.err
rc=$?
check "plot without gnuplot: fails naming the package to install ($rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'apt-get install gnuplot-nox' $T/none.err && [ ! -e $T/none.png ]"
PATH=/nonexistent $BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
    --set output.dir=$T/nognu --set output.plot=true > $T/nognu.log 2>&1
rc=$?
check "output.plot without gnuplot: the training still succeeds, warning once ($rc)" \
    sh -c "[ $rc = 0 ] && [ -s $T/nognu/metrics.json ] && [ ! -e $T/nognu/plot.png ] && [ \$(grep -c 'warning: output.plot: .*apt-get install gnuplot-nox' $T/nognu.log) = 1 ]"
