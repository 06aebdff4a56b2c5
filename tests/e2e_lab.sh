#!/bin/sh
# A lab of hosts on one machine (tools/lab, issue 40): namespace hosts on a
# bridge with 127/8 addresses, their own hostnames, links shaped by tc tbf,
# CPU quotas by cgroup v1; torn down on its command's end, on a signal and
# by `down`, nothing left. The cluster job with one rank per host
# (tools/submit --lab): every host named alike, no setting (the address
# rule tells the hosts apart by their addresses) and job.interface; a
# rank with no address on job.interface fails at start naming itself and
# its addresses; a loopback job.bind is refused; metrics.json counts the
# bytes each role sent and received. Skips where namespaces cannot be made.
BUILD=${BUILD:-build}
BIN=$BUILD/shadowsync
T=$(mktemp -d)
export LAB_NAME=sstest LAB_NET=231
trap 'tools/lab down > /dev/null 2>&1; rm -rf "$T"' EXIT
. tests/lib.sh
unset OMPI_MCA_btl # (lib.sh's shared memory: the lab's ranks talk over the links)
NET=127.231.0

if [ "$(id -u)" != 0 ] || ! ip netns add sstest-probe 2> $T/probe.err; then
    echo "SKIP the lab: cannot make a network namespace here ($(id -u) = uid; $(cat $T/probe.err 2>/dev/null))"
    exit 0
fi
ip netns del sstest-probe
if ! unshare --uts true 2> $T/probe.err; then
    echo "SKIP the lab: cannot make a UTS namespace here ($(cat $T/probe.err))"
    exit 0
fi
left() { # what a lab named sstest leaves behind: nothing, once down
    { ip netns list | grep sstest; ip link show | grep sstest; ls /sys/fs/cgroup/cpu 2>/dev/null | grep sstest
      ls /run/shadowsync-lab/sstest.json 2>/dev/null; } | tr '\n' ' '
}
rl0=$(sysctl -n net.ipv4.conf.all.route_localnet)

QUOTA=,cpu.3=0.25; Q3="0.25 cores"
if [ ! -d /sys/fs/cgroup/cpu ]; then # (cgroup v1's cpu controller: the quotas' only way here)
    QUOTA=""; Q3="no CPU quota"
    echo "SKIP the lab's CPU quotas: no cgroup v1 cpu controller at /sys/fs/cgroup/cpu"
fi
tools/lab up 3,rate.2=100mbit$QUOTA,names=same > $T/up.log 2>&1
check "lab up: 3 hosts, as SPEC says ($(sed -n 2,4p $T/up.log | tr '\n' ' '))" \
    sh -c "[ \$(ip netns list | grep -c sstest-h) = 3 ] && grep -q 'host 2: $NET.2, hostname lab, link 100mbit, no CPU quota' $T/up.log && grep -q 'host 3: $NET.3, hostname lab, link unshaped, $Q3' $T/up.log"
check "a host has its own name, address and eth0" \
    sh -c "[ \"\$(tools/lab exec 1 -- hostname)\" = lab ] && tools/lab exec 1 -- ip -4 addr show eth0 | grep -q 'inet $NET.1/16' && [ \"\$(hostname)\" != lab ]"
