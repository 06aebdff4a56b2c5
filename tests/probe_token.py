#!/usr/bin/python3
"""Sends an embedding PS a lookup with a wrong job token over Thrift's
binary protocol (by hand) and prints the service's answer: used by
e2e_mpi.sh against a live job. Usage: probe_token.py HOST PORT"""
import socket, struct, sys

def binary(fid, data):
    return struct.pack(">bhi", 11, fid, len(data)) + data

host, port = sys.argv[1], int(sys.argv[2])
bags = binary(1, b"not-the-job-token") + struct.pack(">bhi", 8, 2, 1) + b"\0"
msg = (struct.pack(">I", 0x80010001) + struct.pack(">i", 6) + b"lookup" + struct.pack(">i", 1)
       + struct.pack(">bh", 12, 1) + bags + b"\0")
s = socket.create_connection((host, port), timeout=10)
s.sendall(msg)
got = b""
while b"token" not in got:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
print(got.decode("latin-1", "replace"))
