/* Tests of src/reader/: the batch, line parsing (Criteo and schema CSV),
 * schema resolution, the reader over files, directories and globs (bad
 * lines, exactly-once under threads), convert and the binary reader, shard
 * refusal, and the synthetic data generator. */
#include "check.h"
#include "shadowsync/reader.h"
#include "../src/reader/internal.h"

#include <fcntl.h>
#include <ftw.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char root[64];

static void path_of(char *out, size_t cap, const char *rel)
{
    snprintf(out, cap, "%s/%s", root, rel);
}

static void write_file(const char *rel, const char *data, size_t n)
{
    char p[512];
    path_of(p, sizeof p, rel);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) {
        perror(p);
        exit(2);
    }
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    p[*n] = '\0';
    fclose(f);
    return p;
}

static int64_t count_lines(const char *path)
{
    size_t n;
    char *p = read_all(path, &n);
    int64_t k = 0;
    for (size_t i = 0; p && i < n; i++)
        k += p[i] == '\n';
    free(p);
    return k;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

/* A deterministic good Criteo line for index i (label i%3==0, dense 0 = i,
 * cat 0 = i as 8 hex digits). */
static int criteo_line(char *buf, int64_t i)
{
    int n = sprintf(buf, "%d", i % 3 == 0);
    for (int j = 0; j < 13; j++) {
        if ((i + j) % 7 == 0 && j)
            n += sprintf(buf + n, "\t");
        else
            n += sprintf(buf + n, "\t%lld", (long long)(j == 0 ? i : (i * 31 + j) % 1000));
    }
    for (int t = 0; t < 26; t++) {
        if ((i + t) % 11 == 0 && t)
            n += sprintf(buf + n, "\t");
        else if (t == 0)
            n += sprintf(buf + n, "\t%08llx", (unsigned long long)i);
        else
            n += sprintf(buf + n, "\t%08llx",
                         (unsigned long long)((uint64_t)(i * 2654435761u + t) & 0xffffffffu));
    }
    return n;
}

static void criteo_schema(struct schema *s)
{
    struct ss_config c;
    struct ss_err e;
    memset(&c, 0, sizeof c);
    c.data.separator = "\t";
    if (schema_from_config(s, &c, NULL, &e)) {
        printf("schema: %s\n", e.msg);
        exit(2);
    }
}

/* Captures stderr into a file while reading; returns what was written. */
static int saved_fd = -1;
static void capture_begin(void)
{
    char p[512];
    path_of(p, sizeof p, "stderr.txt");
    fflush(stderr);
    saved_fd = dup(2);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}
static char *capture_end(void)
{
    char p[512];
    size_t n;
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    path_of(p, sizeof p, "stderr.txt");
    return read_all(p, &n);
}

/* Reads everything; returns examples, fills ids (may be NULL). */
static int64_t read_all_examples(const char *path, const struct schema *s, int cap, int64_t max,
                                 uint64_t *ids, int64_t ids_cap, struct reader_stats *st,
                                 struct ss_err *e)
{
    struct reader *r;
    if (reader_open(&r, path, s, max, 10, e))
        return -1;
    struct batch b;
    batch_init(&b, cap, s->n_dense, s->n_cat);
    int64_t n = 0;
    for (;;) {
        if (reader_next(r, &b, e)) {
            n = -1;
            break;
        }
        if (b.n == 0)
            break;
        for (int i = 0; i < b.n; i++, n++)
            if (ids && n < ids_cap)
                ids[n] = b.example_id[i];
    }
    if (st)
        reader_stats(r, st);
    batch_free(&b);
    reader_close(r);
    return n;
}

static void test_batch(void)
{
    struct batch b;
    batch_init(&b, 4, 2, 3);
    CHECK(b.cap == 4 && b.id_cap == 12 && b.off[0] == 0, "batch_init", "cap %d id_cap %zu",
          b.cap, b.id_cap);
    for (int i = 0; i < 12; i++)
        b.ids[i] = (uint64_t)i * 7;
    batch_reserve_ids(&b, 100);
    int same = 1;
    for (int i = 0; i < 12; i++)
        same &= b.ids[i] == (uint64_t)i * 7;
    CHECK(b.id_cap >= 100 && same, "batch_reserve_ids keeps ids", "id_cap %zu", b.id_cap);
    b.n = 3;
    b.off[0] = 5;
    batch_clear(&b);
    CHECK(b.n == 0 && b.off[0] == 0, "batch_clear", "n %d off0 %d", b.n, b.off[0]);
    batch_free(&b);
    CHECK(b.label == NULL && b.ids == NULL, "batch_free", "pointers left");
}

static void test_parse_criteo(void)
{
    struct schema s;
    struct ss_err e;
    struct batch b;
    criteo_schema(&s);
    CHECK(s.format == FMT_CRITEO && s.n_cols == 40 && s.n_dense == 13 && s.n_cat == 26 &&
          s.sep == '\t', "criteo schema", "fmt %d cols %d", s.format, s.n_cols);
    batch_init(&b, 4, 13, 26);

    char line[2048];
    int n = sprintf(line, "1\t5\t\t-3\t0e400\t-0.0e999");
    for (int j = 5; j < 13; j++)
        n += sprintf(line + n, "\t%d", j * 100);
    n += sprintf(line + n, "\t68fd1e64\t\tABCDEF01");
    for (int t = 3; t < 26; t++)
        n += sprintf(line + n, "\t%08x", t);
    int rc = parse_line(&s, line, (size_t)n, &b, &e);
    CHECK(rc == 0 && b.n == 1, "criteo good line parses", "rc %d: %s", rc, rc ? e.msg : "");
    CHECK(b.label[0] == 1.0f, "criteo label", "%g", b.label[0]);
    CHECK(b.dense[0] == 5.0f && b.dense[1] == 0.0f && b.dense[2] == -3.0f &&
          b.dense[3] == 0.0f && b.dense[4] == 0.0f && b.dense[12] == 1200.0f,
          "criteo dense values, missing = 0, negative, 0e400 = 0",
          "%g %g %g %g %g %g", b.dense[0], b.dense[1], b.dense[2], b.dense[3], b.dense[4],
          b.dense[12]);
    CHECK(b.ids[0] == 0x68fd1e64u && b.ids[1] == 0 && b.ids[2] == 0xabcdef01u && b.ids[25] == 25,
          "criteo hex ids, missing = 0, upper case", "%llx %llx %llx",
          (unsigned long long)b.ids[0], (unsigned long long)b.ids[1], (unsigned long long)b.ids[2]);
    int offs_ok = 1;
    for (int t = 0; t <= 26; t++)
        offs_ok &= b.off[t] == t;
    CHECK(offs_ok, "criteo offsets one id per table", "off[26] %d", b.off[26]);

    /* second line in slot 1, with a CR at the end */
    n = criteo_line(line, 42);
    line[n++] = '\r';
    rc = parse_line(&s, line, (size_t)n, &b, &e);
    CHECK(rc == 0 && b.n == 2 && b.label[1] == 1.0f && b.dense[13] == 42.0f &&
          b.ids[26] == 42 && b.off[52] == 52, "second line appends at slot 1 (CRLF ok)",
          "rc %d n %d dense %g id %llu", rc, b.n, b.dense[13], (unsigned long long)b.ids[26]);

    /* bad lines: reason and batch unchanged */
    struct { const char *name, *want; int field, bad; const char *val; } cases[] = {
        {"field count 39", "expected 40 fields, found 39", -1, 0, NULL},
        {"field count 41", "expected 40 fields, found 41", -2, 0, NULL},
        {"non-numeric dense", "column 3: dense value \"abc\" is not a number", 3, 0, "abc"},
        {"bad label", "label \"2\" is not 0 or 1", 0, 0, "2"},
        {"empty label", "label \"\" is not 0 or 1", 0, 0, ""},
        {"bad hex token", "column 20: bad hex token \"xyz1\"", 20, 0, "xyz1"},
        {"too long hex token", "bad hex token", 21, 0, "11112222333344445"},
        {"dense with junk", "column 5: dense value \"12x\"", 5, 0, "12x"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char f[40][32];
        int nf = 40;
        for (int c = 0; c < 40; c++)
            strcpy(f[c], c == 0 ? "0" : c < 14 ? "1" : "0a0b0c0d");
        if (cases[k].field == -1)
            nf = 39;
        if (cases[k].field == -2)
            nf = 41;
        if (cases[k].field >= 0)
            strcpy(f[cases[k].field], cases[k].val);
        n = 0;
        for (int c = 0; c < nf; c++)
            n += sprintf(line + n, "%s%s", c ? "\t" : "", c < 40 ? f[c] : "x");
        int before = b.n;
        int32_t off_before = b.off[b.n * 26];
        e.msg[0] = '\0';
        rc = parse_line(&s, line, (size_t)n, &b, &e);
        char name[128];
        snprintf(name, sizeof name, "bad line rejected: %s", cases[k].name);
        CHECK(rc == SS_EFORMAT && strstr(e.msg, cases[k].want) && b.n == before &&
              b.off[b.n * 26] == off_before, name, "rc %d msg \"%s\"", rc, e.msg);
    }
    batch_free(&b);
}

static uint64_t fnv(const char *p)
{
    uint64_t h = 14695981039346656037ull;
    for (; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

/* libSVM/libFM lines: fields to tables and dense features, values as
 * weights, absent fields as id 0, each bad line named. */
static void test_parse_libsvm(void)
{
    struct ss_config c;
    struct schema s;
    struct ss_err e;
    memset(&c, 0, sizeof c);
    c.data.format = FMT_LIBSVM;
    c.data.dense_cols = "0";
    c.data.cat_cols = "2,1";
    int rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.format == FMT_LIBSVM && s.n_dense == 1 && s.n_cat == 2 &&
              s.field_role[0] == -1 && s.field_role[2] == 1 && s.field_role[1] == 2,
          "libFM schema: fields to dense and tables", "rc %d %s", rc, rc ? e.msg : "");
    struct batch b;
    batch_init(&b, 4, 1, 2);
    char l1[] = "1 1:7:1 0:3:2.5 2:40:1 1:9:1 5:1:3 # a comment";
    rc = parse_line(&s, l1, strlen(l1), &b, &e);
    CHECK(rc == 0 && b.n == 1 && b.label[0] == 1 && b.dense[0] == 2.5f && b.off[1] == 1 &&
              b.off[2] == 3 && b.ids[0] == 40 && b.ids[1] == 7 && b.ids[2] == 9 && !b.weighted,
          "libFM line: a field's features in its bag, an unread field skipped, values 1 unweighted",
          "rc %d %s off %d %d ids %llu %llu", rc, rc ? e.msg : "", b.off[1], b.off[2],
          (unsigned long long)b.ids[0], (unsigned long long)b.ids[1]);
    char l2[] = "-1\t1:8:0.5\tqid:3";
    rc = parse_line(&s, l2, strlen(l2), &b, &e);
    CHECK(rc == 0 && b.n == 2 && b.label[1] == 0 && b.dense[1] == 0 && b.off[3] == 4 &&
              b.ids[3] == 0 && b.off[4] == 5 && b.ids[4] == 8 && b.weighted &&
              b.wts[4] == 0.5f && b.wts[3] == 1.0f && b.wts[0] == 1.0f,
          "label -1 is 0; an absent field is id 0 weighing 1; a value 0.5 weighs the bag",
          "rc %d %s off %d %d wts %g", rc, rc ? e.msg : "", b.off[3], b.off[4],
          b.weighted ? b.wts[4] : -1);
    static const struct {
        const char *line, *want, *name;
    } bad[] = {
        {"2 1:3:1", "label \"2\" is not 0/1 or -1/+1", "libsvm: a label not 0/1/-1/+1"},
        {"1 1:x:1", "feature \"1:x:1\" is not", "libsvm: a bad index"},
        {"1 7", "feature \"7\" is not index:value", "libsvm: a token without a colon"},
        {"1 3:1", "names no field", "libsvm: index:value without data.fields"},
        {"0 0:1:1 0:2:1", "dense field 0 twice", "libsvm: a dense field twice"},
        {"", "no label", "libsvm: an empty line"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s", bad[i].line);
        rc = parse_line(&s, line, strlen(line), &b, &e);
        CHECK(rc == SS_EFORMAT && strstr(e.msg, bad[i].want) && b.n == 2, bad[i].name,
              "rc %d %s", rc, e.msg);
    }
    batch_free(&b);

    /* libSVM's index:value with data.fields' ranges */
    c.data.fields = "1-2, 10-19,20-29";
    c.data.dense_cols = "0";
    c.data.cat_cols = "2,1";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.n_fields == 3 && s.field_lo[1] == 10 && s.field_hi[2] == 29,
          "data.fields: a range per field", "rc %d %s", rc, rc ? e.msg : "");
    batch_init(&b, 2, 1, 2);
    char l3[] = "+1 25:1 2:4 12:1";
    rc = parse_line(&s, l3, strlen(l3), &b, &e);
    CHECK(rc == 0 && b.dense[0] == 4 && b.ids[0] == 25 && b.ids[1] == 12 && b.off[2] == 2,
          "libSVM line: each index's field from data.fields", "rc %d %s", rc, rc ? e.msg : "");
    char l4[] = "1 30:1";
    rc = parse_line(&s, l4, strlen(l4), &b, &e);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, "index 30 is in no range of data.fields"),
          "libSVM: an index outside every field is a bad line", "rc %d %s", rc, e.msg);
    batch_free(&b);
    static const struct {
        const char *fields, *dense, *cat, *want;
    } cfg[] = {
        {"1-5,3-9", "0", "1", "data.fields: fields 0 and 1 share indices"},
        {"1-5,x", "0", "1", "field 1 is not an index range"},
        {"1-5,6-9", "0", "2", "data.cat_cols names field 2, but data.fields has 2 fields"},
        {"", "1", "1", "data.cat_cols: field 1 is also a dense field"}};
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++) {
        c.data.fields = (char *)cfg[i].fields;
        c.data.dense_cols = (char *)cfg[i].dense;
        c.data.cat_cols = (char *)cfg[i].cat;
        rc = schema_from_config(&s, &c, NULL, &e);
        CHECK(rc < 0 && strstr(e.msg, cfg[i].want), cfg[i].want, "rc %d %s", rc, e.msg);
    }
    c.data.format = FMT_CSV;
    c.data.fields = "1-5";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc < 0 && strstr(e.msg, "data.fields applies to data.format = libsvm"),
          "data.fields on csv is refused", "rc %d %s", rc, e.msg);
}

