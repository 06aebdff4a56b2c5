/* The preprocessing JSON written beside an exported graph (docs/export.md):
 * what the reader does from a raw line of the config's data to the graph's
 * inputs, as src/reader/parse.c and the tables do it (schema_from_config's
 * columns; hex, dec or hash ids, an empty field id 0; id mod the table's
 * rows; an empty dense field 0). The dense transform is in the graph. */
#include "internal.h"
#include "shadowsync/reader.h"

#include <errno.h>
#include <string.h>

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_char(FILE *f, char c)
{
    char s[2] = {c, 0};
    json_str(f, s);
}

static const char *const encodings[] = {"hex", "dec", "hash"};

static const char *const encoding_doc[] = {
    "the token as a hexadecimal number of 1 to 16 digits (either case), unsigned 64-bit",
    "the token as a decimal integer, blanks around it dropped; a negative one keeps its "
    "two's-complement 64-bit pattern",
    "64-bit FNV-1a of the token's bytes as they are (basis 0xcbf29ce484222325, prime "
    "0x100000001b3)"};

/* Each table's inputs and rows (and its column or field), then the output. */
static void tables_json(FILE *f, const struct schema *s, const struct model_layout *l)
{
    for (int t = 0; t < l->n_tables; t++) {
        fprintf(f, "      {\"ids_input\": \"" EXPORT_IDS "\", \"bags_input\": \"" EXPORT_BAGS
                "\", ", t, t);
        if (s->weighted)
            fprintf(f, "\"wts_input\": \"" EXPORT_WTS "\", ", t);
        fprintf(f, "\"rows\": %lld", (long long)l->rows[t]);
        if (s->format == FMT_LIBSVM)
            fprintf(f, ", \"field\": %d", s->cat_cols[t]);
        else if (s->format != FMT_BINARY)
            fprintf(f, ", \"column\": %d, \"multihot\": %s", s->cat_cols[t],
                    s->is_multihot[t] ? "true" : "false");
        fprintf(f, "}%s\n", t + 1 < l->n_tables ? "," : "");
    }
    fprintf(f, "    ]\n  },\n  \"output\": \"%s\"\n}\n", EXPORT_PROB);
}

/* libSVM / libFM lines (src/reader/parse.c's parse_libsvm) */
static void libsvm_json(FILE *f, const struct schema *s, const struct model_layout *l)
{
    fprintf(f, "  \"header_lines\": %d,\n  \"label\": \"the first blank-separated token: 0 or "
            "1, -1 or +1 (as a number: 1.0 too); -1 reads as 0\",\n  \"features\": \"the "
            "tokens after it, separated by spaces or tabs, each [field:]index:value (decimal "
            "field and index, value a number); a qid: token is skipped, # starts a comment; a "
            "field no input reads is skipped\",\n", s->header_lines);
    if (s->n_fields) {
        fprintf(f, "  \"field_rule\": \"index:value: the field whose range [lo, hi] holds "
                "the index\",\n  \"field_ranges\": [");
        for (int k = 0; k < s->n_fields; k++)
            fprintf(f, "%s[%llu, %llu]", k ? ", " : "", (unsigned long long)s->field_lo[k],
                    (unsigned long long)s->field_hi[k]);
        fprintf(f, "],\n");
    } else {
        fprintf(f, "  \"field_rule\": \"libFM's field:index:value\",\n");
    }
    fprintf(f, "  \"dense\": {\n    \"input\": \"%s\",\n    \"count\": %d,\n    \"fields\": [",
            EXPORT_DENSE, l->n_dense);
    for (int j = 0; j < s->n_dense; j++)
        fprintf(f, "%s%d", j ? ", " : "", s->dense_cols[j]);
    fprintf(f, "],\n    \"value\": \"the feature's value (its index not read); a field "
            "absent from the line 0; a field of -1 is none, always 0\",\n    \"in_graph\": "
            "\"log(1 + max(x, 0))\"\n  },\n  \"categorical\": {\n    \"id\": \"the "
            "feature's index, its value the id's weight (wts_t); a table's bag holds its "
            "field's features in the line's order; a field absent from the line is the bag of "
            "id 0, weight 1\",\n    \"row\": \"id mod rows, the id unsigned 64-bit\",\n"
            "    \"pooling\": \"%s\",\n    \"tables\": [\n",
            l->pooling == POOL_MEAN ? "mean (the weighted sum over the bag's length)" : "sum");
    tables_json(f, s, l);
}

