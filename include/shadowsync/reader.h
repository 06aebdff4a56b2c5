/* shadowsync reader: turns data files into batches (DESIGN §5).
 *
 * A reader owns an ordered list of files (text with a schema, or binary
 * shards) and hands out batches under one lock, so every example goes to
 * exactly one caller whatever the number of workers and trainers; text
 * lines are split under it and parsed by each caller after. Bad text
 * lines are counted and skipped; the first few are reported as
 * file:line: reason. Binary shards are read with no parsing.
 *
 * Binary shard layout (little-endian), written by `shadowsync convert`:
 *   header, 64 bytes:
 *     char     magic[8]     "SSHARD\0\0"
 *     uint32   version      1
 *     uint32   header_bytes 64
 *     uint32   n_dense      dense features per example
 *     uint32   n_tables     categorical features per example
 *     uint64   examples     records in the file
 *     uint64   total_ids    ids over all records
 *     uint32   flags        bit 0: some bag holds more than one id;
 *                           bit 1: each record's ids are followed by their
 *                           weights (libsvm data: float32 weights[sum of bag_len])
 *     uint8    pad[20]      zero
 *   records, back to back:
 *     float    label
 *     float    dense[n_dense]
 *     uint32   bag_len[n_tables]
 *     uint64   ids[sum of bag_len]
 *     float    weights[sum of bag_len]   (flags bit 1 only)
 * A file whose size is not exactly what the header promises is refused as
 * truncated; a wrong magic or version is refused as foreign. */
#ifndef SHADOWSYNC_READER_H
#define SHADOWSYNC_READER_H

#include "core.h"

#define SHARD_MAGIC "SSHARD\0\0"
#define SHARD_VERSION 1
#define SHARD_HEADER_BYTES 64

struct schema {
    int format;                 /* FMT_CRITEO, FMT_CSV, FMT_LIBSVM or FMT_BINARY (resolved) */
    char sep;
    int header_lines;
    int label_col;              /* -1: none (unlabeled data, label NAN) */
    int n_dense, n_cat;
    int dense_cols[SS_MAX_COLS]; /* -1: no column (data with no dense feature: one constant 0,
                                  * the bottom MLP's one input, model.bottom = 1-...) */
    int cat_cols[SS_MAX_COLS];  /* column of each categorical feature */
    int is_multihot[SS_MAX_COLS];
    char multihot_sep;
    int cat_encoding;
    int n_cols;                 /* fields a line must have */
    int missing_is_nan;         /* an empty dense field reads as NAN, not 0 (inspect counts
                                 * them; schema_from_config leaves it 0) */
    /* libsvm: field f's role (field_role[f]: t + 1 for table t, -(j + 1) for dense
     * feature j, 0 unread), and with data.fields each field's index range */
    int32_t field_role[SS_MAX_COLS];
    int weighted;               /* ids may weigh other than 1: libsvm text, or shards of it */
    int n_fields;               /* data.fields' ranges; 0: libFM's field:index:value */
    uint64_t field_lo[SS_MAX_COLS], field_hi[SS_MAX_COLS];
};

/* Resolves the schema for a data path from the config (format auto: ".bin"
 * shards or a directory of them are binary, anything else Criteo TSV). */
int schema_from_config(struct schema *s, const struct ss_config *c, const char *path,
                       struct ss_err *e);

struct reader_stats {
    int64_t examples, bad_lines, files_done;
    int stopped; /* a wait on a pipe or a read ended by this signal (ss_halt_raised), else 0 */
    int stuck;   /* ...a read that had not returned (else a pipe with nothing to read) */
};

struct reader;

/* Before a run trains: data.eval names data files, and none of them is
 * also among data.train's (where those can be listed here: a cluster's
 * reader services may hold them elsewhere). Fails naming the key. */
int reader_check_eval(const char *train, const char *eval, struct ss_err *e);
/* An output file (what: "--predictions", say) is neither one of the data
 * files that key = path names nor would it be listed among them (written
 * into its directory, or matching its glob). */
int reader_check_output(const char *what, const char *out, const char *key, const char *path,
                        struct ss_err *e);
/* Before the embedded default trains: data.train names data files. Fails
 * naming the key. */
int reader_check_train(const char *train, struct ss_err *e);
/* path: a file, a directory (its regular files, sorted), or a glob. */
int reader_open(struct reader **out, const char *path, const struct schema *s,
                int64_t max_examples, int report_bad, struct ss_err *e);
/* Before the first next(): reads the files (this reader's share of them)
 * that many times over, in the same order (data.epochs); max_examples
 * counts every pass's. */