static void test_parse_csv(void)
{
    struct ss_config c;
    struct schema s;
    struct ss_err e;
    memset(&c, 0, sizeof c);
    c.data.format = FMT_CSV;
    c.data.separator = ",";
    c.data.header = 1;
    c.data.label_col = 2;
    c.data.dense_cols = "0,3";
    c.data.cat_cols = "1,4-5";
    c.data.multihot_cols = "4";
    c.data.multihot_sep = "|";
    c.data.cat_encoding = CAT_HASH;
    int rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.format == FMT_CSV && s.n_cols == 6 && s.n_dense == 2 && s.n_cat == 3 &&
          s.is_multihot[1] && !s.is_multihot[0] && s.header_lines == 1 && s.sep == ',',
          "csv schema from config", "rc %d %s cols %d", rc, rc ? e.msg : "", s.n_cols);

    struct batch b;
    batch_init(&b, 4, 2, 3);
    char l1[] = "1.5,foo,1,-2e-1,a|b||c,";
    rc = parse_line(&s, l1, strlen(l1), &b, &e);
    CHECK(rc == 0 && b.label[0] == 1.0f && b.dense[0] == 1.5f && fabsf(b.dense[1] + 0.2f) < 1e-7f,
          "csv floats and label", "rc %d %s %g %g", rc, rc ? e.msg : "", b.dense[0], b.dense[1]);
    /* FNV-1a 64 of "a" is af63dc4c8601ec8c */
    int bag_ok = b.off[1] == 1 && b.off[2] == 4 && b.off[3] == 5 && b.ids[0] == fnv("foo") &&
                 b.ids[1] == 0xaf63dc4c8601ec8cull && b.ids[2] == fnv("b") &&
                 b.ids[3] == fnv("c") && b.ids[4] == 0;
    CHECK(rc == 0 && bag_ok, "multi-hot bag of 3 (empty token skipped), empty cat = 0",
          "off %d %d %d ids[1] %llx", b.off[1], b.off[2], b.off[3], (unsigned long long)b.ids[1]);
    char l2[] = ",bar,0,,,z,extra";
    rc = parse_line(&s, l2, strlen(l2), &b, &e);
    CHECK(rc == 0 && b.n == 2 && b.dense[2] == 0 && b.dense[3] == 0 && b.off[4] == 6 &&
          b.off[5] == 7 && b.ids[6] == 0 && b.off[6] == 8,
          "empty multi-hot = bag of one id 0; extra trailing column ok",
          "rc %d %s off %d %d %d", rc, rc ? e.msg : "", b.off[4], b.off[5], b.off[6]);
    /* bad lines, each named */
    static const struct {
        const char *line, *want, *name;
    } bad[] = {
        {"x,,0,3,,7", "column 0: dense value \"x\" is not a number", "csv non-numeric dense"},
        {"1,2,1", "expected at least 6 fields, found 3", "csv too few fields"},
        {"1,2,\"a,b\",4,5,6", "column 2: a quoted field (\"a): quotes are not read",
         "csv: a quoted field holding the separator is a bad line"},
        {"1,2,3,\"4\",5,6", "column 3: a quoted field (\"4\")",
         "csv: a quoted value is a bad line (it would hash as another id)"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s", bad[i].line);
        rc = parse_line(&s, line, strlen(line), &b, &e);
        CHECK(rc == SS_EFORMAT && strstr(e.msg, bad[i].want), bad[i].name, "rc %d %s", rc, e.msg);
    }
    char l5[] = "1,2,1.0,4,5,6";
    rc = parse_line(&s, l5, strlen(l5), &b, &e);
    CHECK(rc == 0 && b.label[2] == 1.0f, "label 1.0 accepted", "rc %d %s", rc, e.msg);
    batch_free(&b);

    /* decimal encoding */
    c.data.cat_encoding = CAT_DEC;
    c.data.multihot_cols = "";
    schema_from_config(&s, &c, NULL, &e);
    batch_init(&b, 2, 2, 3);
    char l6[] = "1,12,0,3,-1,18446744073709551615";
    rc = parse_line(&s, l6, strlen(l6), &b, &e);
    CHECK(rc == 0 && b.ids[0] == 12 && b.ids[1] == UINT64_MAX && b.ids[2] == UINT64_MAX,
          "decimal ids", "rc %d %s", rc, e.msg);
    char l7[] = "1,1x,0,3,1,18446744073709551616";
    rc = parse_line(&s, l7, strlen(l7), &b, &e);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, "column 1: bad decimal id \"1x\""), "bad decimal id",
          "rc %d %s", rc, e.msg);
    batch_free(&b);

    /* config errors and separators */
    c.data.separator = "\\t";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.sep == '\t', "separator backslash-t is a tab", "rc %d", rc);
    c.data.separator = "\t";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.sep == '\t', "separator tab char", "rc %d", rc);
    c.data.separator = "ab";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == SS_EINVAL && strstr(e.msg, "data.separator"), "separator of two chars refused",
          "rc %d %s", rc, e.msg);
    c.data.separator = ",";
    c.data.multihot_cols = "3";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == SS_EINVAL && strstr(e.msg, "not in data.cat_cols"),
          "multi-hot column outside cat_cols refused", "rc %d %s", rc, e.msg);
    c.data.multihot_cols = "";
    c.data.dense_cols = "2,3";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == SS_EINVAL && strstr(e.msg, "label column"), "label in dense_cols refused",
          "rc %d %s", rc, e.msg);
    c.data.format = FMT_CRITEO;
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == SS_EINVAL && strstr(e.msg, "data.label_col applies to data.format = csv"),
          "criteo refuses a column key, naming it", "rc %d %s", rc, e.msg);
    c.data.label_col = 0, c.data.dense_cols = "1-13", c.data.cat_cols = "";
    c.data.cat_encoding = CAT_HEX;
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.format == FMT_CRITEO && s.n_cols == 40 && s.sep == ',',
          "criteo takes the column keys at Criteo's layout (or unset), and the separator",
          "rc %d %s", rc, e.msg);
    c.data.multihot_cols = "15,39";
    c.data.multihot_sep = "|";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == 0 && s.is_multihot[1] && s.is_multihot[25] && !s.is_multihot[0] &&
              s.multihot_sep == '|', "criteo takes data.multihot_cols", "rc %d", rc);
    c.data.multihot_cols = "13";
    rc = schema_from_config(&s, &c, NULL, &e);
    CHECK(rc == SS_EINVAL && strstr(e.msg, "column 13 is not in the Criteo columns 14-39"),
          "criteo: a multi-hot column that is not categorical is refused", "rc %d %s", rc,
          e.msg);
}

