#!/usr/bin/python3
"""tools/peer_ddp.py: the PyTorch peer (tools/peer_dlrm.py's model of
configs/peer.ini) trained data-parallel by DistributedDataParallel over gloo,
one rank per host: what a user would run across CPU machines instead of a
shadowsync cluster job. Every step all-reduces the MLPs' gradients and the
embeddings' sparse gradients, so every rank holds one model; each rank
trains its own contiguous share of TRAIN. Rank 0 scores EVAL at the end.

  peer_ddp.py TRAIN EVAL --rank R --world W --master HOST:PORT [--iface IF]
              [--threads N] [--bf16] [--batch 128] [--lr 0.1] [--opt sgd|adagrad] [--max N]
  peer_ddp.py TRAIN EVAL --lab SPEC --world W [...]
      runs W ranks in a lab of W hosts (tools/lab run SPEC: rank K-1 on host K,
      the master at host 1's address, gloo on each host's eth0)

--iface names the interface gloo binds (GLOO_SOCKET_IFNAME): in a lab, or
wherever a host's name resolves to a loopback address, gloo needs it. Rank
0 prints one JSON line: eps (the job's training examples per second: all
ranks' examples over the slowest rank's time between two barriers), eval
NE, logloss, AUC, and the settings.
"""
import argparse, json, os, shlex, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_dlrm  # noqa: E402  (the model, its flags, the reader, NE and AUC)


def args():
    ap = peer_dlrm.arguments(argparse.ArgumentParser())
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--master", default="127.0.0.1:29500")
    ap.add_argument("--iface", default="")
    ap.add_argument("--lab", default=None)
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args()


def in_lab(a):
    """tools/lab run SPEC -- one rank a host, rank 0 (the master) on host 1."""
    net = os.environ.get("LAB_NET", "201")
    rest = []
    skip = False
    for x in sys.argv[1:]:  # this command's own arguments, less --lab and the launch's
        if skip:
            skip = False
            continue
        if x in ("--lab", "--rank", "--master", "--iface"):
            skip = True
            continue
        rest.append(x)
    me = shlex.quote(os.path.abspath(__file__))
    ranks = " & ".join(
        '$LAB_EXEC %d -- /usr/bin/python3 %s %s --rank %d --master 127.%s.0.1:29500 --iface eth0'
        % (k + 1, me, " ".join(shlex.quote(x) for x in rest), k, net) for k in range(a.world))
    spec = a.lab if a.lab[:1].isdigit() else "%d,%s" % (a.world, a.lab)
    return subprocess.run([os.path.join(HERE, "lab"), "run", spec.rstrip(","), "--", "sh", "-c",
                           ranks + "; wait"]).returncode


def main():
    a = args()
    if a.lab is not None:
        return in_lab(a)
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    host, _, port = a.master.rpartition(":")
    os.environ.update({"MASTER_ADDR": host, "MASTER_PORT": port})
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(a.seed)  # every rank starts from one model (DDP also broadcasts rank 0's)
    y, x, c = peer_dlrm.read_tsv(a.train, a.rows, a.max)
    n = len(y)
    lo, hi = n * a.rank // a.world, n * (a.rank + 1) // a.world
    y, x, c = y[lo:hi], x[lo:hi], c[lo:hi]
    model = nn.parallel.DistributedDataParallel(peer_dlrm.Model(a, c.shape[1]))
    opt = (torch.optim.SGD if a.opt == "sgd" else torch.optim.Adagrad)(model.parameters(), lr=a.lr)
    bce = nn.BCEWithLogitsLoss()
    counts = torch.tensor([len(y)])
    dist.all_reduce(counts, op=dist.ReduceOp.MIN)  # equal steps on every rank (DDP needs them)
    steps = (int(counts) + a.batch - 1) // a.batch
    dist.barrier()
    t0 = time.time()
    for k in range(steps):
        peer_dlrm.train_step(a, model, opt, bce, x, c, y, k * a.batch)
    dist.barrier()
    seconds = time.time() - t0
    trained = torch.tensor([min(steps * a.batch, int(counts))])
    dist.all_reduce(trained)
    if a.rank == 0:
        ye, xe, ce = peer_dlrm.read_tsv(a.eval, a.rows, 0)
        with torch.no_grad():
            p = torch.sigmoid(model.module(xe, ce)).numpy()
        ll, ne = peer_dlrm.normalized_entropy(ye.numpy(), p)
        print(json.dumps({"peer": "torch-ddp-gloo-" + torch.__version__, "world": a.world,
                          "threads": a.threads, "bf16": a.bf16, "batch": a.batch, "opt": a.opt,
                          "examples": int(trained), "seconds": round(seconds, 3),
                          "eps": round(int(trained) / seconds, 1), "eval_logloss": round(ll, 5),
                          "eval_ne": round(ne, 5),
                          "eval_auc": round(peer_dlrm.area_under_curve(ye.numpy(), p), 5)}),
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
