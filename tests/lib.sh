# Helpers the end-to-end scripts source (`. tests/lib.sh`, from the repo
# root): PASS/FAIL lines for tests/run, and reading metrics.json.
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
# (the helpers' variables start with _: a script's own names are left alone)
check() { _what=$1; shift; if "$@"; then pass "$_what"; else fail "$_what" "$*"; fi; }
# json KEY FILE: a number (or a string, unquoted) from metrics.json
json() { sed -n "s/^ *\"$1\": \([^,]*\),*$/\1/p" "$2" | tr -d '"'; }
# the eval NE of `shadowsync eval`'s output (its JSON line) in FILE
eval_ne_of() { sed -n 's/.*"eval_ne": \([0-9.]*\).*/\1/p' "$1"; }
lt() { _log lt "$@"; awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 < b + 0 && a != "") }'; }
near() { _log near "$@"; awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && d < t && d > -t) }'; }
# NEAR_LOG=FILE: each lt/near check's figures appended to FILE (for sizing
# the tolerances of checks between nondeterministic runs: `_what` names it)
_log() { [ -n "$NEAR_LOG" ] && echo "$0|$_what|$*" >> "$NEAR_LOG"; return 0; }
# held RUN REF: a run learned as well as a reference run (each a
# metrics.json) where Hogwild workers or a shadow thread's timing make
# them differ: eval NE within 0.02 and eval AUC at most 0.02 below.
# Measured on tiny.ini's 60k examples (tests' data): 12 repeated 2x2 runs
# spread over 0.009 in eval NE and in AUC, two different jobs once came
# 0.0118 apart in NE (a CI failure at 0.01), while frozen embeddings cost +0.025 NE and
# -0.045 AUC and a frozen dense part +0.075 NE; so a run that stopped
# learning still fails. held_is RUN REF: the figures, for a check's name.
held() {
    near "$(json eval_ne $1)" "$(json eval_ne $2)" 0.02 &&
        awk -v a="$(json eval_auc $1)" -v r="$(json eval_auc $2)" 'BEGIN { exit !(a != "" && r != "" && a > r - 0.02) }'
}
held_is() { echo "eval NE $(json eval_ne $1), AUC $(json eval_auc $1) held (NE within 0.02, AUC at most 0.02 below $(json eval_ne $2), $(json eval_auc $2))"; }
# train OUT [--set ...]: `shadowsync train $CFG` on $T/d's data into $T/OUT,
# its output in $T/OUT.log ($TRAIN_SETS: sets every run of a script takes)
train() {
    _out=$1; shift
    $BIN train $CFG --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
        --set output.dir=$T/$_out $TRAIN_SETS "$@" > $T/$_out.log 2>&1
}
# cluster NAME [section.key=value ...]: the tiny cluster job on loopback
# (2 trainers x 1 worker, 2 embedding PSs, 1 sync PS) on $T/d's data
# into $T/NAME, its output in $T/NAME.log
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
MPIRUN="/usr/bin/python3 tools/mpiguard.py mpirun --oversubscribe --bind-to none --mca btl self,vader"
cluster() {
    _dir=$1; shift
    _sets=""; for _s in "$@"; do _sets="$_sets --set $_s"; done
    timeout -k 10 300 $MPIRUN -np 5 $BIN train configs/tiny.ini --set job.trainers=2 \
        --set job.embedding_ps=2 --set job.sync_ps=1 --set job.bind=127.0.0.1 \
        --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.dir=$T/$_dir $_sets > $T/$_dir.log 2>&1
}