static void test_reader_bad_lines(void)
{
    struct schema s;
    struct ss_err e;
    criteo_schema(&s);
    /* 500 lines: bad at 10 (short), 20 (label), 30 (dense); blank at 40; CRLF
     * at 50; the last without newline */
    size_t cap = 600 * 1024, n = 0;
    char *data = malloc(cap);
    int64_t good = 0;
    for (int i = 0; i < 500; i++) {
        char line[1024];
        int k = criteo_line(line, i);
        if (i == 10)
            k = sprintf(line, "1\t2\t3");
        if (i == 20)
            line[0] = '7';
        if (i == 30)
            memcpy(strchr(line, '\t') + 1, "q", 1);
        if (i == 40)
            k = 0;
        if (i == 50)
            line[k++] = '\r';
        good += !(i == 10 || i == 20 || i == 30 || i == 40);
        memcpy(data + n, line, (size_t)k);
        n += (size_t)k;
        if (i != 499)
            data[n++] = '\n';
    }
    write_file("bad.tsv", data, n);
    free(data);
    char p[512];
    path_of(p, sizeof p, "bad.tsv");
    uint64_t ids[600];
    struct reader_stats st;
    capture_begin();
    int64_t got = read_all_examples(p, &s, 64, 0, ids, 600, &st, &e);
    char *err = capture_end();
    CHECK(got == good && st.examples == good && st.bad_lines == 3 && st.files_done == 1,
          "reader returns the good lines and counts the bad", "got %lld of %lld, bad %lld",
          (long long)got, (long long)good, (long long)st.bad_lines);
    int ids_ok = got == good;
    for (int64_t i = 0, line = 0; ids_ok && i < got; i++, line++) {
        while (line == 10 || line == 20 || line == 30 || line == 40)
            line++;
        ids_ok &= ids[i] == (uint64_t)line;
    }
    CHECK(ids_ok, "example ids are the line indices (last line without newline)", "-");
    char want[600];
    snprintf(want, sizeof want, "%s:11: expected 40 fields, found 3", p);
    int has = err && strstr(err, want);
    snprintf(want, sizeof want, "%s:21: label \"7\" is not 0 or 1", p);
    has &= err && strstr(err, want) != NULL;
    snprintf(want, sizeof want, "%s:31: column 1: dense value \"q0\" is not a number", p);
    has &= err && strstr(err, want) != NULL;
    CHECK(has, "bad lines reported as FILE:LINE: reason", "stderr was: %s", err ? err : "");
    free(err);

    /* report_bad caps the printed lines */
    struct reader *r;
    reader_open(&r, p, &s, 0, 1, &e);
    struct batch b;
    batch_init(&b, 1000, 13, 26);
    capture_begin();
    reader_next(r, &b, &e);
    err = capture_end();
    int lines = 0;
    for (char *q = err; q && *q; q++)
        lines += *q == '\n';
    CHECK(lines == 1 && b.n == good, "report_bad = 1 prints one bad line", "printed %d", lines);
    free(err);
    reader_close(r);

    /* max_examples */
    got = read_all_examples(p, &s, 7, 10, NULL, 0, &st, &e);
    CHECK(got == 10 && st.examples == 10, "max_examples caps the examples", "got %lld",
          (long long)got);

    /* a line longer than the buffer */
    size_t big = (5u << 20);
    data = malloc(big + 4096);
    n = (size_t)criteo_line(data, 1);
    data[n++] = '\n';
    memset(data + n, '7', big);
    n += big;
    data[n++] = '\n';
    n += (size_t)criteo_line(data + n, 2);
    data[n++] = '\n';
    write_file("long.tsv", data, n);
    free(data);
    path_of(p, sizeof p, "long.tsv");
    capture_begin();
    got = read_all_examples(p, &s, 64, 0, ids, 600, &st, &e);
    err = capture_end();
    snprintf(want, sizeof want, "%s:2: line longer than", p);
    CHECK(got == 2 && st.bad_lines == 1 && ids[1] == 2 && err && strstr(err, want),
          "over-long line reported and skipped", "got %lld bad %lld err %s", (long long)got,
          (long long)st.bad_lines, err ? err : "");
    free(err);
    batch_free(&b);
}

