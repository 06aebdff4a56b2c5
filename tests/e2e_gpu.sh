#!/bin/sh
# GPU trainers (DESIGN §6), both ways:
# - the build: --version names what it has; where nvcc and NCCL are found
#   the build without them (GPU=0, in build-nogpu/) is made too, and there
#   trainer.device = cuda stops with a clear message and auto falls back;
# - without a usable device: cuda stops naming why, auto trains on the CPU
#   and says so; the GPU runs below print "SKIP ... skipped: no GPU";
# - with one: cuda reaches the CPU's eval NE within 0.005 on the same data
#   (one worker), several workers and 2 in-process trainers with MA in the
#   shadow thread train to the end, MA between trainer ranks runs over NCCL
#   (with one GPU for both, NCCL refuses and MPI carries it), and a trainer
#   set with one rank on the CPU falls back to MPI, saying so;
# - on every machine, the same runs and test_gpu's parity checks on the CPU
#   simulation of the device library (SS_GPU_LIB=libshadowsync_gpusim.so,
#   src/gpu/sim.c), which has no NCCL: there MPI carries MA, saying so, and
#   a start of NCCL held up past sync.timeout_s ends the job, naming it
#   (SS_E2E_NO_SIM=1 leaves these out: tools/gpu-session).
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
PY=$(command -v /usr/bin/python3 python3 | head -1)
MPIRUN="$PY tools/mpiguard.py mpirun --oversubscribe --bind-to none"
check() { what=$1; shift; if "$@"; then echo "PASS $what"; else echo "FAIL $what: $*"; fi; }
json() { sed -n "s/^ *\"$1\": \([^,]*\),*$/\1/p" "$2" | tr -d '"'; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && d < t && d > -t) }'; }
train() { # train BIN OUT [--set ...]
    bin=$1; out=$2; shift 2
    timeout -k 10 300 $bin train configs/tiny.ini --set data.train=$T/d/train.tsv \
        --set data.eval=$T/d/eval.tsv --set output.dir=$T/$out "$@" > $T/$out.log 2>&1
}
$BIN gen --out $T/d --examples 60000 --eval-examples 5000 --seed 3 --config configs/tiny.ini > /dev/null 2>&1

$BIN --version > $T/version.txt 2>&1
check "--version names the GPU support of the build" grep -qE '^  gpu: +(CUDA [0-9.]+, cuBLAS, NCCL|none|built with CUDA, but cannot load)' $T/version.txt
if grep -q '^  gpu: *CUDA' $T/version.txt && ! pkg-config --exists thrift_c_glib 2>/dev/null; then
    echo "SKIP GPU=0 build: skipped: this machine lacks the build's packages (a bundle from tools/device-bundle)"
elif grep -q '^  gpu: *CUDA' $T/version.txt; then
    # the same tree without the GPU objects
    if make -s -j2 BUILD=build-nogpu GPU=0 build-nogpu/shadowsync > $T/nogpu-build.log 2>&1; then
        build-nogpu/shadowsync --version > $T/nogpu-version.txt 2>&1
        check "GPU=0 builds without the GPU objects, and --version says so" \
            grep -q '^  gpu: *none' $T/nogpu-version.txt
        train build-nogpu/shadowsync nogpu-cuda --set trainer.device=cuda --set data.max_examples=1000
        check "without GPU support, trainer.device = cuda stops naming why" \
            sh -c "[ $? != 0 ] && grep -q 'trainer.device = cuda: this build has no GPU support' $T/nogpu-cuda.log"
        train build-nogpu/shadowsync nogpu-auto --set trainer.device=auto --set data.max_examples=1000
        check "without GPU support, trainer.device = auto trains on the CPU and says so" \
            sh -c "[ $? = 0 ] && grep -q 'trainer.device = auto: this build has no GPU support.*training on the CPU' $T/nogpu-auto.log"
    else
        echo "FAIL GPU=0 build: $(tail -5 $T/nogpu-build.log)"
    fi
fi