static void write_json(FILE *f, const struct schema *s, const struct model_layout *l,
                       const char *graph, const char *data)
{
    int text = s->format != FMT_BINARY;
    fprintf(f, "{\n  \"format\": \"shadowsync-onnx-preprocess\",\n  \"version\": 1,\n");
    fprintf(f, "  \"producer\": \"shadowsync %s\",\n  \"graph\": ", SS_VERSION);
    json_str(f, graph);
    fprintf(f, ",\n  \"tables_data\": ");
    json_str(f, data);
    fprintf(f, ",\n  \"data_format\": \"%s\",\n",
            s->format == FMT_CRITEO ? "criteo" : s->format == FMT_CSV ? "csv"
            : s->format == FMT_LIBSVM ? "libsvm" : "binary");
    if (s->format == FMT_LIBSVM) {
        libsvm_json(f, s, l);
        return;
    }
    if (text) {
        fprintf(f, "  \"separator\": ");
        json_char(f, s->sep);
        fprintf(f, ",\n  \"header_lines\": %d,\n  \"fields\": %d,\n  \"fields_rule\": \"%s\",\n"
                "  \"label_column\": %d,\n", s->header_lines, s->n_cols,
                s->format == FMT_CRITEO ? "exactly" : "at least", s->label_col);
    }
    fprintf(f, "  \"dense\": {\n    \"input\": \"%s\",\n    \"count\": %d,\n", EXPORT_DENSE,
            l->n_dense);
    if (text) {
        fprintf(f, "    \"columns\": [");
        for (int j = 0; j < s->n_dense; j++)
            fprintf(f, "%s%d", j ? ", " : "", s->dense_cols[j]);
        fprintf(f, "],\n    \"missing\": 0,\n    \"number\": \"[+-]digits[.digits][(e|E)[+-]"
                "digits], blanks around it allowed, read as a double then rounded to float\",\n");
    }
    fprintf(f, "    \"in_graph\": \"log(1 + max(x, 0))\"\n  },\n");
    fprintf(f, "  \"categorical\": {\n");
    if (text) {
        fprintf(f, "    \"encoding\": \"%s\",\n    \"encoding_rule\": ",
                encodings[s->cat_encoding]);
        json_str(f, encoding_doc[s->cat_encoding]);
        fprintf(f, ",\n    \"empty\": 0,\n    \"multihot_separator\": ");
        json_char(f, s->multihot_sep);
        fprintf(f, ",\n    \"multihot_rule\": \"a bag holds the ids of its non-empty tokens; "
                "one with none holds the id 0\",\n");
    }
    fprintf(f, "    \"row\": \"id mod rows, the id unsigned 64-bit\",\n"
            "    \"pooling\": \"%s\",\n    \"tables\": [\n", l->pooling == POOL_MEAN ? "mean" : "sum");
    tables_json(f, s, l);
}

int export_prep(const struct ss_config *c, const struct model_layout *l, const char *graph,
                const char *data, const char *path, int *weighted, struct ss_err *e)
{
    struct schema s;
    const char *from = c->data.eval && *c->data.eval ? c->data.eval : c->data.train;
    int rc = schema_from_config(&s, c, from, e);
    if (rc < 0)
        return rc;
    if (s.format != FMT_CRITEO && s.format != FMT_CSV && s.format != FMT_BINARY &&
        s.format != FMT_LIBSVM)
        return ss_config_fail(e, c, "data.format", "export: data.format %d has no preprocessing "
                              "JSON (criteo, csv, libsvm and binary have)", s.format);
    *weighted = s.weighted;
    if (s.format != FMT_BINARY && (s.n_dense != l->n_dense || s.n_cat != l->n_tables))
        return ss_config_fail(e, c, "data.dense_cols data.cat_cols model.bottom",
                              "the data has %d dense and %d categorical columns, the model %d "
                              "dense features (model.bottom) and %d tables", s.n_dense, s.n_cat,
                              l->n_dense, l->n_tables);
    FILE *f = fopen(path, "w");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", path, strerror(errno));
    write_json(f, &s, l, graph, data);
    if (fclose(f) != 0)
        return ss_fail(e, SS_EIO, "%s: write failed: %s", path, strerror(errno));
    return 0;
}