struct worker {
    struct reader *r;
    uint64_t *ids;
    int64_t n, cap;
    int failed;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct batch b;
    struct ss_err e;
    batch_init(&b, 97, 13, 26);
    for (;;) {
        if (reader_next(w->r, &b, &e)) {
            w->failed = 1;
            break;
        }
        if (b.n == 0)
            break;
        for (int i = 0; i < b.n && w->n < w->cap; i++)
            w->ids[w->n++] = b.example_id[i];
    }
    batch_free(&b);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void write_criteo_file(const char *rel, int64_t lines, int bad_every)
{
    char *data = malloc((size_t)lines * 400 + 1), *q = data;
    for (int64_t i = 0; i < lines; i++) {
        if (bad_every && i % bad_every == bad_every - 1)
            q += sprintf(q, "oops");
        else
            q += criteo_line(q, i);
        *q++ = '\n';
    }
    write_file(rel, data, (size_t)(q - data));
    free(data);
}

/* k threads drain r; their example ids, sorted, into all (up to cap). */
static int64_t pull_threaded(struct reader *r, int k, uint64_t *all, int64_t cap, int *failed)
{
    struct worker w[8];
    pthread_t th[8];
    for (int t = 0; t < k; t++) {
        w[t] = (struct worker){.r = r, .cap = cap, .ids = malloc((size_t)cap * 8)};
        pthread_create(&th[t], NULL, worker_main, &w[t]);
    }
    int64_t n = 0;
    *failed = 0;
    for (int t = 0; t < k; t++) {
        pthread_join(th[t], NULL);
        for (int64_t i = 0; i < w[t].n && n < cap; i++)
            all[n++] = w[t].ids[i];
        *failed |= w[t].failed;
        free(w[t].ids);
    }
    qsort(all, (size_t)n, 8, cmp_u64);
    return n;
}

/* A run of a million blank lines costs the reader no memory of its own
 * for them (they are skipped in bounded rounds). */
static void test_blank_run(void)
{
    struct schema s;
    struct ss_err e = {0};
    criteo_schema(&s);
    size_t n = 1000000;
    char *data = malloc(n + 4096), *q = data + n;
    memset(data, '\n', n);
    for (int i = 0; i < 10; i++) {
        q += criteo_line(q, i);
        *q++ = '\n';
    }
    write_file("blanks.tsv", data, (size_t)(q - data));
    free(data);
    char p[512];
    path_of(p, sizeof p, "blanks.tsv");
    struct reader *r;
    struct batch b;
    batch_init(&b, 64, 13, 26);
    reader_open(&r, p, &s, 0, 0, &e);
    struct mallinfo2 m0 = mallinfo2(); /* small blocks and mmap'ed ones */
    int rc = reader_next(r, &b, &e);
    struct mallinfo2 m1 = mallinfo2();
    size_t grew = m1.uordblks + m1.hblkhd - m0.uordblks - m0.hblkhd;
    CHECK(rc == 0 && b.n == 10 && grew < (8u << 20),
          "a million blank lines: skipped, the good lines after them read, in bounded memory",
          "rc %d, %d examples, %zu bytes more", rc, b.n, grew);
    reader_close(r);
    batch_free(&b);
}

static void test_exactly_once(void)
{
    struct schema s;
    struct ss_err e;
    criteo_schema(&s);
    char p[512];
    path_of(p, sizeof p, "many");
    mkdir(p, 0755);
    int64_t sizes[3] = {7000, 5000, 9000};
    int bad_every = 1000;
    write_criteo_file("many/f0.tsv", sizes[0], bad_every);
    write_criteo_file("many/f1.tsv", sizes[1], bad_every);
    write_criteo_file("many/f2.tsv", sizes[2], bad_every);
    write_file("many/.hidden.tsv", "junk\n", 5);
    write_file("many/skip.bin", "junk\n", 5);
    int64_t total = 0;
    for (int f = 0; f < 3; f++)
        total += sizes[f] - sizes[f] / bad_every;

    struct reader *r;
    int rc = reader_open(&r, p, &s, 0, 0, &e);
    CHECK(rc == 0, "reader opens a directory", "%s", e.msg);
    if (rc)
        return;
    uint64_t *all = malloc((size_t)total * 8 + 8);
    int failed = 0;
    int64_t n = pull_threaded(r, 4, all, total, &failed);
    /* expected ids, in sorted order: file f, lines not bad */
    int ok = n == total && !failed;
    int64_t at = 0;
    for (int f = 0; f < 3 && ok; f++)
        for (int64_t i = 0; i < sizes[f] && ok; i++)
            if (i % bad_every != bad_every - 1)
                ok &= all[at++] == ((uint64_t)f << 40 | (uint64_t)i);
    struct reader_stats st;
    reader_stats(r, &st);
    CHECK(ok && st.examples == total && st.bad_lines == 21 && st.files_done == 3,
          "4 threads get every example exactly once", "n %lld of %lld, bad %lld, files %lld",
          (long long)n, (long long)total, (long long)st.bad_lines, (long long)st.files_done);
    reader_close(r);

    /* max_examples with the lines parsed outside the lock: exactly the first
     * max good examples, whoever parses a bad line (one in 7 here) */
    write_criteo_file("bad7.tsv", 20000, 7);
    path_of(p, sizeof p, "bad7.tsv");
    for (int round = 0; round < 5; round++) {
        int64_t max = 1000 + 2311 * round;
        rc = reader_open(&r, p, &s, max, 0, &e);
        n = pull_threaded(r, 4, all, total, &failed);
        ok = n == max && !failed;
        at = 0;
        for (int64_t i = 0; ok && at < max; i++)
            if (i % 7 != 6)
                ok &= all[at++] == (uint64_t)i;
        reader_stats(r, &st);
        CHECK(rc == 0 && ok && st.examples == max && st.bad_lines == (max - 1) / 6,
              "4 threads under max_examples get exactly its first good examples",
              "max %lld: n %lld, bad %lld", (long long)max, (long long)n,
              (long long)st.bad_lines);
        reader_close(r);
    }
    free(all);
}

/* count readers of path, shares 0..count-1 split `split`, drained one
 * after the other: their example ids sorted into all (up to cap), the
 * split taken, the bad lines, and whether each share's examples came from
 * files of its own (no file seen by two shares). */
static int64_t drain_shares(const char *path, int count, int split, int64_t max, uint64_t *all,
                            int64_t cap, int *taken, int64_t *bad, int *own_files)
{
    struct schema s;
    struct ss_err e;
    criteo_schema(&s);
    int64_t got = 0;
    int owner[64];
    for (int f = 0; f < 64; f++)
        owner[f] = -1;
    *bad = 0;
    *own_files = 1;
    for (int k = 0; k < count; k++) {
        struct reader *r;
        if (reader_open(&r, path, &s, max, 0, &e) < 0)
            return -1;
        *taken = reader_set_share(r, k, count, split, NULL);
        struct batch b;
        batch_init(&b, 100, s.n_dense, s.n_cat);
        for (;;) {
            batch_clear(&b);
            if (reader_next(r, &b, &e) < 0 || b.n == 0)
                break;
            for (int i = 0; i < b.n && got < cap; i++) {
                int f = (int)(b.example_id[i] >> 40);
                if (f < 64 && owner[f] >= 0 && owner[f] != k)
                    *own_files = 0;
                if (f < 64)
                    owner[f] = k;
                all[got++] = b.example_id[i];
            }
        }
        struct reader_stats st;
        reader_stats(r, &st);
        *bad += st.bad_lines;
        batch_free(&b);
        reader_close(r);
    }
    qsort(all, (size_t)got, 8, cmp_u64);
    return got;
}

/* Three readers over the same files with shares 0..2 of 3 split them
 * exactly once (as the trainers of a cluster job do), by lines or by
 * files; auto takes files only where they spread evenly. */
static void test_shares(void)
{
    char p[512], q[512];
    path_of(p, sizeof p, "many"); /* 7000, 5000 and 9000 lines, every 1000th bad */
    int64_t want = 7000 + 5000 + 9000 - 21, bad;
    uint64_t *all = malloc((size_t)want * 8 + 8);
    static const char *const names[] = {"auto", "lines", "files"};
    for (int split = SPLIT_LINES; split <= SPLIT_FILES; split++) {
        int taken = -1, own;
        int64_t got = drain_shares(p, 3, split, 0, all, want, &taken, &bad, &own);
        int ok = got == want && bad == 21 && taken == split && own == (split == SPLIT_FILES);
        for (int64_t i = 1; ok && i < got; i++)
            ok &= all[i] != all[i - 1];
        CHECK(ok, split == SPLIT_FILES ? "3 shares of the same files split by files: every example "
                                         "once, each file read by one share"
                                       : "3 shares of the same files split by lines: every example once",
              "%s: got %lld of %lld, bad %lld, taken %s, own files %d", names[split],
              (long long)got, (long long)want, (long long)bad, names[taken], own);
    }
    /* auto: these sizes give the busiest share 9000 of an even 7000 lines:
     * lines; six files of one size over 3: files */
    struct schema s;
    struct ss_err e;
    criteo_schema(&s);
    struct reader *r;
    double imb = 0;
    reader_open(&r, p, &s, 0, 0, &e);
    int taken = reader_set_share(r, 0, 3, SPLIT_AUTO, &imb);
    reader_close(r);
    path_of(q, sizeof q, "even");
    mkdir(q, 0755);
    char rel[64];
    for (int f = 0; f < 6; f++) {
        snprintf(rel, sizeof rel, "even/f%d.tsv", f);
        write_criteo_file(rel, 500, 0);
    }
    double imb2 = 0;
    reader_open(&r, q, &s, 0, 0, &e);
    int taken2 = reader_set_share(r, 1, 3, SPLIT_AUTO, &imb2);
    reader_close(r);
    CHECK(taken == SPLIT_LINES && imb > 1.2 && imb < 1.4 && taken2 == SPLIT_FILES &&
              imb2 > 0.99 && imb2 < 1.01,
          "auto splits by files only where they spread evenly", "%d at %.3f, %d at %.3f", taken,
          imb, taken2, imb2);
    /* max_examples split between the shares of files: exactly it in all */
    for (int64_t max = 2; max <= 1000; max += 998) {
        int own;
        int64_t got = drain_shares(q, 3, SPLIT_FILES, max, all, want, &taken, &bad, &own);
        CHECK(got == max && own, "split by files, max_examples caps the examples of all shares together",
              "max %lld: got %lld", (long long)max, (long long)got);
    }
    free(all);
}

static void test_dir_and_glob(void)
{
    struct schema s;
    struct ss_err e;
    criteo_schema(&s);
    char p[512], line[1024];
    path_of(p, sizeof p, "dg");
    mkdir(p, 0755);
    char data[8192];
    size_t n = 0;
    for (int i = 100; i < 103; i++) {
        n += (size_t)criteo_line(data + n, i);
        data[n++] = '\n';
    }
    write_file("dg/a.tsv", data, n);
    n = 0;
    for (int i = 200; i < 202; i++) {
        n += (size_t)criteo_line(data + n, i);
        data[n++] = '\n';
    }
    write_file("dg/b.tsv", data, n);
    int k = criteo_line(line, 999);
    line[k++] = '\n';
    write_file("dg/.hidden.tsv", line, (size_t)k);
    write_file("dg/c.bin.tmp", line, (size_t)k);

    struct reader *r;
    struct batch b;
    batch_init(&b, 100, 13, 26);
    int rc = reader_open(&r, p, &s, 0, 0, &e);
    if (!rc)
        rc = reader_next(r, &b, &e);
    int ok = !rc && b.n == 5;
    for (int i = 0; ok && i < 5; i++) {
        float want = (float)(i < 3 ? 100 + i : 200 + i - 3);
        uint64_t fid = (uint64_t)(i < 3 ? 0 : 1);
        ok &= b.dense[i * 13] == want && b.example_id[i] >> 40 == fid;
    }
    CHECK(ok, "directory: files in name order, hidden and .tmp skipped", "rc %d n %d %s", rc,
          b.n, rc ? e.msg : "");
    if (!rc)
        reader_close(r);

    path_of(p, sizeof p, "dg/b*.tsv");
    rc = reader_open(&r, p, &s, 0, 0, &e);
    if (!rc)
        rc = reader_next(r, &b, &e);
    CHECK(!rc && b.n == 2 && b.dense[0] == 200.0f, "glob input", "rc %d n %d", rc, b.n);
    if (!rc)
        reader_close(r);
    path_of(p, sizeof p, "dg/*.tsv");
    rc = reader_open(&r, p, &s, 0, 0, &e);
    if (!rc)
        rc = reader_next(r, &b, &e);
    CHECK(!rc && b.n == 5 && b.dense[0] == 100.0f, "glob is sorted", "rc %d n %d", rc, b.n);
    if (!rc)
        reader_close(r);
    path_of(p, sizeof p, "dg/*.nothing");
    rc = reader_open(&r, p, &s, 0, 0, &e);
    CHECK(rc < 0 && strstr(e.msg, "no files match"), "glob with no match refused", "%s", e.msg);
    path_of(p, sizeof p, "dg/missing.tsv");
    rc = reader_open(&r, p, &s, 0, 0, &e);
    CHECK(rc < 0 && strstr(e.msg, "missing.tsv"), "missing file refused by name", "%s", e.msg);
    batch_free(&b);
}

static int batches_equal(const struct batch *a, const struct batch *b)
{
    if (a->n != b->n || a->n_dense != b->n_dense || a->n_tables != b->n_tables)
        return 0;
    size_t T = (size_t)a->n_tables, n = (size_t)a->n;
    if (memcmp(a->label, b->label, n * 4) ||
        memcmp(a->dense, b->dense, n * (size_t)a->n_dense * 4) ||
        memcmp(a->off, b->off, (n * T + 1) * 4))
        return 0;
    return !memcmp(a->ids, b->ids, (size_t)a->off[n * T] * 8);
}

static void test_convert_and_binary(void)
{
    struct ss_config c;
    struct schema s, bs;
    struct ss_err e;
    memset(&c, 0, sizeof c);
    c.data.format = FMT_CSV;
    c.data.separator = "\t";
    c.data.header = 1;
    c.data.label_col = 0;
    c.data.dense_cols = "1-2";
    c.data.cat_cols = "3-5";
    c.data.multihot_cols = "5";
    c.data.multihot_sep = ",";
    c.data.cat_encoding = CAT_HASH;
    schema_from_config(&s, &c, NULL, &e);
    char data[16384];
    size_t n = (size_t)sprintf(data, "label\td1\td2\tc3\tc4\tc5\n");
    for (int i = 0; i < 32; i++) {
        if (i == 5 || i == 17)
            n += (size_t)sprintf(data + n, "%d\tbad\t1\ta\tb\tc\n", i % 2);
        else
            n += (size_t)sprintf(data + n, "%d\t%d.5\t%d\tu%d\t%s\t%s\n", i % 2, i, -i, i % 5,
                                 i % 3 ? "v" : "", i % 4 == 0 ? "" : i % 4 == 1 ? "x" : "x,y,z");
    }
    write_file("conv.tsv", data, n);
    char in[512], out[512];
    path_of(in, sizeof in, "conv.tsv");
    path_of(out, sizeof out, "shards");
    capture_begin();
    int rc = reader_convert(in, out, &s, 7, 10, &e);
    free(capture_end());
    CHECK(rc == 0, "convert runs", "%s", e.msg);
    int files = 0;
    for (int k = 0; k < 8; k++) {
        char f[600];
        snprintf(f, sizeof f, "%s/part-%05d.bin", out, k);
        files += access(f, F_OK) == 0;
    }
    CHECK(files == 5, "convert writes ceil(30/7) = 5 shards", "found %d", files);

    memset(&c, 0, sizeof c);
    rc = schema_from_config(&bs, &c, out, &e);
    CHECK(rc == 0 && bs.format == FMT_BINARY && bs.n_dense == 2 && bs.n_cat == 3,
          "format auto: a directory of .bin is binary, counts from the header",
          "rc %d %s fmt %d", rc, rc ? e.msg : "", bs.format);
    char g[600];
    snprintf(g, sizeof g, "%s/part-*.bin", out);
    struct schema gs;
    rc = schema_from_config(&gs, &c, g, &e);
    CHECK(rc == 0 && gs.format == FMT_BINARY, "format auto: a glob of .bin is binary", "rc %d", rc);
    snprintf(g, sizeof g, "%s/part-00001.bin", out);
    rc = schema_from_config(&gs, &c, g, &e);
    CHECK(rc == 0 && gs.format == FMT_BINARY, "format auto: a .bin file is binary", "rc %d", rc);
    rc = schema_from_config(&gs, &c, in, &e);
    CHECK(rc == 0 && gs.format == FMT_CRITEO, "format auto: text is Criteo", "rc %d", rc);

    struct reader *rt, *rb;
    struct batch bt, bb;
    int same = 1, batches = 0;
    int64_t total = 0;
    reader_open(&rt, in, &s, 0, 0, &e);
    rc = reader_open(&rb, out, &bs, 0, 0, &e);
    CHECK(rc == 0, "binary reader opens the shards", "%s", e.msg);
    if (rc)
        return;
    batch_init(&bt, 4, 2, 3);
    batch_init(&bb, 4, 2, 3);
    for (;;) {
        int r1 = reader_next(rt, &bt, &e), r2 = reader_next(rb, &bb, &e);
        if (r1 || r2) {
            same = 0;
            break;
        }
        same &= batches_equal(&bt, &bb);
        total += bb.n;
        if (bt.n == 0 || bb.n == 0)
            break;
        batches++;
    }
    CHECK(same && total == 30, "binary batches identical to text batches", "total %lld",
          (long long)total);
    struct reader_stats st;
    reader_stats(rb, &st);
    CHECK(st.examples == 30 && st.files_done == 5 && st.bad_lines == 0, "binary reader stats",
          "examples %lld files %lld", (long long)st.examples, (long long)st.files_done);
    reader_close(rt);
    reader_close(rb);

    /* binary ids: (shard << 40) | record */
    uint64_t ids[40];
    read_all_examples(out, &bs, 100, 0, ids, 40, NULL, &e);
    CHECK(ids[0] == 0 && ids[7] == (1ull << 40) && ids[29] == (4ull << 40 | 1),
          "binary example ids are shard and record", "%llx %llx", (unsigned long long)ids[7],
          (unsigned long long)ids[29]);

    /* header flags: multi-hot */
    size_t len;
    char f0[600];
    snprintf(f0, sizeof f0, "%s/part-00000.bin", out);
    char *raw = read_all(f0, &len);
    uint64_t ex;
    uint32_t flags;
    memcpy(&ex, raw + 24, 8);
    memcpy(&flags, raw + 40, 4);
    CHECK(len > 64 && !memcmp(raw, SHARD_MAGIC, 8) && ex == 7 && (flags & 1),
          "shard header: magic, examples, multi-hot flag", "ex %llu flags %u",
          (unsigned long long)ex, flags);

    /* refusals: truncated, foreign, version, shape */
    char bad[512];
    path_of(bad, sizeof bad, "badshard");
    mkdir(bad, 0755);
    write_file("badshard/t.bin", raw, len - 5);
    char tp[600];
    snprintf(tp, sizeof tp, "%s/t.bin", bad);
    struct reader *r;
    rc = reader_open(&r, tp, &bs, 0, 0, &e);
    char want[700];
    snprintf(want, sizeof want, "%s: truncated shard (expected %zu bytes, found %zu)", tp, len,
             len - 5);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, want), "truncated shard refused", "%s", e.msg);
    write_file("badshard/f.bin", "hello, this is not a shard at all, just some text here....\n"
               "more text to pass 64 bytes\n", 85);
    snprintf(tp, sizeof tp, "%s/f.bin", bad);
    rc = reader_open(&r, tp, &bs, 0, 0, &e);
    snprintf(want, sizeof want, "%s: not a shadowsync shard (bad magic)", tp);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, want), "foreign file refused", "%s", e.msg);
    rc = schema_from_config(&gs, &c, tp, &e);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, "bad magic"), "schema of a foreign .bin refused",
          "rc %d %s", rc, e.msg);
    raw[8] = 2;
    write_file("badshard/v.bin", raw, len);
    snprintf(tp, sizeof tp, "%s/v.bin", bad);
    rc = reader_open(&r, tp, &bs, 0, 0, &e);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, "unsupported shard version 2"),
          "wrong version refused", "%s", e.msg);
    struct schema wrong = bs;
    wrong.n_dense = 5;
    rc = reader_open(&r, f0, &wrong, 0, 0, &e);
    CHECK(rc == SS_EFORMAT && strstr(e.msg, "expected 5 and 3"), "shard shape mismatch refused",
          "%s", e.msg);
    free(raw);

    /* mixed directory: text and shards side by side, the schema decides */
    path_of(g, sizeof g, "mixed");
    mkdir(g, 0755);
    write_file("mixed/a.tsv", data, n);
    raw = read_all(f0, &len);
    write_file("mixed/p.bin", raw, len);
    free(raw);
    capture_begin();
    int64_t kt = read_all_examples(g, &s, 100, 0, NULL, 0, NULL, &e);
    int64_t kb = read_all_examples(g, &bs, 100, 0, NULL, 0, NULL, &e);
    free(capture_end());
    CHECK(kt == 30 && kb == 7, "mixed directory: the schema picks the files", "text %lld bin %lld",
          (long long)kt, (long long)kb);

    /* a shard without its .bin name is refused, not parsed as text */
    {
        char f0n[600], nn[512];
        snprintf(f0n, sizeof f0n, "%s/part-00000.bin", out);
        size_t ln;
        char *sh = read_all(f0n, &ln);
        write_file("noname", sh, ln);
        free(sh);
        path_of(nn, sizeof nn, "noname");
        struct reader *rn;
        struct batch bn;
        batch_init(&bn, 64, s.n_dense, s.n_cat);
        int nrc = reader_open(&rn, nn, &s, 0, 0, &e);
        if (nrc == 0) {
            nrc = reader_next(rn, &bn, &e);
            reader_close(rn);
        }
        CHECK(nrc < 0 && strstr(e.msg, "a binary shard (it starts with SSHARD) read as text"),
              "a shard without its .bin name: refused, not read as text", "rc %d: %s", nrc, e.msg);
        /* xz, bzip2 and zstd are named, not parsed */
        static const char *const packs[][2] = {{"\xFD" "7zXZ\0\0\4moremore", "xz"}, /* 14+ bytes */
                                               {"BZh91AY&SYmore", "bzip2"},
                                               {"\x28\xB5\x2F\xFDmoremoremore", "zstd"},
                                               {"BZh,1,2,3,4,5\n", NULL}};
        for (int k = 0; k < 4; k++) {
            write_file("packed", packs[k][0], 14);
            path_of(nn, sizeof nn, "packed");
            struct ss_err pe = {0};
            int prc = reader_open(&rn, nn, &s, 0, 0, &pe);
            if (prc == 0) {
                prc = reader_next(rn, &bn, &pe);
                reader_close(rn);
            }
            char want[64], name[80];
            snprintf(want, sizeof want, "%s-compressed, which is not read", packs[k][1] ? packs[k][1] : "-");
            if (packs[k][1])
                snprintf(name, sizeof name, "%s: named, not parsed", packs[k][1]);
            else
                snprintf(name, sizeof name, "text starting with BZh: not taken for bzip2");
            CHECK(packs[k][1] ? prc < 0 && strstr(pe.msg, want) : !strstr(pe.msg, "compressed"), name,
                  "rc %d: %s", prc, pe.msg);
        }
        batch_free(&bn);
    }
    /* converting again with one shard removes the stale parts */
    capture_begin();
    rc = reader_convert(in, out, &s, 0, 10, &e);
    free(capture_end());
    snprintf(g, sizeof g, "%s/part-00001.bin", out);
    int64_t k1 = read_all_examples(out, &bs, 100, 0, NULL, 0, NULL, &e);
    CHECK(rc == 0 && access(g, F_OK) != 0 && k1 == 30, "re-convert into one shard",
          "rc %d k %lld", rc, (long long)k1);
    batch_free(&bt);
    batch_free(&bb);
}