void reader_set_epochs(struct reader *r, int epochs);
/* Over 1 % of the lines read from path (data key key, or NULL) were no
 * examples: a file not meant, columns that do not fit. Said on stderr,
 * after stdout's figures; named: the first bad lines were printed. */
void reader_warn_bad_share(const char *key, const char *path, int64_t bad, int64_t examples,
                           int named);
/* Fails where a pass after the first could not read a file again (a pipe). */
int reader_check_passes(const struct reader *r, int epochs, struct ss_err *e);
/* Fills b with up to b->cap examples (b->n = 0 at the end of the data).
 * Thread-safe. Returns 0 or a negative code (I/O error, corrupt shard). */
int reader_next(struct reader *r, struct batch *b, struct ss_err *e);
void reader_stats(struct reader *r, struct reader_stats *st);
/* Makes r share `index` of `count` readers over the same files, which
 * split them exactly once (call before the first next()). split
 * (data.split): SPLIT_LINES hands out only the examples whose position in
 * the data (every data line or record, good or bad) is index mod count,
 * and max_examples caps the examples met by all of them together;
 * SPLIT_FILES keeps only whole files, dealt largest first to the share
 * with the fewest bytes so far, and max_examples is split evenly between
 * the shares; SPLIT_AUTO takes files where the busiest share gets at most
 * SPLIT_AUTO_MAX times the mean bytes. Returns the split taken; the
 * busiest share over the mean into *imbalance (or NULL). */
#define SPLIT_AUTO_MAX 1.10
int reader_set_share(struct reader *r, int index, int count, int split, double *imbalance);
/* The line that says how count shares ("readers", "trainers") split the
 * data at path under split, on stdout (nothing for one, or where the
 * files cannot be read here). */
void reader_split_say(const char *path, const struct schema *s, int count, const char *whom,
                      int split);
/* fn(arg, where) for each data line of a text file past its header that
 * yields no example (bad or blank), where in batch.example_id's form
 * (file index << 40 | 0-based line), in the order read, from inside
 * reader_next (the caller's thread, outside the reader's lock): a lone
 * reader's caller can line its outputs up with the input's lines. */
void reader_on_skip(struct reader *r, void (*fn)(void *arg, uint64_t where), void *arg);
/* How far through its data the reader is, 0..1: the bytes parsed of all its
 * files' bytes (others' shares included, when split line by line), or of
 * data.max_examples where that is further; 1 at the end. */
double reader_fraction(struct reader *r);
/* The bytes reader_fraction goes through: its files' bytes times data.epochs
 * (a share's weight among the trainers' shares). */
double reader_share_bytes(struct reader *r);
void reader_close(struct reader *r);

/* How many examples a run over data.train meets (count.c): a shard's
 * header count, a text file's lines (counted up to 64 MiB, else sampled;
 * gzip's estimated past 128 MiB inflated) less its header lines, times
 * data.epochs, capped by data.max_examples. examples = -1 where that
 * cannot be known (a stream, files not listed here), why saying so. */
struct example_count {
    int64_t examples;           /* the run's, every pass's; -1: unknown */
    int64_t per_pass;           /* one pass over data.train */
    int exact;                  /* counted, not estimated */
    int capped;                 /* data.max_examples ends the run first */
    int n_files;
    char why[sizeof(((struct ss_err *)0)->msg)]; /* examples = -1: why */
};
int reader_count_examples(const struct ss_config *c, struct example_count *out,
                          struct ss_err *e);

/* Where a reader is, for checkpoints (DESIGN §8): the next example to hand
 * out, and the counts so far. Plain data, written as is. */
#define READER_POS_MAGIC 0x53534F50u       /* "SSPO"; split line by line (or alone) */
#define READER_POS_MAGIC_FILES 0x53534650u /* "SSPF"; split by whole files */
struct reader_pos {
    uint32_t magic;
    int32_t cur, is_open, skipping;
    uint64_t files_hash;        /* the file list it applies to */
    int64_t offset;             /* text: bytes of file cur consumed; binary: record offset */
    int64_t line_no, rec, ids_left, seen, handed, bad_lines, reported, files_done;
    uint64_t bytes_done;
    int64_t epoch;              /* the pass over the files (0-based); absent in positions
                                 * written before data.epochs: 0 */
    int64_t cur_bytes;          /* file cur's size on disk when open, else -1; absent in
                                 * older positions: -1 (not checked) */
};
void reader_tell(struct reader *r, struct reader_pos *p);
/* Before the first next(): continues from p, which must come from a reader
 * over the same files (same schema, shares and max_examples). */
