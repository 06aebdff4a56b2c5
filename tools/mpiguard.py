#!/usr/bin/python3
"""tools/mpiguard.py: runs mpirun, and stops it when it hangs after its ranks have ended.

  tools/mpiguard.py mpirun ARGS...

Open MPI 4.1.4 with Debian's PMIx now and then deadlocks in mpirun's own
shutdown (PMIx_server_finalize, seen about once in 100 jobs here, after a
rank called MPI_Abort or was killed): every rank has exited, mpirun never
reaps them, and it ignores SIGTERM, so a job that has ended never returns.
This watches mpirun's child processes (the ranks it started on this node,
or the launchers of other nodes). A healthy mpirun reaps a child that has
ended at once; one left unreaped (a zombie) for GRACE_S seconds means
mpirun is stuck (a healthy one's abort leaves its ranks unreaped for its
kill sequence, about 2 s by default: keep GRACE_S well above Open MPI's
odls_base_sigkill_timeout). The others may then still run: one that a rank's abort
should have ended but mpirun never signalled (a rank stopped with SIGSTOP
waits for ever). The guard kills those ranks and mpirun, says so, and exits
with the ranks' status (the first failure, as a shell reports it: the
code, or 128 + the signal). A SIGTERM or SIGINT it gets goes to mpirun; if mpirun
is still there GRACE_S seconds later, it is killed. A SIGUSR1 goes to mpirun,
which passes it to every rank: the trainers stop as at the end of their data. tools/submit runs
mpirun through this; so do the tests. MPIGUARD_GRACE_S sets the grace.

mpirun runs in a process group of its own (its stdin /dev/null): a Ctrl-C or
a `timeout` signals the guard's group, and the guard passes it on once. Open
MPI takes a second signal within 5 s for a stuck mpirun and exits at once,
leaving its ranks running. Any rank still there when mpirun has exited is
killed.
"""
import os, signal, subprocess, sys, threading, time

GRACE_S = float(os.environ.get("MPIGUARD_GRACE_S", "10"))


def children(pid):
    kids = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    kids += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return kids


def proc_state(pid):
    """(state letter, exit status as waitpid reports it, start time) or None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()  # rest[0] is field 3 (state); field 52 is exit_code
    return rest[0], int(rest[49]) if len(rest) > 49 else 0, rest[19]  # field 22: start time


def shell_status(ws):
    if ws & 0x7f:
        return 128 + (ws & 0x7f)
    return (ws >> 8) & 0xff


def run(cmd, on_line=None):
    """Runs cmd; returns its exit status. on_line(line): each line of its
    standard error (which is passed through) when given."""
    proc, early = [None], []  # a signal before mpirun has started goes to it once it has
    stop_at, stop_sig = [None], [signal.SIGTERM]

    def send(sig):
        if proc[0] is None:
            early.append(sig)
            return
        try:
            proc[0].send_signal(sig)
        except OSError:
            pass

    def forward(sig, _frame):
        send(sig)
        stop_sig[0] = sig
        stop_at[0] = stop_at[0] or time.time() + GRACE_S

    def pass_on(sig, _frame):  # SIGUSR1: the trainers' graceful stop, no deadline
        send(sig)
    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, pass_on)
    try:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, process_group=0, text=True,
                             stderr=subprocess.PIPE if on_line else None, errors="replace")
    except OSError as e:
        for s, h in old.items():
            signal.signal(s, h)
        sys.stderr.write("mpiguard: cannot run %s: %s\n" % (cmd[0], e.strerror or e))
        return 127
    proc[0] = p
    for sig in early:
        send(sig)
    reader = None
    if on_line:
        def pump():
            for line in p.stderr:
                try:
                    on_line(line)
                except OSError:  # (our stderr closed: go on draining mpirun's)
                    pass
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
    seen, unreaped, rc = {}, {}, None  # unreaped: child -> when first seen a zombie
    try:
        while p.poll() is None:
            kids = children(p.pid)
            now = time.time()
            unreaped = {k: t for k, t in unreaped.items() if k in kids}  # a pid may be reused
            for k in kids:
                st = proc_state(k)
                if st:
                    seen[k] = st
                    if st[0] in "ZX":
                        unreaped.setdefault(k, now)
            live = [k for k in kids if seen.get(k, ("R", 0))[0] not in "ZX"]
            stuck = [k for k in kids if k in unreaped and now - unreaped[k] > GRACE_S]
            if stuck or (stop_at[0] and now > stop_at[0]):
                for k in live:  # ranks mpirun should have ended (SIGKILL ends a stopped one too)
                    try:
                        os.kill(k, signal.SIGKILL)
                    except OSError:
                        pass
                codes = [seen[k][1] for k in kids if k in seen and k not in live]
                p.kill()
                p.wait()
                bad = [c for c in codes if c != 0]
                rc = shell_status(bad[0]) if bad else 128 + stop_sig[0] if not stuck else 137 if live else 0
                if stuck:
                    what = "left a rank unreaped for %.0f s (an Open MPI shutdown hang)" % GRACE_S
                else:
                    what = "did not stop %.0f s after it was asked" % GRACE_S
                sys.stderr.write(
                    "mpiguard: mpirun %s: killed it%s; %d rank(s) here had ended, with status %s\n" % (
                        what, " and its %d rank(s) still running" % len(live) if live else "",
                        len(codes), ", ".join(str(shell_status(c)) for c in codes) or "-"))
                break
            try:
                p.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for k, st in seen.items():  # ranks mpirun left running (the same process, not a new pid)
            now_st = proc_state(k)
            if now_st and now_st[2] == st[2] and now_st[0] not in "ZX":
                try:
                    os.kill(k, signal.SIGKILL)
                except OSError:
                    pass
    if reader:
        reader.join(timeout=2)
    if rc is None:
        rc = p.returncode if p.returncode >= 0 else 128 - p.returncode
    return rc


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    sys.exit(run(sys.argv[1:]))
