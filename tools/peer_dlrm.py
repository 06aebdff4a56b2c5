#!/usr/bin/python3
"""tools/peer_dlrm.py: the model of configs/peer.ini trained by PyTorch on the
CPU, the trainer a user would otherwise pick; tools/bench runs it beside
shadowsync on the same file and keeps the fastest of its settings.

The model is shadowsync's (src/core/model.c): dense x -> log(1 + max(x, 0)) ->
bottom MLP; each categorical token (hex) -> int mod rows, 0 when missing,
sum-pooled; v0 and the pooled vectors' pairwise dots (lower triangle) -> top
MLP -> logit; mean BCE; one pass of SGD (or Adagrad), batch by batch.
PyTorch at its best for it: all tables in one EmbeddingBag with per-table
offsets (as TorchRec fuses them), sparse gradients, set_to_none, and with
--bf16 the MLPs under torch.autocast("cpu", bfloat16) (oneDNN; fp32 master
weights). BLAS threads come from the environment (OPENBLAS_NUM_THREADS).

usage: peer_dlrm.py TRAIN.tsv EVAL.tsv [--threads N] [--bf16] [--batch 128]
       [--rows 200000] [--dim 16] [--bottom 13-512-256-64-16] [--top 512-256-1]
       [--lr 0.1] [--opt sgd|adagrad] [--max N]
Prints one JSON line: eps (training examples/s), eval NE, logloss, AUC.
"""
import argparse, json, math, time

import numpy as np
import torch
import torch.nn as nn


def read_tsv(path, rows, limit):
    labels, dense, cats = [], [], []
    with open(path) as f:
        for k, line in enumerate(f):
            if limit and k >= limit:
                break
            col = line.rstrip("\n").split("\t")
            labels.append(float(col[0]))
            dense.append([max(int(v), 0) if v else 0 for v in col[1:14]])
            cats.append([int(v, 16) % rows if v else 0 for v in col[14:]])
    return (torch.tensor(labels), torch.log1p(torch.tensor(dense, dtype=torch.float32)),
            torch.tensor(cats, dtype=torch.int64))


def layers(widths):
    out = []
    for a, b in zip(widths, widths[1:]):
        lin = nn.Linear(a, b)
        nn.init.normal_(lin.weight, 0.0, math.sqrt(2.0 / (a + b)))  # Xavier normal, as model.c
        nn.init.normal_(lin.bias, 0.0, math.sqrt(1.0 / b))
        out += [lin, nn.ReLU()]
    return nn.Sequential(*out[:-1])  # no ReLU after the last layer


class Model(nn.Module):
    def __init__(self, a, n_tables):
        super().__init__()
        self.bottom = layers([int(w) for w in a.bottom.split("-")])
        self.tables = nn.EmbeddingBag(n_tables * a.rows, a.dim, mode="sum", sparse=True)
        nn.init.uniform_(self.tables.weight, -math.sqrt(1.0 / a.rows), math.sqrt(1.0 / a.rows))
        self.register_buffer("base", torch.arange(n_tables) * a.rows)
        v = n_tables + 1
        self.i, self.j = torch.tril_indices(v, v, offset=-1)
        top = [int(w) for w in a.top.split("-")]
        top_in = a.dim + v * (v - 1) // 2
        self.top = layers([top_in] + (top[1:] if top[0] == top_in else top))
        self.n_tables, self.dim = n_tables, a.dim

    def forward(self, x, c):
        v0 = self.bottom(x)
        pooled = self.tables((c + self.base).reshape(-1, 1)).reshape(-1, self.n_tables, self.dim)
        vs = torch.cat([v0.unsqueeze(1), pooled.to(v0.dtype)], 1)
        dots = torch.bmm(vs, vs.transpose(1, 2))[:, self.i, self.j]
        return self.top(torch.cat([v0, dots], 1)).squeeze(1)


def normalized_entropy(y, p):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
    ctr = float(y.mean())
    return loss, loss / -(ctr * math.log(ctr) + (1 - ctr) * math.log(1 - ctr))


def area_under_curve(y, p):
    rank = np.empty(len(p))
    rank[np.argsort(p, kind="stable")] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((rank[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def train_step(a, model, opt, bce, x, c, y, s):
    """One batch from example s (tools/peer_ddp.py's too: DDP's model syncs in backward)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        z = model(x[s:s + a.batch], c[s:s + a.batch]).float()
    loss = bce(z, y[s:s + a.batch])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def arguments(ap):
    """The files, the model's and the training's flags (tools/peer_ddp.py's too)."""
    ap.add_argument("train")
    ap.add_argument("eval")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--bottom", default="13-512-256-64-16")
    ap.add_argument("--top", default="367-512-256-1")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--opt", choices=("sgd", "adagrad"), default="sgd")
    ap.add_argument("--max", type=int, default=0)
    return ap


def main():
    a = arguments(argparse.ArgumentParser()).parse_args()
    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    y, x, c = read_tsv(a.train, a.rows, a.max)
    ye, xe, ce = read_tsv(a.eval, a.rows, 0)
    model = Model(a, c.shape[1])
    opt = (torch.optim.SGD if a.opt == "sgd" else torch.optim.Adagrad)(model.parameters(), lr=a.lr)
    bce = nn.BCEWithLogitsLoss()
    n = len(y)
    t0 = time.time()
    for s in range(0, n, a.batch):
        train_step(a, model, opt, bce, x, c, y, s)
    seconds = time.time() - t0
    with torch.no_grad():
        p = torch.sigmoid(model(xe, ce)).numpy()
    ll, ne = normalized_entropy(ye.numpy(), p)
    print(json.dumps({"peer": "torch-" + torch.__version__, "threads": a.threads, "bf16": a.bf16,
                      "batch": a.batch, "opt": a.opt, "examples": n, "seconds": round(seconds, 3),
                      "eps": round(n / seconds, 1), "eval_logloss": round(ll, 5),
                      "eval_ne": round(ne, 5), "eval_auc": round(area_under_curve(ye.numpy(), p), 5)}))


if __name__ == "__main__":
    main()