int reader_seek(struct reader *r, const struct reader_pos *p, struct ss_err *e);
/* The same through a file (checkpoint parts). */
int reader_save_pos(struct reader *r, const char *path, struct ss_err *e);
int reader_load_pos(struct reader *r, const char *path, struct ss_err *e);
int reader_pos_read(const char *path, struct reader_pos *pos, struct ss_err *e); /* no seek */

/* Parses one text line (no newline) into example slot i of b.
 * Returns 0, or SS_EFORMAT with a reason in e. Exposed for tests. */
int parse_line(const struct schema *s, char *line, size_t len, struct batch *b, struct ss_err *e);

/* The reader role of a cluster job (service.c, DESIGN §5): serves batches
 * of its share of data.train (share role_index of job.readers) over Thrift
 * until the job ends. */
struct job_plan;
int reader_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e);
/* The service alone, over an open reader (borrowed); batches up to 4096
 * examples, or the cap set by reader_service_batch_cap (the job's
 * trainer.batch_size: what its trainers ask for). */
typedef struct _ThriftProcessor ThriftProcessor;
struct reader_service;
struct reader_service *reader_service_create(struct reader *r, int n_dense, int n_cat,
                                             const char *token);
ThriftProcessor *reader_service_processor(struct reader_service *s);
void reader_service_batch_cap(struct reader_service *s, int cap);
/* Where save requests may write: below dir (the job's checkpoint.dir). */
void reader_service_save_root(struct reader_service *s, const char *dir);
void reader_service_counts(struct reader_service *s, int64_t *served, int64_t *examples,
                           int64_t *refused);
void reader_service_free(struct reader_service *s);

/* `shadowsync convert`: text to binary shards of up to shard_examples each
 * (0 = one file), streaming in constant memory; the first report_bad bad
 * lines are named. Reading no example fails, writing nothing. */
int reader_convert(const char *in, const char *out_dir, const struct schema *s,
                   int64_t shard_examples, int report_bad, struct ss_err *e);
/* reader_convert of in as config c reads it (text with a label column). */
int reader_convert_config(const struct ss_config *c, const char *in, const char *out_dir,
                          int64_t shard_examples, struct ss_err *e);

/* `shadowsync inspect` (inspect.c): one pass over data.train, as training
 * reads it, in constant memory, or its first `sample` examples counted
 * exactly; per categorical feature the distinct ids, the share of lookups
 * on an embedding row shared with another id at model.rows and the rows
 * that bring that share under 1 %; per dense feature the missing share,
 * min, max and mean; the label's CTR and the bad lines. A text table on
 * out, JSON into json_path (NULL: none), and a progress line on stderr
 * every output.log_interval_s (none with output.quiet). */
struct inspect_opts {
    int64_t sample;             /* 0: the whole data (HyperLogLog estimates); N: the first N
                                 * examples, every id counted exactly */
    const char *json_path;
};
int reader_inspect(const struct ss_config *c, const struct inspect_opts *o, FILE *out,
                   struct ss_err *e);
/* The run's start-up collision check (issue 29): the first `examples`
 * examples of data.train (a pipe is not read: the run would lose them),
 * every id counted exactly, per table the distinct ids seen, the share of
 * lookups on a row (id mod model.rows) shared with another id, counted as
 * inspect counts it, and the rows that bring it under 1 %. */
struct collision_table {
    int col;                    /* its data.cat_cols column; -1 in binary shards */
    int64_t ids, rows, rows_1pct;
    int has_empty;              /* id 0 (an empty field) is among ids */
    double shared, bytes_1pct;  /* bytes_1pct: rows_1pct rows' memory */
};
struct collision_check {
    int64_t examples;           /* read (0: nothing was, e.g. a pipe) */
    int n_tables;
    struct collision_table *t;  /* [n_tables] */
};
int reader_collision_check(const struct ss_config *c, int64_t examples,
                           struct collision_check *out, struct ss_err *e);
void reader_collision_free(struct collision_check *k);
/* What a run says of it at start, whatever output.quiet: with
 * data.collision_check_batches > 0, that check on that many batches of
 * trainer.batch_size examples, and a warning on f for each table (the
 * first 10, then their count) that holds more distinct ids than rows (the
 * empty field's id 0 aside) with over data.collision_warn of its lookups
 * on a shared row, and a line that
 * sums them up. A check that cannot read the data says nothing (the run
 * names why). Returns the tables warned of. */