/* gen's eval.tsv in dir (20000 lines) as one batch, read with schema s. */
static int gen_eval_batch(const char *dir, const struct schema *s, struct reader **r,
                          struct batch *b, struct ss_err *e)
{
    char p[600];
    snprintf(p, sizeof p, "%s/eval.tsv", dir);
    batch_init(b, 20000, 13, 26);
    int rc = reader_open(r, p, s, 0, 3, e);
    return rc ? rc : reader_next(*r, b, e);
}

#define GEN_TRAIN_FNV 0x4c195c454fbf7279ull /* test_gen's train.tsv, as at 97ffdf7 (before bags) */

static void test_gen(void)
{
    int64_t card[26];
    for (int t = 0; t < 26; t++)
        card[t] = t % 4 == 0 ? 3 + t : t % 4 == 1 ? 1000 : t % 4 == 2 ? 100000 : 10000000;
    char d1[512], d2[512], d3[512];
    path_of(d1, sizeof d1, "gen1");
    path_of(d2, sizeof d2, "gen2");
    path_of(d3, sizeof d3, "gen3");
    struct gen_opts o = {.out_dir = d1, .examples = 20000, .eval_examples = 20000, .seed = 7,
                         .n_dense = 13, .n_tables = 26, .cardinality = card};
    double ne1 = 0, ne2 = 0, ne3 = 0;
    struct ss_err e;
    int rc = gen_write(&o, &ne1, &e);
    CHECK(rc == 0, "gen writes", "%s", e.msg);
    o.out_dir = d2;
    gen_write(&o, &ne2, &e);
    o.out_dir = d3;
    o.seed = 8;
    gen_write(&o, &ne3, &e);
    const char *names[] = {"train.tsv", "eval.tsv", "train.prob", "eval.prob"};
    int same = ne1 == ne2, differ = 0;
    for (int k = 0; k < 4; k++) {
        char a[600], b[600], c3[600];
        size_t na = 0, nb = 0, nc = 0;
        snprintf(a, sizeof a, "%s/%s", d1, names[k]);
        snprintf(b, sizeof b, "%s/%s", d2, names[k]);
        snprintf(c3, sizeof c3, "%s/%s", d3, names[k]);
        char *pa = read_all(a, &na), *pb = read_all(b, &nb), *pc = read_all(c3, &nc);
        same &= pa && pb && na == nb && !memcmp(pa, pb, na);
        differ |= !pc || na != nc || memcmp(pa, pc, na < nc ? na : nc);
        free(pa);
        free(pb);
        free(pc);
    }
    CHECK(same, "gen: same seed, same bytes", "ne %g %g", ne1, ne2);
    {   /* one-hot bytes as written before bags came: a change shows here */
        char a[600];
        size_t n = 0;
        snprintf(a, sizeof a, "%s/train.tsv", d1);
        char *t = read_all(a, &n);
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; t && i < n; i++)
            h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
        free(t);
        CHECK(h == GEN_TRAIN_FNV, "gen: the same one-hot bytes as before bags",
              "train.tsv FNV-1a %016llx, %zu bytes", (unsigned long long)h, n);
    }
    CHECK(differ, "gen: another seed, other data", "-");
    char p[600];
    int lines_ok = 1;
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/%s", d1, names[k]);
        lines_ok &= count_lines(p) == (k % 2 ? o.eval_examples : o.examples);
    }
    CHECK(lines_ok, "gen: prob files have a line per example", "-");

    struct schema s;
    criteo_schema(&s);
    struct reader *r;
    struct batch b;
    rc = gen_eval_batch(d1, &s, &r, &b, &e);
    struct reader_stats st;
    if (!rc)
        reader_stats(r, &st);
    CHECK(!rc && b.n == 20000 && st.bad_lines == 0, "gen: every line parses as Criteo",
          "rc %d n %d", rc, b.n);
    double ctr = 0, loss = 0, missing_d = 0, missing_c = 0;
    size_t plen;
    snprintf(p, sizeof p, "%s/eval.prob", d1);
    char *probs = read_all(p, &plen), *q = probs;
    for (int i = 0; i < b.n; i++) {
        double pr = strtod(q, &q), y = b.label[i];
        pr = pr < 1e-7 ? 1e-7 : pr > 1 - 1e-7 ? 1 - 1e-7 : pr;
        loss += y > 0.5 ? -log(pr) : -log(1 - pr);
        ctr += y;
        for (int j = 0; j < 13; j++)
            missing_d += b.dense[i * 13 + j] == 0;
        for (int t = 0; t < 26; t++)
            missing_c += b.ids[i * 26 + t] == 0;
    }
    free(probs);
    ctr /= b.n;
    double h = -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr));
    double ne_file = loss / b.n / h;
    CHECK(ctr > 0.18 && ctr < 0.32, "gen: CTR near 0.25", "ctr %.4f", ctr);
    CHECK(ne1 > 0 && ne1 < 1 && ne1 > 0.7 && ne1 < 0.9, "gen: Bayes NE in (0.7, 0.9)", "ne %.4f",
          ne1);
    CHECK(fabs(ne_file - ne1) < 2e-3, "gen: Bayes NE matches the prob file", "%.5f vs %.5f",
          ne_file, ne1);
    CHECK(missing_d > 0.05 * b.n * 13 && missing_c > 0 && missing_c < 0.1 * b.n * 26,
          "gen: missing dense and categorical values", "dense %.0f cat %.0f", missing_d,
          missing_c);
    /* power law: the most common token of a big feature is frequent */
    int top = 0;
    for (int i = 0; i < b.n; i++)
        top += b.ids[i * 26 + 3] == b.ids[3];
    CHECK(top > 1, "gen: popular ids repeat", "first token seen %d times", top);
    batch_free(&b);
    reader_close(r);
}

/* gen --bag-size: the multi-hot features hold bags of 1 to 2K-1 ids, K on
 * average, that the schema's multi-hot columns read; the others stay
 * single ids, and the Bayes NE is still known and near its target. */
static void test_gen_multihot(void)
{
    int64_t card[26];
    int mh[26] = {0};
    for (int t = 0; t < 26; t++)
        card[t] = 1000 + 100 * t;
    mh[2] = mh[5] = mh[25] = 1;
    char d[512];
    path_of(d, sizeof d, "genmh");
    struct gen_opts o = {.out_dir = d, .examples = 100, .eval_examples = 20000, .seed = 5,
                         .n_dense = 13, .n_tables = 26, .cardinality = card, .multihot = mh,
                         .bag_size = 4, .multihot_sep = ';'};
    double ne = 0;
    struct ss_err e;
    int rc = gen_write(&o, &ne, &e);
    CHECK(rc == 0, "gen: multi-hot data written", "%s", e.msg);
    CHECK(ne > 0.7 && ne < 0.9, "gen: multi-hot Bayes NE in (0.7, 0.9)", "ne %.4f", ne);
    struct schema s;
    criteo_schema(&s);
    s.multihot_sep = ';';
    s.is_multihot[2] = s.is_multihot[5] = s.is_multihot[25] = 1;
    struct reader *r;
    struct batch b;
    rc = gen_eval_batch(d, &s, &r, &b, &e);
    CHECK(!rc && b.n == 20000, "gen: multi-hot lines parse", "rc %d n %d: %s", rc, b.n, e.msg);
    int64_t ids[26] = {0}, over = 0;
    for (int i = 0; i < b.n; i++)
        for (int t = 0; t < 26; t++) {
            int len = b.off[i * 26 + t + 1] - b.off[i * 26 + t];
            ids[t] += len;
            over += len < 1 || len > (mh[t] ? 7 : 1);
        }
    CHECK(over == 0, "gen: bags of 1 to 2K-1 ids, single ids elsewhere", "%lld bad",
          (long long)over);
    double mean = (double)ids[5] / b.n;
    CHECK(mean > 3.5 && mean < 4.1 && ids[0] == b.n, "gen: a bag holds K ids on average",
          "mean %.3f (some bags are empty)", mean);
    reader_close(r);
    o.multihot_sep = '1';
    rc = gen_write(&o, &ne, &e);
    CHECK(rc < 0 && strstr(e.msg, "cannot separate"), "gen: a hex digit as the bag separator "
          "is refused", "rc %d: %s", rc, e.msg);
    o.multihot_sep = ',';
    o.bag_size = 0;
    rc = gen_write(&o, &ne, &e);
    CHECK(rc < 0 && strstr(e.msg, "bag size of 0"), "gen: a bag size of 0 is refused", "%s",
          e.msg);
    batch_free(&b);
}

