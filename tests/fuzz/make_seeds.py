#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/:
valid requests of each service in Thrift's binary protocol (encoded here
by hand), text lines, a config, and a binary shard (via shadowsync
convert when the build is there). Run from the repository root."""
import os, shutil, struct, subprocess, sys

TOKEN = b"0123456789abcdef0123456789abcdef"  # tests/fuzz/fuzz_common.h
OUT = "tests/fuzz/corpus"


def msg(name, fields):
    return (struct.pack(">I", 0x80010001) + struct.pack(">i", len(name)) + name.encode()
            + struct.pack(">i", 1) + fields + b"\0")


def fbin(fid, data):
    return struct.pack(">bhi", 11, fid, len(data)) + data


def fi32(fid, v):
    return struct.pack(">bhi", 8, fid, v)


def fi64(fid, v):
    return struct.pack(">bhq", 10, fid, v)


def fdouble(fid, v):
    return struct.pack(">bhd", 4, fid, v)


def fstruct(fid, body):
    return struct.pack(">bh", 12, fid) + body + b"\0"


def ints(fmt, *v):
    return struct.pack("<%d%s" % (len(v), fmt), *v)


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# fuzz_embps: shards {0, 3}: rows [0, 50) of table 0 and [50, 90) of table 1, dim 4
bags = (fbin(1, TOKEN) + fi32(2, 2) + fbin(3, ints("i", 0, 3)) + fbin(4, ints("i", 0, 1, 1, 2, 3))
        + fbin(5, ints("Q", 5, 10, 60)))
write("fuzz_embps", "lookup", msg("lookup", fstruct(1, bags)))
# the 3 non-empty bags' gradients (bag (0, 1) is empty)
write("fuzz_embps", "push", msg("push", fstruct(1, bags) + fbin(2, ints("f", *[0.5] * 12))))
write("fuzz_embps", "save", msg("save", fbin(1, TOKEN) + fbin(2, b"/tmp/ss_fuzz_saves/t.bin")))
# a cache's rows call (stride 5: dim 4 and row-wise Adagrad's state): one
# delta to row 5 of shard 0, asks for rows 5 and 60 (held: clock 0; none)
rows = (fbin(1, TOKEN) + fbin(2, ints("i", 0, 3)) + fbin(3, ints("i", 0)) + fbin(4, ints("Q", 5))
        + fbin(5, ints("f", *[0.25] * 5)) + fbin(6, ints("I", 2)) + fbin(7, ints("i", 0, 1))
        + fbin(8, ints("Q", 5, 60)) + fbin(9, ints("I", 0, 0xFFFFFFFF)) + fi32(10, 1))
write("fuzz_embps", "rows", msg("rows", fstruct(1, rows)))
write("fuzz_embps", "bad_token", msg("lookup", fstruct(1, fbin(1, b"x") + fi32(2, 1))))
# fuzz_syncps: the slice [16, 32) of 32 floats
write("fuzz_syncps", "elastic", msg("elastic", fbin(1, TOKEN) + fi64(2, 16)
                                    + fbin(3, ints("f", *[1.0] * 16)) + fdouble(4, 0.5)))
write("fuzz_syncps", "save", msg("save", fbin(1, TOKEN) + fbin(2, b"/tmp/ss_fuzz_saves/c.bin")))
# fuzz_reader
write("fuzz_reader", "next", msg("next_batch", fbin(1, TOKEN) + fi32(2, 4)))
write("fuzz_reader", "save", msg("save", fbin(1, TOKEN) + fbin(2, b"/tmp/ss_fuzz_saves/r.pos")))
write("fuzz_reader", "unknown", msg("nope", fi32(1, 1)))
# fuzz_config
for c in ("tiny.ini", "criteo_kaggle.ini"):
    shutil.copy(os.path.join("configs", c), os.path.join(OUT, "fuzz_config", c)) if os.path.isdir(
        os.path.join(OUT, "fuzz_config")) else (os.makedirs(os.path.join(OUT, "fuzz_config")),
                                                shutil.copy(os.path.join("configs", c),
                                                            os.path.join(OUT, "fuzz_config", c)))
write("fuzz_config", "bad", b"[job]\ntrainers = -3\n[nope]\nx = 1\n")
# fuzz_text: Criteo lines (13 dense, 26 categorical) and CSV lines
crit = "\t".join(["1"] + [str(i) for i in range(13)] + ["%08x" % (i * 7919) for i in range(26)])
write("fuzz_text", "criteo", (crit + "\n" + crit.replace("\t3\t", "\t\t") + "\n").encode())
write("fuzz_text", "csv", b"label,a,b,c,d,e\n1,0.5,2,x,y,p;q;r\n0,,3,z,,s\n")
# fuzz_shard: convert the Criteo lines when the build is there
binp = os.path.join(os.environ.get("BUILD", "build"), "shadowsync")
if os.path.exists(binp):
    tmp = "/tmp/ss_seed_shard"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "in.tsv"), "w") as f:
        f.write((crit + "\n") * 3)
    r = subprocess.run([binp, "convert", "configs/tiny.ini", "--in", os.path.join(tmp, "in.tsv"),
                        "--out", os.path.join(tmp, "out")], capture_output=True)
    for n in sorted(os.listdir(os.path.join(tmp, "out"))) if r.returncode == 0 else []:
        shutil.copy(os.path.join(tmp, "out", n), os.path.join(OUT, "fuzz_shard", n)) if os.path.isdir(
            os.path.join(OUT, "fuzz_shard")) else (os.makedirs(os.path.join(OUT, "fuzz_shard")),
                                                   shutil.copy(os.path.join(tmp, "out", n),
                                                               os.path.join(OUT, "fuzz_shard", n)))
    shutil.rmtree(tmp, ignore_errors=True)
print("seeds in %s: %s" % (OUT, ", ".join(sorted(os.listdir(OUT)))))
