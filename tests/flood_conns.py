#!/usr/bin/python3
"""Opens N idle TCP connections to HOST:PORT that never send a byte (a
stranger without the job's token), prints "open K" once they are up (or how far it got when killed), and
holds them until killed; each one the service closes is opened again at
once, so the service stays full. Used by e2e_faults.sh against a live
job's embedding PS. Usage: flood_conns.py HOST PORT N"""
import select, signal, socket, sys, time

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks, poller = {}, select.poll()

def open_one():
    try:
        s = socket.create_connection((host, port), timeout=10)
    except OSError:
        return
    socks[s.fileno()] = s
    poller.register(s, select.POLLIN)

t0 = time.time()
def told(*_): # killed (the job ended) before all n were up: how far it got
    print("open %d of %d after %.1f s (killed)" % (len(socks), n, time.time() - t0), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, told)
for _ in range(n):
    open_one()
print("open %d after %.1f s" % (len(socks), time.time() - t0), flush=True)
while True:
    for fd, _ in poller.poll(50): # the service closed it (EOF or reset): another in its place
        poller.unregister(fd)
        socks.pop(fd).close()
        open_one()
    while len(socks) < n:
        open_one()
