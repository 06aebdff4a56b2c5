/* shadowsync ckpt: checkpoint directories and the saved model's files
 * (DESIGN §8). A checkpoint is a directory of parts, each written by
 * whoever owns it (the trainers' replicas and state, the embedding and
 * sync PSs' shards, the readers' places), with a MANIFEST of their sizes
 * and hashes written last; a reader trusts only a complete one. The dense
 * model file is read by the trainers, the evals and the sync PSs (a center
 * that starts from a replica), so it lives here, below them all. */
#ifndef SHADOWSYNC_CKPT_H
#define SHADOWSYNC_CKPT_H

#include "core.h"

/* Checkpoint directories (checkpoint.c): parts written into
 * DIR/ckpt-N.tmp, each fsynced and hashed by ckpt_add; ckpt_commit writes
 * the MANIFEST (parts, sizes, hashes, figures) last, renames the directory
 * to DIR/ckpt-N and keeps the newest `keep`. */
#define MAX_META 64
struct ckpt;
struct ckpt_meta_set {
    int n;
    char key[MAX_META][48];
    double val[MAX_META];
};
int ckpt_begin(struct ckpt **out, const char *dir, struct ss_err *e);
/* Where part name goes (write it, then ckpt_add it). */
const char *ckpt_part_path(const struct ckpt *k, const char *name, char *buf, size_t cap);
int ckpt_add(struct ckpt *k, const char *name, struct ss_err *e);
const char *ckpt_tmp_dir(const struct ckpt *k); /* where the parts go: DIR/ckpt-N.tmp */
/* ckpt_add of every file in the directory (other ranks wrote some), by name. */
int ckpt_add_all(struct ckpt *k, struct ss_err *e);
void ckpt_meta(struct ckpt *k, const char *key, double value);
int ckpt_commit(struct ckpt *k, int keep, const char **final, struct ss_err *e);
void ckpt_free(struct ckpt *k);             /* removes an uncommitted one */
void ckpt_remove(const char *ckdir);        /* a committed one, its MANIFEST first */
/* The newest complete checkpoint of dir into out (its MANIFEST whole and
 * every part's size and hash matching), with its figures; *skipped counts
 * newer ones refused (each reported on stderr). */
int ckpt_latest(const char *dir, char *out, size_t cap, struct ckpt_meta_set *m, int *skipped,
                struct ss_err *e);
/* 0 when DIR holds no complete checkpoint of a run that trained something;
 * else fails naming the newest (*found: its figures): a run that does not
 * resume must not follow an earlier run's checkpoints. */
int ckpt_refuse_earlier(const char *dir, struct ckpt_meta_set *found, struct ss_err *e);
double ckpt_meta_get(const struct ckpt_meta_set *m, const char *key, double dflt);
/* The figures of a checkpoint already verified (its parts not read again). */
int ckpt_read_meta(const char *ckdir, struct ckpt_meta_set *m, struct ss_err *e);
/* The figures of dir's newest checkpoint whose MANIFEST reads whole, its
 * parts not hashed (ckpt_latest's, unless a part of it is damaged); -1:
 * none. */
int ckpt_newest_meta(const char *dir, struct ckpt_meta_set *m);
/* Its MANIFEST and every part's size and hash, as a resume checks them. */
int ckpt_verify(const char *ckdir, struct ckpt_meta_set *m, struct ss_err *e);

/* The dense model file (model_io.c): DIR/dense.bin, beside the tables'
 * DIR/tables*.bin (embps_save). l: the model's layout; a file of another
 * pooling or other MLP widths is refused, naming both. */
int dense_save(const float *w, size_t n, const struct model_layout *l, const char *path,
               struct ss_err *e);
int dense_load(float *w, size_t n, const struct model_layout *l, const char *path,
               struct ss_err *e);

#endif