/* Reads every remaining batch of r: example ids, labels; returns the count. */
static int64_t drain(struct reader *r, struct batch *b, uint64_t *ids, float *labels, int64_t cap)
{
    struct ss_err e;
    int64_t n = 0;
    while (reader_next(r, b, &e) == 0 && b->n > 0)
        for (int i = 0; i < b->n && n < cap; i++, n++)
            ids[n] = b->example_id[i], labels[n] = b->label[i];
    return n;
}

/* A position taken after k batches: a new reader seeking to it hands out
 * exactly what the first one would have, for text (with bad lines) and
 * binary shards; a position over other files is refused. */
/* rel (under root) gzipped into rel_gz; with keep < 1, only that share of
 * the compressed bytes (a truncated download), or with flip, some bytes in
 * the middle of the stream changed. */
static void gzip_file(const char *rel, const char *rel_gz, double keep, int flip)
{
    char p[512];
    path_of(p, sizeof p, rel);
    size_t n = 0;
    char *data = read_all(p, &n);
    size_t cap = compressBound((uLong)n) + 64;
    unsigned char *z = malloc(cap);
    z_stream zs = {0};
    deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY); /* 16: gzip */
    zs.next_in = (unsigned char *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = z;
    zs.avail_out = (uInt)cap;
    deflate(&zs, Z_FINISH);
    size_t zn = zs.total_out;
    deflateEnd(&zs);
    if (keep < 1)
        zn = (size_t)(zn * keep);
    for (int i = 0; flip && i < 64; i++)
        z[zn / 2 + (size_t)i] ^= 0x5a;
    write_file(rel_gz, (char *)z, zn);
    free(z);
    free(data);
}

/* name/a.tsv (a lines, every bad-th bad) and name/b.tsv (b lines) into
 * dir, and as shards of `shard` records into bin (nameBIN); s and bs their
 * schemas. */
static int two_files(const char *name, int a, int bad, int b, int shard, char *dir, char *bin,
                     struct schema *s, struct schema *bs, struct ss_err *e)
{
    char rel[64];
    path_of(dir, 256, name);
    snprintf(rel, sizeof rel, "%sbin", name);
    path_of(bin, 256, rel);
    mkdir(dir, 0755);
    snprintf(rel, sizeof rel, "%s/a.tsv", name);
    write_criteo_file(rel, a, bad);
    snprintf(rel, sizeof rel, "%s/b.tsv", name);
    write_criteo_file(rel, b, 0);
    criteo_schema(s);
    int rc = reader_convert(dir, bin, s, shard, 10, e);
    *bs = *s;
    bs->format = FMT_BINARY;
    return rc;
}

static void test_tell_seek(void)
{
    char dir[256], bin[256];
    struct schema s, bs;
    struct ss_err e = {0};
    int rc = two_files("pos", 1000, 37, 500, 300, dir, bin, &s, &bs, &e);
    CHECK(rc == 0, "position test data converted to shards", "%s", e.msg);
    char gz[256];
    path_of(gz, sizeof gz, "posgz");
    mkdir(gz, 0755);
    gzip_file("pos/a.tsv", "posgz/a.tsv.gz", 1, 0);
    gzip_file("pos/b.tsv", "posgz/b.tsv.gz", 1, 0);
    enum { CAP = 2000 };
    uint64_t *ia = malloc(CAP * 8), *ib = malloc(CAP * 8);
    float *la = malloc(CAP * 4), *lb = malloc(CAP * 4);
    static const char *const kinds[] = {
        "text: a reader seeking to a position hands out the same rest",
        "binary: a reader seeking to a position hands out the same rest",
        "gzip: a reader seeking to a position hands out the same rest"};
    for (int kind = 0; kind < 3; kind++) {
        const struct schema *sc = kind == 1 ? &bs : &s;
        const char *path = kind == 1 ? bin : kind ? gz : dir;
        for (int k = 0; k < 30; k += 7) {
            struct reader *a, *b2;
            struct batch b;
            batch_init(&b, 64, sc->n_dense, sc->n_cat);
            reader_open(&a, path, sc, 0, 0, &e);
            for (int i = 0; i < k; i++)
                reader_next(a, &b, &e);
            struct reader_pos pos;
            reader_tell(a, &pos);
            int64_t na = drain(a, &b, ia, la, CAP);
            reader_open(&b2, path, sc, 0, 0, &e);
            rc = reader_seek(b2, &pos, &e);
            int64_t nb = drain(b2, &b, ib, lb, CAP);
            struct reader_stats sa, sb;
            reader_stats(a, &sa);
            reader_stats(b2, &sb);
            CHECK(rc == 0 && na == nb && !memcmp(ia, ib, na * 8) && !memcmp(la, lb, na * 4) &&
                      sa.examples == sb.examples && sa.bad_lines == sb.bad_lines,
                  kinds[kind],
                  "after %d batches: rc %d, %lld vs %lld examples, bad %lld vs %lld: %s", k, rc,
                  (long long)na, (long long)nb, (long long)sa.bad_lines,
                  (long long)sb.bad_lines, e.msg);
            reader_close(a);
            reader_close(b2);
            batch_free(&b);
        }
    }
    struct reader *a, *other;
    struct reader_pos pos;
    reader_open(&a, dir, &s, 0, 0, &e);
    reader_tell(a, &pos);
    char one[256];
    path_of(one, sizeof one, "pos/b.tsv");
    reader_open(&other, one, &s, 0, 0, &e);
    rc = reader_seek(other, &pos, &e);
    CHECK(rc < 0 && strstr(e.msg, "other files"), "a position over other files is refused", "%s",
          e.msg);
    /* a position of a share split by lines is refused by one split by files, and back */
    for (int k = 0; k < 2; k++) {
        struct reader *x, *y;
        reader_open(&x, dir, &s, 0, 0, &e);
        reader_set_share(x, 0, 2, k ? SPLIT_FILES : SPLIT_LINES, NULL);
        reader_tell(x, &pos);
        reader_open(&y, dir, &s, 0, 0, &e);
        reader_set_share(y, 0, 2, k ? SPLIT_LINES : SPLIT_FILES, NULL);
        rc = reader_seek(y, &pos, &e);
        CHECK(rc < 0 && strstr(e.msg, k ? "--set data.split=files" : "--set data.split=lines"),
              "a position taken under the other data.split is refused, naming the key", "%s",
              e.msg);
        reader_close(x);
        reader_close(y);
    }
    reader_close(a);
    reader_close(other);
    free(ia);
    free(ib);
    free(la);
    free(lb);
}

/* A position applies only to its file unchanged: one grown since, or
 * edited so that no line starts at its place (same size), is refused,
 * naming the file; a position of the older layout (no size) still
 * resumes, and its gzip text is checked for the line start too. */
static void test_pos_changed_data(void)
{
    char dir[256], bin[256], a_path[300], posf[300];
    struct schema s, bs;
    struct ss_err e = {0};
    int rc = two_files("posch", 600, 0, 100, 300, dir, bin, &s, &bs, &e);
    snprintf(a_path, sizeof a_path, "%s/a.tsv", dir);
    path_of(posf, sizeof posf, "posch.pos");
    size_t n;
    char *orig = read_all(a_path, &n);
    struct reader *r;
    struct batch b;
    batch_init(&b, 64, s.n_dense, s.n_cat);
    reader_open(&r, dir, &s, 0, 0, &e);
    for (int i = 0; i < 3; i++)
        reader_next(r, &b, &e);
    struct reader_pos pos;
    reader_tell(r, &pos);
    rc |= reader_save_pos(r, posf, &e);
    reader_close(r);
    CHECK(rc == 0 && pos.cur == 0 && pos.is_open && pos.cur_bytes == (int64_t)n &&
              pos.offset > 1 && (size_t)pos.offset < n && orig[pos.offset - 1] == '\n',
          "a text position holds its file's size and a line's start", "rc %d, cur %d, bytes "
          "%lld of %zu, offset %lld: %s", rc, pos.cur, (long long)pos.cur_bytes, n,
          (long long)pos.offset, e.msg);
    /* grown since */
    char *more = malloc(n + 64);
    memcpy(more, orig, n);
    memcpy(more + n, orig, 60);
    write_file("posch/a.tsv", more, n + 60);
    reader_open(&r, dir, &s, 0, 0, &e);
    rc = reader_load_pos(r, posf, &e);
    reader_close(r);
    CHECK(rc < 0 && strstr(e.msg, "a.tsv: is ") && strstr(e.msg, "has changed since") &&
              strstr(e.msg, "train afresh into another checkpoint.dir"),
          "a position in a text file grown since is refused, naming the file and both sizes",
          "rc %d: %s", rc, e.msg);
    /* the same size, the line moved by one byte */
    memcpy(more, orig, n);
    more[pos.offset - 1] = more[pos.offset - 2];
    more[pos.offset - 2] = '\n';
    write_file("posch/a.tsv", more, n);
    reader_open(&r, dir, &s, 0, 0, &e);
    rc = reader_load_pos(r, posf, &e);
    reader_close(r);
    CHECK(rc < 0 && strstr(e.msg, "no line starts at byte") && strstr(e.msg, "a.tsv"),
          "a position in a text file of the same size edited since is refused (no line starts "
          "there)", "rc %d: %s", rc, e.msg);
    /* an older position (no size): the line start is still checked, in gzip text too */
    char gzdir[300];
    path_of(gzdir, sizeof gzdir, "poschgz");
    mkdir(gzdir, 0755);
    gzip_file("posch/a.tsv", "poschgz/a.tsv.gz", 1, 0);
    struct reader_pos old = pos;
    old.cur_bytes = -1;
    old.files_hash = 0;
    reader_open(&r, gzdir, &s, 0, 0, &e);
    reader_tell(r, &pos); /* (only for the list's hash) */
    old.files_hash = pos.files_hash;
    rc = reader_seek(r, &old, &e);
    reader_close(r);
    CHECK(rc < 0 && strstr(e.msg, "no line starts at byte") && strstr(e.msg, "uncompressed"),
          "a position of the older layout over gzip text edited since is refused", "rc %d: %s",
          rc, e.msg);
    write_file("posch/a.tsv", orig, n);
    gzip_file("posch/a.tsv", "poschgz/a.tsv.gz", 1, 0);
    reader_open(&r, gzdir, &s, 0, 0, &e);
    rc = reader_seek(r, &old, &e);
    int64_t got = 0;
    while (rc == 0 && reader_next(r, &b, &e) == 0 && b.n > 0)
        got += b.n;
    reader_close(r);
    CHECK(rc == 0 && got == 600 - 192, "a position of the older layout over the same gzip text "
          "resumes the rest", "rc %d, %lld examples: %s", rc, (long long)got, e.msg);
    /* a file of the older layout (its bytes end before cur_bytes) loads */
    size_t pn;
    char *raw = read_all(posf, &pn);
    write_file("posch.pos", raw, offsetof(struct reader_pos, cur_bytes));
    reader_open(&r, dir, &s, 0, 0, &e);
    rc = reader_load_pos(r, posf, &e);
    got = 0;
    while (rc == 0 && reader_next(r, &b, &e) == 0 && b.n > 0)
        got += b.n;
    reader_close(r);
    CHECK(rc == 0 && pn == sizeof(struct reader_pos) && got == 700 - 192, /* (b.tsv too) */
          "a position file of the older layout loads and resumes the rest",
          "rc %d, %zu bytes, %lld examples: %s", rc, pn, (long long)got, e.msg);
    /* a shard of another size */
    reader_open(&r, bin, &bs, 0, 0, &e);
    reader_next(r, &b, &e);
    reader_tell(r, &pos);
    reader_close(r);
    pos.cur_bytes += 8;
    reader_open(&r, bin, &bs, 0, 0, &e);
    rc = reader_seek(r, &pos, &e);
    reader_close(r);
    CHECK(rc < 0 && strstr(e.msg, "has changed since"),
          "a position in a shard of another size than it had is refused", "rc %d: %s", rc,
          e.msg);
    batch_free(&b);
    free(raw);
    free(more);
    free(orig);
}