if grep -q '^  device: *none' $T/version.txt; then
    train $BIN cuda --set trainer.device=cuda --set data.max_examples=1000
    check "trainer.device = cuda without a usable GPU: stops, naming why" \
        sh -c "[ $? != 0 ] && grep -qE 'trainer.device = cuda: (no usable CUDA device|this build has no GPU support|cannot load libshadowsync_gpu.so)' $T/cuda.log"
    if grep -q '^  gpu: *CUDA' $T/version.txt && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
        check "no NVIDIA driver on the machine: the reason says so" \
            grep -q 'no usable CUDA device (.*; no NVIDIA driver on this machine)' $T/cuda.log
    fi
    train $BIN auto --set trainer.device=auto --set data.max_examples=1000
    check "trainer.device = auto without a usable GPU: trains on the CPU and says so" \
        sh -c "[ $? = 0 ] && grep -q 'training on the CPU' $T/auto.log"
    echo "SKIP GPU training runs (NE against the CPU, Hogwild workers, NCCL): skipped: no GPU ($(sed -n 's/^  device: *none: //p' $T/version.txt))"
fi

# device_runs LABEL: the runs that need a device, on whichever SS_GPU_LIB names (none: the GPU)
device_runs() {
on=$1
$BIN --version > $T/dev-version.txt 2>&1
train $BIN cpu --set trainer.worker_threads=1
train $BIN gpu --set trainer.worker_threads=1 --set trainer.device=cuda
CPU=$(json eval_ne $T/cpu/metrics.json); GPU=$(json eval_ne $T/gpu/metrics.json)
check "${on}trainer.device = cuda: eval NE $GPU within 0.005 of the CPU's $CPU" near "$GPU" "$CPU" 0.005
check "${on}trainer.device = cuda: names the device" grep -q 'the dense layers on CUDA device 0' $T/gpu.log
# the rates' schedule reaches the device's step: decayed to 0 after the first batch, the dense
# vector is one batch's (SGD; bit for bit on the simulation, within float rounding on a GPU)
SGD="--set optim.dense=sgd --set optim.emb=sgd --set trainer.worker_threads=1 --set trainer.device=cuda"
train $BIN gpulr0 $SGD --set optim.decay_examples=1 --set optim.decay_to=0
train $BIN gpulr1 $SGD --set data.max_examples=128
check "${on}decayed to 0 after the first batch, the device's model is one batch's (eval NE $(json eval_ne $T/gpulr0/metrics.json) vs $(json eval_ne $T/gpulr1/metrics.json))" \
    sh -c "[ \"$(json examples $T/gpulr0/metrics.json)\" = 60000 ] && awk -v a='$(json eval_ne $T/gpulr0/metrics.json)' -v b='$(json eval_ne $T/gpulr1/metrics.json)' 'BEGIN { d = a - b; exit !(a != \"\" && d < 1e-5 && d > -1e-5) }'"
train $BIN gpu2 --set trainer.worker_threads=3 --set job.trainers=2 --set sync.algo=ma --set trainer.device=cuda
NE2=$(json eval_ne $T/gpu2/metrics.json)
check "${on}2 trainers x 3 workers on the device, MA in the shadow thread: every example, eval NE $NE2 within 0.02 of the CPU's" \
    sh -c "[ \"$(json examples $T/gpu2/metrics.json)\" = 60000 ] && awk -v a='$NE2' -v b='$CPU' 'BEGIN { exit !(a != \"\" && a - b < 0.02 && b - a < 0.02) }'"
# synchronous dense training through the staging copy: the final round's change, added back on
# the device, leaves the two trainers with one model (w + (mean - w) may round: 1e-6)
train $BIN gpusync --set trainer.worker_threads=1 --set job.trainers=2 --set trainer.device=cuda \
    --set sync.algo=allreduce --set sync.mode=foreground --set sync.gap=1
check "${on}allreduce after every step of 2 device trainers: one model at the end (replica_spread $(json replica_spread $T/gpusync/metrics.json))" \
    sh -c "[ \"$(json examples $T/gpusync/metrics.json)\" = 60000 ] && awk -v s='$(json replica_spread $T/gpusync/metrics.json)' 'BEGIN { exit !(s ~ /^[0-9.eE+-]+$/ && s + 0 < 1e-6) }'"
train $BIN gpuada --set trainer.worker_threads=2 --set trainer.device=cuda --set optim.dense=adagrad --set sync.algo=easgd --set job.trainers=2
check "${on}Adagrad + EASGD on the device train to the end" test "$(json examples $T/gpuada/metrics.json)" = 60000
# checkpoints read the device copy (weights and Adagrad state); a mid-run one resumes onto the device
rm -rf $T/gck
G="--set trainer.device=cuda --set trainer.worker_threads=2 --set optim.dense=adagrad"
train $BIN gck $G --set checkpoint.dir=$T/gck --set checkpoint.interval_s=0.05 --set output.eval_every=10000
check "${on}output.eval_every scores copies read off the device meanwhile: eval.csv has mid-run rows, each NE in (0.5, 1.2) (128 examples' is ~1.4)" \
    sh -c "[ \$(wc -l < $T/gck/eval.csv) -ge 3 ] && awk -F, 'NR > 1 { if (\$4 >= 1.2 || \$4 <= 0.5) bad = 1 } END { exit bad }' $T/gck/eval.csv"
rm -rf "$(ls -d $T/gck/ckpt-* | tail -1)" # the final one: resume the one before
MID=$(ls -d $T/gck/ckpt-* 2>/dev/null | tail -1)
train $BIN gck2 $G --resume $T/gck
rc=$?
check "${on}a mid-run checkpoint of the device copy resumes on the device, every example once (NE $(json eval_ne $T/gck2/metrics.json) vs $(json eval_ne $T/gck/metrics.json))" \
    sh -c "[ $rc = 0 ] && [ -n '$MID' ] && grep -q 'resuming from $MID: [1-9][0-9]* examples done' $T/gck2.log && [ \"$(json examples $T/gck2/metrics.json)\" = 60000 ] && awk -v a='$(json eval_ne $T/gck2/metrics.json)' -v b='$(json eval_ne $T/gck/metrics.json)' 'BEGIN { exit !(a != \"\" && a - b < 0.02 && b - a < 0.02) }'"

C="configs/tiny.ini --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv --set sync.algo=ma --set job.trainers=2 --set job.embedding_ps=1 --set job.bind=127.0.0.1"
# 2 trainer ranks (and an embedding PS): over NCCL with a GPU each; on one GPU (NCCL takes one GPU
# a rank) the job runs the all-reduce over MPI, saying so
NDEV=$(sed -n 's/^  device: *\([0-9]*\) x .*/\1/p' $T/dev-version.txt)
timeout -k 10 300 $MPIRUN -np 3 $BIN train $C --set trainer.device=cuda --set output.dir=$T/nccl > $T/nccl.log 2>&1
rc=$?
if [ "${NDEV:-1}" -ge 2 ]; then
    check "${on}MA between 2 GPU trainer ranks runs over NCCL" sh -c "[ $rc = 0 ] && grep -q 'over NCCL' $T/nccl.log"
else
    check "${on}MA between 2 trainer ranks on the one device: MPI carries it, saying so" \
        sh -c "[ $rc = 0 ] && grep -q 'two GPU trainers of a node share a GPU, and NCCL takes one GPU a rank: the trainers. all-reduce over MPI' $T/nccl.log"
fi
# ...and on one GPU, the 2 ranks as 2 hosts to NCCL (a NCCL_HOSTID each: its duplicate-GPU check
# compares hosts), so its all-reduce between 2 processes runs there too, over sockets on loopback
if [ -z "$on" ] && [ "${NDEV:-1}" = 1 ]; then
    # (20k examples: the two processes' contexts take turns on the one GPU, and each all-reduce
    # kernel waits for the other's turn)
    NX="-x NCCL_SOCKET_IFNAME=lo -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1"
    C2="$C --set data.max_examples=20000 --set trainer.device=cuda --set output.dir=$T/nccl2"
    timeout -k 10 300 $MPIRUN -np 1 $NX -x NCCL_HOSTID=ss-a $BIN train $C2 : \
        -np 1 $NX -x NCCL_HOSTID=ss-b $BIN train $C2 : -np 1 $BIN train $C2 > $T/nccl2.log 2>&1
    rc=$?
    check "MA between 2 GPU trainer ranks on one GPU, as 2 hosts to NCCL, runs over NCCL to the end" \
        sh -c "[ $rc = 0 ] && grep -q 'over NCCL' $T/nccl2.log && [ \"$(json examples $T/nccl2/metrics.json)\" = 20000 ]"
    grep -q 'over NCCL' $T/nccl2.log || grep 'NCCL' $T/nccl2.log | head -5
fi
# one trainer rank: a communicator of one, so ncclAllReduce, its wait and its teardown run
# on a machine of one GPU too (the simulation has no NCCL: MPI carries it)
timeout -k 10 300 $MPIRUN -np 2 $BIN train $C --set job.trainers=1 --set trainer.device=cuda \
    --set output.dir=$T/nccl1 > $T/nccl1.log 2>&1
rc=$?
if [ -z "$on" ]; then
    check "MA of one GPU trainer rank runs over NCCL to the end" \
        sh -c "[ $rc = 0 ] && grep -q 'over NCCL' $T/nccl1.log && [ \"$(json examples $T/nccl1/metrics.json)\" = 60000 ]"
else
    check "${on}MA of one trainer rank on the device: no NCCL, MPI carries it, saying so" \
        sh -c "[ $rc = 0 ] && grep -q 'NCCL could not start on every trainer' $T/nccl1.log && [ \"$(json examples $T/nccl1/metrics.json)\" = 60000 ]"
fi
if [ -n "$on" ]; then # NCCL's start, which has no deadline of its own, held up (the simulation's knob;
    # NCCL_HOSTID set, so the 2 ranks on the one device try NCCL)
    t0=$(date +%s)
    timeout -k 10 120 $MPIRUN -np 3 -x SS_SIM_NCCL_START_S=60 -x NCCL_HOSTID=ss-sim $BIN train $C --set trainer.device=cuda \
        --set sync.timeout_s=2 --set output.dir=$T/ncclhang > $T/ncclhang.log 2>&1
    rc=$?; took=$(( $(date +%s) - t0 ))
    check "${on}a start of NCCL that does not finish ends the job past sync.timeout_s, naming it ($rc, $took s)" \
        sh -c "[ $rc != 0 ] && [ $took -le 20 ] && grep -q '^shadowsync: trainer [01] (rank [01] on [^)]*): NCCL.s start (ncclCommInitRank, a first all-reduce) has not finished in 2 s' $T/ncclhang.log"
fi
timeout -k 10 300 $MPIRUN -np 1 -x CUDA_VISIBLE_DEVICES= $BIN train $C --set trainer.device=auto --set output.dir=$T/mixed : \
    -np 2 $BIN train $C --set trainer.device=auto --set output.dir=$T/mixed > $T/mixed.log 2>&1
check "${on}a trainer set with one rank on the CPU falls back to MPI, saying so" \
    sh -c "[ $? = 0 ] && grep -q 'some trainers run on GPUs, some on CPUs: the trainers. all-reduce over MPI' $T/mixed.log"
# one trainer rank without a device under cuda: the job ends at once, naming it (the
# other trainer waited for ever in the start's collective)
t0=$(date +%s)
timeout -k 10 120 $MPIRUN -np 1 $BIN train $C --set trainer.device=cuda --set output.dir=$T/devfail : \
    -np 1 -x CUDA_VISIBLE_DEVICES= $BIN train $C --set trainer.device=cuda --set output.dir=$T/devfail : \
    -np 1 $BIN train $C --set trainer.device=cuda --set output.dir=$T/devfail > $T/devfail.log 2>&1
rc=$?; took=$(( $(date +%s) - t0 ))
check "${on}a trainer rank whose device fails at start ends the job at once, naming why ($rc, $took s)" \
    sh -c "[ $rc != 0 ] && [ $took -le 30 ] && grep -q '^shadowsync: trainer 1 (rank 1 on [^)]*): trainer.device = cuda: no usable CUDA device' $T/devfail.log"
}

# the CPU simulation of the device library, on every machine (SS_E2E_NO_SIM=1: not; the
# GPU session's device time goes to the GPU's runs)
SIM=$(pwd)/$BUILD/libshadowsync_gpusim.so
[ -n "$SS_E2E_NO_SIM" ] && echo "SKIP CPU simulation: skipped: SS_E2E_NO_SIM is set" || (
    export SS_GPU_LIB=$SIM
    $BUILD/tests/test_gpu > $T/sim-parity.txt 2>&1; rc=$?
    grep -v '^#' $T/sim-parity.txt
    [ $rc = 0 ] || grep -q '^FAIL' $T/sim-parity.txt || echo "FAIL CPU simulation: test_gpu exited with status $rc"
    device_runs "CPU simulation: "
)
# the GPU, where there is one
grep -q '^  device: *none' $T/version.txt || device_runs ""
exit 0