int reader_warn_collisions(const struct ss_config *c, FILE *f);
/* model.rows = auto (issue 29): one pass over data.train as inspect makes
 * it (its first model.rows_auto_examples, else data.max_examples, else all
 * of it), quiet but for a progress line on stderr every
 * output.log_interval_s, counting each table's distinct ids (exactly up to
 * 4096, then a HyperLogLog estimate); each auto table gets the rows that
 * put at most 1 % of its lookups on a row shared with another id, for ids
 * hashed uniformly, and where the auto tables weigh more than
 * model.rows_budget_mb together, every one is scaled down by the same
 * factor. A table that model.rows gives a number keeps it. */
struct rows_auto_table {
    int col;                    /* its data.cat_cols column; -1 in binary shards */
    int is_auto;                /* auto in model.rows; else rows is the config's */
    int ids_exact;              /* ids counted, not estimated */
    double ids;                 /* distinct ids seen (an empty field's id 0 among them) */
    int64_t rows_1pct, rows;    /* the rows for at most 1 % shared; the rows it gets */
    double shared;              /* the share of its lookups on a shared row at rows
                                 * (ids hashed uniformly) */
};
struct rows_auto {
    int64_t examples;           /* read */
    int whole;                  /* all of data.train was read */
    double seconds;
    double bytes_per_row;       /* 4 x (model.dim + row-wise Adagrad's state) */
    double need, scale;         /* the auto tables' bytes at rows_1pct; the budget's factor
                                 * (1: within model.rows_budget_mb) */
    int n_tables;
    struct rows_auto_table *t;  /* [n_tables] */
};
int reader_rows_auto(const struct ss_config *c, struct rows_auto *out, struct ss_err *e);
void reader_rows_auto_free(struct rows_auto *r);
/* What a run says of it at start: a line, one per table (its ids, with one
 * standard error where estimated, its rows and their memory), and the
 * budget's cut where there was one. */
void reader_rows_auto_print(const struct ss_config *c, const struct rows_auto *r, FILE *f);
/* Its distinct-id estimate: a HyperLogLog sketch of 2^INSPECT_HLL_BITS
 * one-byte registers (standard error 1.04 / sqrt(2^16) = 0.41 %), read
 * with Ertl's improved estimator (2017), which needs no bias table and
 * matches linear counting at small counts. Exposed for tests. */
#define INSPECT_HLL_BITS 16
struct inspect_hll {
    uint8_t reg[1u << INSPECT_HLL_BITS];
};
void inspect_hll_add(struct inspect_hll *h, uint64_t id); /* zero the struct to start */
double inspect_hll_estimate(const struct inspect_hll *h);
double inspect_hll_std_error(void);
/* For n distinct ids hashed uniformly into rows rows: the chance that a
 * lookup's row holds another id too, 1 - (1 - 1/rows)^(n - 1); and the
 * fewest rows that keep it at most share, ceil((n - 1) / -ln(1 - share)). */
double inspect_shared_share(double n, double rows);
int64_t inspect_rows_for(double n, double share);

/* `shadowsync gen`: Criteo-shaped data from a hidden teacher (DESIGN §5).
 * Writes dir/train.tsv, dir/eval.tsv, dir/train.prob, dir/eval.prob and
 * returns the eval file's Bayes NE in *bayes_ne. */
struct gen_opts {
    const char *out_dir;
    int64_t examples, eval_examples;
    uint64_t seed;
    int n_dense, n_tables;
    const int64_t *cardinality; /* [n_tables] distinct ids per feature */
    const int *multihot;        /* [n_tables] nonzero: a bag of ids (NULL: none) */
    int bag_size;               /* a bag's mean ids (1 to 2·bag_size - 1, uniform) */
    char multihot_sep;          /* between a bag's ids (0: ',') */
};
int gen_write(const struct gen_opts *o, double *bayes_ne, struct ss_err *e);
/* gen_write, then what it wrote to out: its multi-hot bags, "bayes_ne=X"
 * and what that figure is. */
int gen_run(const struct gen_opts *o, FILE *out, struct ss_err *e);
/* Criteo's shape, gen's without a config: 13 dense features, 26 tables of
 * the Kaggle set's cardinalities, no bags. */
void gen_criteo_shape(struct gen_opts *o);
/* The shape of config c's model into o: its features and tables' rows (l,
 * its model_layout_init: model_layout_free it), its multi-hot columns (s),
 * once gen's layout (tab-separated text, label in column 0, then the dense
 * and the categorical columns in order, hex ids, no header) is found to be
 * what c reads (a config of binary shards gives the model's shape alone).
 * o holds l's and s's arrays: keep both while it is used. */
int gen_shape_from_config(struct gen_opts *o, const struct ss_config *c, struct model_layout *l,
                          struct schema *s, struct ss_err *e);
/* The multi-hot features of o. */
int gen_multihot_features(const struct gen_opts *o);

#endif