/* data.epochs: the files read that many times in the same order (text and
 * shards), shares splitting every pass exactly once, max_examples over all
 * passes, positions in a later pass resumed exactly, refused by a run of
 * fewer passes; a position written before epochs loads as the first pass. */
static void test_epochs(void)
{
    char dir[256], bin[256], posf[300];
    struct schema s, bs;
    struct ss_err e = {0};
    int rc = two_files("ep", 300, 41, 200, 128, dir, bin, &s, &bs, &e);
    enum { ONE = 500 - 7, CAP = 4 * ONE };
    uint64_t *ia = malloc(CAP * 8), *ib = malloc(CAP * 8);
    float *la = malloc(CAP * 4), *lb = malloc(CAP * 4);
    for (int kind = 0; kind < 2; kind++) {
        const struct schema *sc = kind ? &bs : &s;
        const char *path = kind ? bin : dir;
        struct reader *r;
        struct batch b;
        batch_init(&b, 64, sc->n_dense, sc->n_cat);
        rc = reader_open(&r, path, sc, 0, 0, &e);
        reader_set_epochs(r, 3);
        int64_t n = 0;
        double mid = -1;
        while (reader_next(r, &b, &e) == 0 && b.n > 0)
            for (int i = 0; i < b.n && n < CAP; i++, n++) {
                ia[n] = b.example_id[i], la[n] = b.label[i];
                if (n == ONE)
                    mid = reader_fraction(r);
            }
        int same = n == 3 * ONE;
        for (int64_t i = ONE; same && i < n; i++)
            same = ia[i] == ia[i % ONE] && la[i] == la[i % ONE];
        struct reader_stats st;
        reader_stats(r, &st);
        CHECK(rc == 0 && same && st.examples == 3 * ONE && reader_fraction(r) == 1 &&
                  mid > 0.3 && mid < 0.45,
              kind ? "epochs 3 over shards: the records 3 times in the same order, progress over "
                     "all passes"
                   : "epochs 3 over text: the lines 3 times in the same order (bad lines each "
                     "time skipped), progress over all passes",
              "rc %d: %lld examples, same %d, fraction %g then %g: %s", rc, (long long)n, same,
              mid, reader_fraction(r), e.msg);
        reader_close(r);
        /* a position in the second pass: the same rest; fewer passes refuse it */
        struct reader *a, *c;
        reader_open(&a, path, sc, 0, 0, &e);
        reader_set_epochs(a, 3);
        for (int i = 0; i < 10; i++) /* 640 examples: into the second pass */
            reader_next(a, &b, &e);
        struct reader_pos pos;
        reader_tell(a, &pos);
        int64_t na = drain(a, &b, ia, la, CAP);
        reader_open(&c, path, sc, 0, 0, &e);
        reader_set_epochs(c, 3);
        rc = reader_seek(c, &pos, &e);
        int64_t nb = drain(c, &b, ib, lb, CAP);
        CHECK(rc == 0 && pos.epoch == 1 && na == 3 * ONE - 640 && na == nb &&
                  !memcmp(ia, ib, (size_t)na * 8) && !memcmp(la, lb, (size_t)na * 4),
              kind ? "a position in the second pass over shards resumes the same rest"
                   : "a position in the second pass over text resumes the same rest",
              "rc %d, pass %lld: %lld vs %lld: %s", rc, (long long)pos.epoch, (long long)na,
              (long long)nb, e.msg);
        reader_close(a);
        reader_close(c);
        reader_open(&c, path, sc, 0, 0, &e);
        reader_set_epochs(c, 1);
        rc = reader_seek(c, &pos, &e);
        CHECK(rc < 0 && strstr(e.msg, "pass 2") && strstr(e.msg, "data.epochs above 1"),
              "a position in a pass this run does not make is refused, naming data.epochs", "%s",
              e.msg);
        reader_close(c);
        batch_free(&b);
    }
    /* 2 shares split by lines over 2 passes: every example twice in all */
    int64_t got = 0;
    for (int k = 0; k < 2; k++) {
        struct reader *r;
        struct batch b;
        batch_init(&b, 50, s.n_dense, s.n_cat);
        reader_open(&r, dir, &s, 0, 0, &e);
        reader_set_epochs(r, 2);
        reader_set_share(r, k, 2, SPLIT_LINES, NULL);
        got += drain(r, &b, ia + got, la, CAP - got);
        reader_close(r);
        batch_free(&b);
    }
    qsort(ia, (size_t)got, 8, cmp_u64);
    int twice = got == 2 * ONE;
    for (int64_t i = 0; twice && i < got; i += 2)
        twice = ia[i] == ia[i + 1] && (i + 2 >= got || ia[i + 2] != ia[i]);
    CHECK(twice, "2 shares by lines over 2 passes: every example exactly twice", "%lld examples",
          (long long)got);
    /* max_examples counts every pass */
    struct reader *r;
    struct batch b;
    batch_init(&b, 64, s.n_dense, s.n_cat);
    /* a share of no files (3 readers, 2 files) ends at once, still in its first pass */
    reader_open(&r, dir, &s, 0, 0, &e);
    reader_set_epochs(r, 3);
    reader_set_share(r, 2, 3, SPLIT_FILES, NULL);
    int64_t none = drain(r, &b, ia, la, CAP);
    struct reader_pos end;
    reader_tell(r, &end);
    CHECK(none == 0 && end.epoch == 0 && reader_fraction(r) == 1,
          "a share of no files over 3 passes: no example, its position in the first pass",
          "%lld examples, pass %lld", (long long)none, (long long)end.epoch);
    reader_close(r);
    /* the end of a run of one pass, resumed with 2: the second pass, done% from a half */
    reader_open(&r, dir, &s, 0, 0, &e);
    drain(r, &b, ia, la, CAP);
    reader_tell(r, &end);
    reader_close(r);
    reader_open(&r, dir, &s, 0, 0, &e);
    reader_set_epochs(r, 2);
    rc = reader_seek(r, &end, &e);
    double at = reader_fraction(r);
    int64_t more = drain(r, &b, ia, la, CAP);
    CHECK(rc == 0 && at > 0.45 && at < 0.55 && more == ONE && reader_fraction(r) == 1,
          "one pass's end resumed with data.epochs = 2: the second pass, done% from a half",
          "rc %d, fraction %g, %lld examples: %s", rc, at, (long long)more, e.msg);
    reader_close(r);
    reader_open(&r, dir, &s, 700, 0, &e);
    reader_set_epochs(r, 3);
    int64_t n = drain(r, &b, ia, la, CAP);
    CHECK(n == 700, "max_examples caps the passes together", "%lld", (long long)n);
    reader_close(r);
    /* a position file written before data.epochs (one field shorter): the first pass */
    reader_open(&r, dir, &s, 0, 0, &e);
    reader_set_epochs(r, 2);
    reader_next(r, &b, &e);
    struct reader_pos pos;
    reader_tell(r, &pos);
    int64_t na = drain(r, &b, ia, la, CAP);
    reader_close(r);
    path_of(posf, sizeof posf, "ep-old.pos");
    FILE *f = fopen(posf, "wb");
    fwrite(&pos, offsetof(struct reader_pos, epoch), 1, f);
    fclose(f);
    reader_open(&r, dir, &s, 0, 0, &e);
    reader_set_epochs(r, 2);
    rc = reader_load_pos(r, posf, &e);
    int64_t nb = drain(r, &b, ib, lb, CAP);
    CHECK(rc == 0 && na == 2 * ONE - 64 && na == nb && !memcmp(ia, ib, (size_t)na * 8),
          "a position written before data.epochs loads as the first pass", "rc %d: %lld vs %lld: %s",
          rc, (long long)na, (long long)nb, e.msg);
    reader_close(r);
    batch_free(&b);
    free(ia);
    free(ib);
    free(la);
    free(lb);
}

/* gzip input: the same examples, ids, bad lines and reports as the text
 * it holds; exactly once under threads over a folder of both kinds;
 * progress in compressed bytes; a truncated or corrupt file an error
 * naming it. */