# a link's rate: host 1 sends 20 MB to host 2 (100 Mbit/s) and to host 3 (unshaped)
recv() { tools/lab exec $1 -- python3 -c "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$NET.$1', 5555)); s.listen(); s.settimeout(30); c, _ = s.accept(); n = 0; t = time.time()
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print('%.1f' % (n / (time.time() - t) / 1e6))" > $T/rate$1 2>&1 & }
send() { tools/lab exec 1 -- python3 -c "
import socket, time
for i in range(100): # until the receiver listens (its python may start slowly)
    try:
        s = socket.create_connection(('$NET.$1', 5555), timeout=10); break
    except ConnectionRefusedError:
        time.sleep(0.1)
b = b'x' * (1 << 20)
for i in range(20): s.sendall(b)
s.close()"; wait; }
recv 2; send 2
recv 3; send 3
check "a link shaped to 100 Mbit/s carries 8-13 MB/s ($(cat $T/rate2) MB/s); an unshaped one more than 40 ($(cat $T/rate3))" \
    sh -c "awk 'BEGIN { exit !($(cat $T/rate2) >= 8 && $(cat $T/rate2) <= 13 && $(cat $T/rate3) > 40) }'"
# a CPU quota: a busy thread for 2 s gets about a quarter of a core on host 3
busy='import os, time
t = time.time()
while time.time() - t < 2: pass
print("%.2f" % (os.times()[0] + os.times()[1]))'
if [ -n "$QUOTA" ]; then
    q3=$(tools/lab exec 3 -- python3 -c "$busy"); q1=$(tools/lab exec 1 -- python3 -c "$busy")
    check "host 3 held to 0.25 cores: a busy thread's 2 s give it $q3 s of CPU (host 1, no quota: $q1 s)" \
        sh -c "awk 'BEGIN { exit !($q3 < 0.8 && $q3 > 0.2 && $q1 > 1.5) }'"
fi
tools/lab link 2 1gbit > /dev/null && tools/lab show > $T/show.log
check "lab link reshapes a host's link" grep -q "host 2: $NET.2, hostname lab, link 1gbit" $T/show.log
tools/lab down > $T/down.log 2>&1
check "lab down leaves nothing behind ($(left))" \
    sh -c "[ -z \"$(left)\" ] && [ \"\$(sysctl -n net.ipv4.conf.all.route_localnet)\" = $rl0 ]"

tools/lab run 2 -- sh -c 'ip netns list | grep -c sstest-h > '$T'/inside; exit 3' > /dev/null 2>&1
rc=$?
check "lab run: its command's status ($rc), the hosts there while it ran ($(cat $T/inside)), nothing after ($(left))" \
    sh -c "[ $rc = 3 ] && [ \"\$(cat $T/inside)\" = 2 ] && [ -z \"$(left)\" ]"
tools/lab run 2${QUOTA:+,cpu=0.5} -- sh -c 'exec $LAB_EXEC 1 -- sleep 60' > /dev/null 2>&1 &
lp=$!
for i in $(seq 1 100); do # (until sleep runs there)
    for q in $(ip netns pids sstest-h1 2>/dev/null); do [ "$(cat /proc/$q/comm)" = sleep ] && break 2; done
    sleep 0.05
done
kill -TERM $lp; wait $lp
check "lab run, signalled while a host runs a command: torn down ($(left))" sh -c "[ -z \"$(left)\" ]"

N=60000
$BIN gen --out $T/d --examples $N --eval-examples 5000 --seed 3 --config configs/tiny.ini > /dev/null 2>&1
# a trainer on a host of a quarter of a core: it reads its quota, and its
# shadow thread paces itself (sync.shadow_cpu_share; 0: not)
if [ -n "$QUOTA" ]; then
    for share in 0.1 0; do
        tools/lab run 1,cpu=0.25 -- sh -c "exec \$LAB_EXEC 1 -- $BIN train configs/tiny.ini \
            --set data.train=$T/d/train.tsv --set data.eval= --set data.max_examples=20000 \
            --set sync.algo=easgd --set output.dir=$T/paced$share --set sync.shadow_cpu_share=$share" \
            > $T/paced$share.log 2>&1
        echo $? > $T/paced$share.rc
    done
    ps=$(json syncs $T/paced0.1/metrics.json)
    check "a trainer on a host of 0.25 cores: its shadow thread paced to 10 % of them, said ($(cat $T/paced0.1.rc), $ps syncs)" \
        sh -c "[ \$(cat $T/paced0.1.rc) = 0 ] && grep -q '^# shadow thread: paced to take at most 10 % of the host.s 0.25 cores, which have none to spare beside 2 worker(s)' $T/paced0.1.log && [ \"${ps:-0}\" -gt 0 ]"
    check "...and with sync.shadow_cpu_share = 0, not ($(cat $T/paced0.rc))" \
        sh -c "[ \$(cat $T/paced0.rc) = 0 ] && ! grep -q 'shadow thread: paced' $T/paced0.log"
fi

job() { # job NAME [--set ...]: 2 trainers + 1 embedding PS, a rank a host, every host named alike
    _n=$1; shift
    timeout -k 10 180 tools/submit configs/tiny.ini --set job.trainers=2 --set job.embedding_ps=1 \
        --set trainer.worker_threads=1 --set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv \
        --set output.dir=$T/$_n "$@" --lab names=same > $T/$_n.log 2>&1
}
job plain
rc=$?
M=$T/plain/metrics.json
check "a 3-host job, hosts named alike, no setting: each rank announces its host's address ($rc)" \
    sh -c "[ $rc = 0 ] && grep -q 'rank 1: trainer 1 on lab ($NET.2)' $T/plain.log && grep -q 'embedding_ps 0 (rank 2 on lab) listens on $NET.3:' $T/plain.log && [ \"$(json examples $M)\" = $N ]"
check "metrics.json: the bytes each role sent and received ($(json tcp_bytes_sent_trainer $M) / $(json tcp_bytes_received_embedding_ps $M))" \
    awk -v s="$(json tcp_bytes_sent_trainer $M)" -v r="$(json tcp_bytes_received_embedding_ps $M)" \
    'BEGIN { exit !(s > 1e6 && r > 0.99 * s && r <= s) }'
job iface --set job.interface=eth0
check "the same job with job.interface = eth0 ($?)" \
    sh -c "grep -q 'rank 2: embedding_ps 0 on lab ($NET.3)' $T/iface.log && [ \"$(json examples $T/iface/metrics.json)\" = $N ]"
job cidr --set job.interface=$NET.0/24
check "the same job with job.interface = a CIDR ($?)" \
    sh -c "grep -q 'rank 0: trainer 0 on lab ($NET.1)' $T/cidr.log && [ \"$(json examples $T/cidr/metrics.json)\" = $N ]"
job noif --set job.interface=eth1
rc=$?
check "job.interface on no rank's interface: the job fails at start naming a rank and its addresses ($rc)" \
    sh -c "[ $rc != 0 ] && [ $rc != 124 ] && grep -q '^shadowsync: job.interface = eth1: trainer 0 (rank 0 on lab) has no such interface up (its up IPv4 addresses: lo 127.0.0.1, eth0 $NET.1); 2 other ranks too' $T/noif.log"
job lo --set job.bind=127.0.0.1
rc=$?
check "a loopback job.bind on hosts named alike: refused, naming why ($rc)" \
    sh -c "[ $rc != 0 ] && [ $rc != 124 ] && grep -q 'job.bind = 127.0.0.1: the ranks run on hosts named alike (lab) whose addresses differ' $T/lo.log"
check "every job's lab torn down ($(left))" sh -c "[ -z \"$(left)\" ]"
