#!/bin/sh
# The cluster job's bootstrap under mpirun on loopback: a launch whose rank
# count does not match the config's roles stops with a message naming the
# counts; a matching one assigns roles by rank (trainers first); the MPI
# all-reduce and MA over it (tests/mpi_collective.c).
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe --bind-to none --mca btl self,vader"
$BIN gen --out $T/d --examples 1000 --config configs/tiny.ini > /dev/null 2>&1

$MPIRUN -np 3 $BIN train configs/tiny.ini --set data.train=$T/d/train.tsv > $T/np.log 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "started 3 ranks but the config's roles add up to 1 (job.trainers 1" $T/np.log; then
    echo "PASS wrong -np: clear error naming the counts"
else
    echo "FAIL wrong -np: rc $rc"; head -5 $T/np.log
fi

$MPIRUN -np 4 $BIN train configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
    --set job.readers=1 --set data.train=$T/d/train.tsv > $T/roles.log 2>&1
if grep -q "rank 1: trainer 1" $T/roles.log && grep -q "rank 2: embedding_ps 0" $T/roles.log \
   && grep -q "rank 3: reader 0" $T/roles.log; then
    echo "PASS roles by rank, trainers first"
else
    echo "FAIL roles by rank"; head -8 $T/roles.log
fi
if grep -q "not built yet" $T/roles.log; then
    echo "PASS a matching launch says the services are not built yet"
else
    echo "FAIL a matching launch: no clear message"
fi

$MPIRUN -np 3 $BUILD/tests/mpi_collective 2>&1 | grep -E '^(PASS|FAIL)'
exit 0