static void test_gzip(void)
{
    struct schema s;
    struct ss_err e = {0};
    criteo_schema(&s);
    char p[512], pz[512];
    path_of(p, sizeof p, "gz");
    mkdir(p, 0755);
    write_criteo_file("gz/a.tsv", 3000, 100);
    gzip_file("gz/a.tsv", "a.tsv.gz", 1, 0);
    path_of(p, sizeof p, "gz/a.tsv");
    path_of(pz, sizeof pz, "a.tsv.gz");
    enum { CAP = 3100 };
    uint64_t *ia = malloc(CAP * 8), *ib = malloc(CAP * 8);
    struct reader_stats sa, sb;
    int64_t na = read_all_examples(p, &s, 128, 0, ia, CAP, &sa, &e);
    capture_begin();
    int64_t nb = read_all_examples(pz, &s, 128, 0, ib, CAP, &sb, &e);
    char *err = capture_end();
    char want[600];
    snprintf(want, sizeof want, "%s:100: expected 40 fields, found 1", pz);
    CHECK(na == 2970 && nb == na && !memcmp(ia, ib, (size_t)na * 8) && sb.bad_lines == 30 &&
              sb.bad_lines == sa.bad_lines && err && strstr(err, want),
          "gzip: the same examples and ids as its text, bad lines counted and reported as FILE:LINE",
          "%lld vs %lld examples, bad %lld vs %lld: %s", (long long)nb, (long long)na,
          (long long)sb.bad_lines, (long long)sa.bad_lines, e.msg);
    free(err);

    /* a UTF-8 byte order mark before the first line: not part of its label */
    size_t tl;
    char *tb = read_all(p, &tl), *bom = malloc(tl + 3);
    memcpy(bom, "\xEF\xBB\xBF", 3);
    memcpy(bom + 3, tb, tl);
    write_file("bom.tsv", bom, tl + 3);
    free(tb), free(bom);
    char pb[512];
    path_of(pb, sizeof pb, "bom.tsv");
    struct reader_stats sm;
    int64_t nm = read_all_examples(pb, &s, 128, 0, NULL, 0, &sm, &e);
    CHECK(nm == 2970 && sm.bad_lines == 30, "a UTF-8 byte order mark: the first line read as without it",
          "%lld examples, %lld bad", (long long)nm, (long long)sm.bad_lines);

    /* progress: compressed bytes of the file's */
    struct reader *r;
    struct batch b;
    batch_init(&b, 1500, 13, 26);
    reader_open(&r, pz, &s, 0, 0, &e);
    reader_next(r, &b, &e);
    double mid = reader_fraction(r);
    while (b.n > 0)
        reader_next(r, &b, &e);
    CHECK(mid > 0 && mid <= 1 && reader_fraction(r) == 1, "gzip: the fraction done is of the compressed bytes, 1 at the end",
          "%.3f midway", mid);
    reader_close(r);

    /* a folder of gzip and plain files, 4 threads: every example once */
    gzip_file("gz/a.tsv", "gz/b.tsv.gz", 1, 0);
    path_of(p, sizeof p, "gz");
    free(ia);
    ia = malloc(2 * CAP * 8);
    reader_open(&r, p, &s, 0, 0, &e);
    int failed = 0;
    int64_t n = pull_threaded(r, 4, ia, 2 * CAP, &failed);
    int ok = n == 2 * 2970 && !failed;
    for (int64_t i = 0; ok && i < n; i++) /* file 0 a.tsv, 1 b.tsv.gz; every 100th line bad */
        ok &= ia[i] == ((uint64_t)(i / 2970) << 40 | (uint64_t)(i % 2970 + i % 2970 / 99));
    CHECK(ok, "gzip: 4 threads over a folder of gzip and plain files get every example once",
          "%lld of %d, failed %d", (long long)n, 2 * 2970, failed);
    reader_close(r);

    /* truncated, corrupt */
    for (int k = 0; k < 2; k++) {
        gzip_file("gz/a.tsv", "bad.tsv.gz", k ? 1 : 0.6, k);
        path_of(pz, sizeof pz, "bad.tsv.gz");
        reader_open(&r, pz, &s, 0, 0, &e);
        int rc;
        while ((rc = reader_next(r, &b, &e)) == 0 && b.n > 0)
            ;
        CHECK(rc < 0 && strstr(e.msg, pz) && (k || strstr(e.msg, "truncated")),
              k ? "gzip: a corrupt file is an error naming it" : "gzip: a truncated file is an error naming it, not an end",
              "rc %d: %s", rc, e.msg);
        reader_close(r);
    }
    /* a bad CRC at the stream's end (the text whole): zlib drops what the
     * failing call inflated, at most GZ_STEP, so the examples before it are
     * read (before, one call took up to 2 MiB: none of this file's) */
    gzip_file("gz/a.tsv", "crc.tsv.gz", 1, 0);
    path_of(pz, sizeof pz, "crc.tsv.gz");
    size_t zl;
    char *zb = read_all(pz, &zl);
    memset(zb + zl - 8, 0, 4);
    write_file("crc.tsv.gz", zb, zl);
    free(zb);
    reader_open(&r, pz, &s, 0, 0, &e);
    int64_t before = 0;
    int zr;
    while ((zr = reader_next(r, &b, &e)) == 0 && b.n > 0)
        before += b.n;
    reader_close(r);
    CHECK(zr < 0 && strstr(e.msg, "incorrect data check") && before >= 1500 && before < 2970,
          "gzip: a bad CRC at the end: the examples inflated before it read, then the error",
          "rc %d, %lld of 2970 before it: %s", zr, (long long)before, e.msg);
    /* a conversion that fails midway (a truncated file, after shards were
     * done) leaves the directory as the last one left it: no new or .tmp
     * shard; one that reads no example fails too */
    char out[512], cut[512];
    path_of(out, sizeof out, "gzconv");
    path_of(p, sizeof p, "gz/a.tsv");
    capture_begin();
    int crc = reader_convert(p, out, &s, 1000, 10, &e); /* 3 shards */
    gzip_file("gz/a.tsv", "cut.tsv.gz", 0.6, 0);
    path_of(cut, sizeof cut, "cut.tsv.gz");
    int frc = reader_convert(cut, out, &s, 500, 10, &e);
    write_file("allbad.tsv", "x\ny\n", 4);
    path_of(pz, sizeof pz, "allbad.tsv");
    struct ss_err e2 = {0};
    int zrc = reader_convert(pz, out, &s, 500, 10, &e2);
    free(capture_end());
    struct ss_config c0;
    memset(&c0, 0, sizeof c0);
    struct schema bin;
    int64_t kept = schema_from_config(&bin, &c0, out, &e) == 0
                       ? read_all_examples(out, &bin, 128, 0, NULL, 0, NULL, &e)
                       : -1;
    int tmps = 0;
    for (int k = 0; k < 8; k++) {
        char f[600];
        snprintf(f, sizeof f, "%s/part-%05d.bin.tmp", out, k);
        tmps += access(f, F_OK) == 0;
        snprintf(f, sizeof f, "%s/part-%05d.bin", out, k);
        tmps += k >= 3 && access(f, F_OK) == 0;
    }
    CHECK(crc == 0 && frc < 0 && zrc < 0 && kept == 2970 && tmps == 0 &&
              strstr(e2.msg, "convert: no example was read from") && strstr(e2.msg, "2 bad lines"),
          "convert: a failed or empty conversion leaves the directory as it was",
          "rc %d %d %d, %lld examples kept, %d stray: %s", crc, frc, zrc, (long long)kept, tmps,
          e2.msg);
    /* a resume inside a big gzip file: its progress goes on from the place
     * (before, the compressed bytes up to it were counted twice) */
    write_criteo_file("gzbig.tsv", 60000, 0);
    gzip_file("gzbig.tsv", "gzbig.tsv.gz", 1, 0);
    path_of(pz, sizeof pz, "gzbig.tsv.gz");
    struct reader *a, *b2;
    reader_open(&a, pz, &s, 0, 0, &e);
    for (int i = 0; i < 10; i++)
        reader_next(a, &b, &e);
    struct reader_pos pos;
    reader_tell(a, &pos);
    reader_next(a, &b, &e);
    double fa = reader_fraction(a);
    reader_open(&b2, pz, &s, 0, 0, &e);
    int rc = reader_seek(b2, &pos, &e);
    reader_next(b2, &b, &e);
    double fb = reader_fraction(b2);
    CHECK(rc == 0 && fa > 0.05 && fa < 0.9 && fb > fa - 0.05 && fb < fa + 0.05,
          "gzip: a reader resumed inside a file goes on from its place in the fraction done",
          "%.3f resumed vs %.3f: %s", fb, fa, e.msg);
    reader_close(a);
    reader_close(b2);
    batch_free(&b);
    free(ia);
    free(ib);
}


/* reader_count_examples: what optim.schedule = auto fits its decay to. */
static int64_t count_of(const char *rel, int header, int epochs, int64_t max, int *exact,
                        char *why, size_t cap)
{
    struct ss_config c;
    struct ss_err e = {0};
    struct example_count n;
    char p[512];
    memset(&c, 0, sizeof c);
    path_of(p, sizeof p, rel);
    c.data.train = p;
    c.data.separator = "\t";
    c.data.epochs = epochs;
    c.data.max_examples = max;
    if (header) { /* conv.tsv's columns */
        c.data.format = FMT_CSV, c.data.header = 1, c.data.label_col = 0;
        c.data.dense_cols = "1-2", c.data.cat_cols = "3-5", c.data.cat_encoding = CAT_HASH;
    }
    if (reader_count_examples(&c, &n, &e) < 0) {
        snprintf(why, cap, "%s", e.msg);
        return -2;
    }
    *exact = n.exact;
    snprintf(why, cap, "%s", n.why);
    return n.examples;
}

static void test_count(void)
{
    int exact = 0;
    char why[1100];
    int64_t n = count_of("gz/a.tsv", 0, 1, 0, &exact, why, sizeof why);
    CHECK(n == 3000 && exact, "count: a small text file's lines, bad ones among them, counted",
          "%lld (exact %d) %s", (long long)n, exact, why);
    n = count_of("a.tsv.gz", 0, 1, 0, &exact, why, sizeof why);
    CHECK(n == 3000 && exact, "count: a small gzip file's lines, counted", "%lld (exact %d) %s",
          (long long)n, exact, why);
    n = count_of("gz/a.tsv", 0, 3, 0, &exact, why, sizeof why);
    int64_t m = count_of("gz/a.tsv", 0, 3, 5000, &exact, why, sizeof why);
    CHECK(n == 9000 && m == 5000, "count: times data.epochs, capped by data.max_examples",
          "%lld, %lld", (long long)n, (long long)m);
    n = count_of("conv.tsv", 1, 1, 0, &exact, why, sizeof why);
    CHECK(n == 32 && exact, "count: a CSV's header line is no example", "%lld %s", (long long)n,
          why);
    n = count_of("shards", 0, 1, 0, &exact, why, sizeof why);
    CHECK(n == 30 && exact, "count: binary shards' headers", "%lld %s", (long long)n, why);

    write_criteo_file("count-big.tsv", 300000, 0); /* over 64 MiB: sampled */
    struct stat st;
    char p[512];
    path_of(p, sizeof p, "count-big.tsv");
    stat(p, &st);
    n = count_of("count-big.tsv", 0, 1, 0, &exact, why, sizeof why);
    CHECK(st.st_size > (64 << 20) && !exact && n > 294000 && n < 306000,
          "count: a text file over 64 MiB estimated from samples within 2 %",
          "%lld (exact %d, %lld bytes) %s", (long long)n, exact, (long long)st.st_size, why);
    unlink(p);
    write_criteo_file("count-gz.tsv", 40000, 0); /* past the inflated bytes counted: estimated */
    gzip_file("count-gz.tsv", "count-gz.tsv.gz", 1, 0);
    n = count_of("count-gz.tsv.gz", 0, 1, 0, &exact, why, sizeof why);
    CHECK(n == 40000 && exact, "count: a gzip file within 128 MiB inflated, counted",
          "%lld (exact %d) %s", (long long)n, exact, why);
    reader_count_gz_bytes = 8 << 20;
    n = count_of("count-gz.tsv.gz", 0, 1, 0, &exact, why, sizeof why);
    reader_count_gz_bytes = 128ll << 20;
    CHECK(!exact && n > 38800 && n < 41200,
          "count: a gzip file past the bytes inflated (8 MiB here) estimated within 3 %", "%lld (exact %d) %s",
          (long long)n, exact, why);

    path_of(p, sizeof p, "count.fifo");
    mkfifo(p, 0644);
    n = count_of("count.fifo", 0, 1, 0, &exact, why, sizeof why);
    CHECK(n == -1 && strstr(why, "stream"), "count: a pipe has no size: unknown, said why",
          "%lld: %s", (long long)n, why);
    unlink(p);
}

int main(void)
{
    strcpy(root, "/tmp/ss_test_reader.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 2;
    }
    test_batch();
    test_parse_criteo();
    test_parse_csv();
    test_parse_libsvm();
    test_reader_bad_lines();
    test_exactly_once();
    test_blank_run();
    test_shares();
    test_dir_and_glob();
    test_convert_and_binary();
    test_gen();
    test_gen_multihot();
    test_tell_seek();
    test_pos_changed_data();
    test_epochs();
    test_gzip();
    test_count();
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    CHECK_DONE();
}
