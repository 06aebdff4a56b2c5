/* The DLRM as an ONNX graph (docs/export.md), built as protobuf-c messages
 * of the onnx.proto that Debian's python3-onnx ships (generated into
 * build/gen/ at build time, never committed) and packed into a file.
 * IR version 8, opset 17 (the newest that python3-onnx 1.12's checker
 * knows; ScatterND's reduction needs 16).
 *
 * The graph computes what model_forward and the embedding lookup compute
 * (src/core/model.c, src/embps/tables.c), in fp32:
 *   dense [N x n_dense] -> log(1 + max(x, 0)), as log1p: Kahan's
 *     u = x > 0 ? x : 0; w = 1 + u; w == 1 ? u : log(w) * (u / (w - 1))
 *   -> the bottom MLP (Gemm, ReLU between layers, none after the last);
 *   table t: Gather(table_t, ids_t) [K x dim] (libsvm data: times its
 *     ids' weights wts_t), summed into the rows of
 *     bags_t by ScatterND(zeros [N x dim], reduction add), an empty bag
 *     zeros; mean: times 1 / max(len, 1), as model_pool_scale;
 *   the interaction: V = [v0, v1 .. vT] [N x T+1 x dim], V V^T, its
 *     strict lower triangle in row-major order ((1,0), (2,0), (2,1) ...)
 *     after v0;
 *   -> the top MLP -> Sigmoid -> prob [N].
 * The dense parameters sit in the graph (raw_data); the tables are
 * external data. Every message and string lives in one arena, freed after
 * the pack; the weights are borrowed from the caller. */
#include "internal.h"

#if SS_ONNX

#include "onnx.pb-c.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define OPSET 17
#define IR_VERSION 8

/* Everything the graph's messages point to, freed at once. */
struct arena {
    void **p;
    size_t n, cap;
};

static void *grab(struct arena *a, size_t n)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->p = ss_xrealloc(a->p, a->cap * sizeof *a->p);
    }
    return a->p[a->n++] = ss_xcalloc(1, n ? n : 1);
}

static void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
}

static char *text(struct arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *text(struct arena *a, const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort(); /* out of memory, as ss_xmalloc */
    char *kept = grab(a, (size_t)n + 1);
    memcpy(kept, s, (size_t)n + 1);
    free(s);
    return kept;
}

/* The graph under construction: its lists are sized once (cap). */
struct graph {
    struct arena a;
    Onnx__GraphProto g;
    size_t cap;
    int names;                  /* fresh value names made so far */
};

/* A node of type op with the NULL-ended inputs after out; out NULL: a fresh
 * name. Its first output is node->output[0]. */
static Onnx__NodeProto *op(struct graph *b, const char *type, const char *out, ...)
{
    Onnx__NodeProto *n = grab(&b->a, sizeof *n);
    onnx__node_proto__init(n);
    va_list ap;
    va_start(ap, out);
    n->input = grab(&b->a, 8 * sizeof(char *));
    for (const char *in; (in = va_arg(ap, const char *)) != NULL;)
        n->input[n->n_input++] = (char *)in;
    va_end(ap);
    n->n_output = 1;
    n->output = grab(&b->a, sizeof(char *));
    n->output[0] = out ? (char *)out : text(&b->a, "v%d", b->names++);
    n->name = text(&b->a, "%s_%zu", type, b->g.n_node);
    n->op_type = (char *)type;
    n->attribute = grab(&b->a, 4 * sizeof *n->attribute);
    if (b->g.n_node == b->cap)
        abort(); /* sized by export_graph for every node it makes */
    b->g.node[b->g.n_node++] = n;
    return n;
}

static const char *op_out(Onnx__NodeProto *n)
{
    return n->output[0];
}

static Onnx__AttributeProto *attr(struct graph *b, Onnx__NodeProto *n, const char *name,
                                  Onnx__AttributeProto__AttributeType type)
{
    Onnx__AttributeProto *a = grab(&b->a, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void attr_int(struct graph *b, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static void attr_str(struct graph *b, Onnx__NodeProto *n, const char *name, const char *s)
{
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)s;
    a->s.len = strlen(s);
}

static void attr_ints(struct graph *b, Onnx__NodeProto *n, const char *name, const int64_t *v,
                      size_t k)
{
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = k;
    a->ints = grab(&b->a, k * sizeof *v);
    memcpy(a->ints, v, k * sizeof *v);
}

/* A tensor of type and shape dims[nd], its data not yet set. */
static Onnx__TensorProto *tensor(struct graph *b, const char *name, int type, int nd,
                                 const int64_t *dims)
{
    Onnx__TensorProto *t = grab(&b->a, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)nd;
    t->dims = grab(&b->a, (size_t)(nd ? nd : 1) * sizeof(int64_t));
    memcpy(t->dims, dims, (size_t)nd * sizeof(int64_t));
    return t;
}

static const char *add_init(struct graph *b, Onnx__TensorProto *t)
{
    if (b->g.n_initializer == b->cap)
        abort(); /* sized by export_graph */
    b->g.initializer[b->g.n_initializer++] = t;
    return t->name;
}

/* An initializer of n little-endian values (borrowed: they live until the
 * pack). */
static const char *init_raw(struct graph *b, const char *name, int type, const void *v, size_t bytes,
                            int nd, const int64_t *dims)
{
    Onnx__TensorProto *t = tensor(b, name, type, nd, dims);
    t->has_raw_data = 1;
    t->raw_data.data = (uint8_t *)v;
    t->raw_data.len = bytes;
    return add_init(b, t);
}

static const char *init_f32(struct graph *b, const char *name, const float *v, int nd,
                            const int64_t *dims)
{
    size_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= (size_t)dims[i];
    return init_raw(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, v, n * sizeof(float), nd, dims);
}

/* A 1-d int64 constant of the values given (copied). */
static const char *init_i64(struct graph *b, const char *name, const int64_t *v, size_t n)
{
    int64_t *copy = grab(&b->a, n * sizeof *v), dims[1] = {(int64_t)n};
    memcpy(copy, v, n * sizeof *v);
    return init_raw(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, copy, n * sizeof *v, 1, dims);
}

static const char *scalar_f32(struct graph *b, const char *name, float v)
{
    float *c = grab(&b->a, sizeof *c);
    *c = v;
    return init_f32(b, name, c, 0, NULL);
}

static Onnx__StringStringEntryProto *entry(struct graph *b, const char *key, char *value)
{
    Onnx__StringStringEntryProto *s = grab(&b->a, sizeof *s);
    onnx__string_string_entry_proto__init(s);
    s->key = (char *)key;
    s->value = value;
    return s;
}

/* rows x dim floats at offset in the external data file. */
static const char *init_external(struct graph *b, const char *name, int64_t rows, int dim,
                                 const char *location, int64_t offset, int64_t bytes)
{
    int64_t dims[2] = {rows, dim};
    Onnx__TensorProto *t = tensor(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->n_external_data = 3;
    t->external_data = grab(&b->a, 3 * sizeof *t->external_data);
    t->external_data[0] = entry(b, "location", (char *)location);
    t->external_data[1] = entry(b, "offset", text(&b->a, "%lld", (long long)offset));
    t->external_data[2] = entry(b, "length", text(&b->a, "%lld", (long long)bytes));
    return add_init(b, t);
}

/* A graph input or output: a tensor of type whose dims are named (param)
 * or fixed (value, where param is NULL). */
static Onnx__ValueInfoProto *value(struct graph *b, const char *name, int type, int nd,
                                   const char *const *param, const int64_t *val)
{
    Onnx__TensorShapeProto *shape = grab(&b->a, sizeof *shape);
    onnx__tensor_shape_proto__init(shape);
    shape->n_dim = (size_t)nd;
    shape->dim = grab(&b->a, (size_t)nd * sizeof *shape->dim);
    for (int i = 0; i < nd; i++) {
        Onnx__TensorShapeProto__Dimension *d = grab(&b->a, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (param[i]) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = (char *)param[i];
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = val[i];
        }
        shape->dim[i] = d;
    }
    Onnx__TypeProto__Tensor *tt = grab(&b->a, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = type;
    tt->shape = shape;
    Onnx__TypeProto *tp = grab(&b->a, sizeof *tp);
    onnx__type_proto__init(tp);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    Onnx__ValueInfoProto *v = grab(&b->a, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = (char *)name;
    v->type = tp;
    return v;
}

/* ConstantOfShape(shape) filled with v. */
static const char *filled(struct graph *b, const char *shape, float v)
{
    Onnx__NodeProto *n = op(b, "ConstantOfShape", NULL, shape, NULL);
    float *c = grab(&b->a, sizeof *c);
    *c = v;
    int64_t one = 1;
    Onnx__TensorProto *t = tensor(b, "value", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &one);
    t->has_raw_data = 1;
    t->raw_data.data = (uint8_t *)c;
    t->raw_data.len = sizeof *c;
    attr(b, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
    return op_out(n);
}

/* Layers [from, from + k) of widths width[0..k] as Gemm (+ ReLU but after
 * the last), from x; returns the last output. */
static const char *mlp(struct graph *b, const char *x, const char *stem, const float *w,
                       const size_t *wo, const size_t *bo, const int *width, int k)
{
    for (int i = 0; i < k; i++) {
        int64_t dw[2] = {width[i + 1], width[i]}, db[1] = {width[i + 1]};
        const char *W = init_f32(b, text(&b->a, "%s_w%d", stem, i), w + wo[i], 2, dw);
        const char *B = init_f32(b, text(&b->a, "%s_b%d", stem, i), w + bo[i], 1, db);
        Onnx__NodeProto *n = op(b, "Gemm", NULL, x, W, B, NULL);
        attr_int(b, n, "transB", 1);
        x = op_out(n);
        if (i < k - 1)
            x = op_out(op(b, "Relu", NULL, x, NULL));
    }
    return x;
}

/* log(1 + max(x, 0)) of the dense input, as log1pf computes it (Kahan's
 * log1p: exact where 1 + u rounds to 1). */
static const char *dense_transform(struct graph *b, const char *x, const char *zero,
                                   const char *one)
{
    const char *pos = op_out(op(b, "Greater", NULL, x, zero, NULL));
    const char *u = op_out(op(b, "Where", NULL, pos, x, zero, NULL));
    const char *w = op_out(op(b, "Add", NULL, u, one, NULL));
    const char *wm = op_out(op(b, "Sub", NULL, w, one, NULL));
    const char *lg = op_out(op(b, "Log", NULL, w, NULL));
    const char *q = op_out(op(b, "Div", NULL, u, wm, NULL));
    const char *r = op_out(op(b, "Mul", NULL, lg, q, NULL));
    const char *tiny = op_out(op(b, "Equal", NULL, wm, zero, NULL));
    return op_out(op(b, "Where", NULL, tiny, u, r, NULL));
}

/* Table t's pooled bags [N x dim] (zeros: ConstantOfShape [N, dim] of 0;
 * n_zeros: [N] of 0, for mean's lengths). */
static const char *pool(struct graph *b, const struct model_layout *l,
                        const struct export_tables *x, int t, int weighted, const char *zeros,
                        const char *n_zeros, const char *axis1, const char *one)
{
    const char *ids = text(&b->a, EXPORT_IDS, t), *bags = text(&b->a, EXPORT_BAGS, t);
    const char *table = init_external(b, text(&b->a, "table_%d", t), l->rows[t], l->dim,
                                      x->location, x->offset[t], x->bytes[t]);
    const char *rows = op_out(op(b, "Gather", NULL, table, ids, NULL));
    if (weighted) { /* each row times its id's weight: a weighted bag */
        const char *wts = op_out(op(b, "Unsqueeze", NULL, text(&b->a, EXPORT_WTS, t), axis1,
                                    NULL));
        rows = op_out(op(b, "Mul", NULL, rows, wts, NULL));
    }
    const char *at = op_out(op(b, "Unsqueeze", NULL, bags, axis1, NULL)); /* [K x 1] */
    Onnx__NodeProto *n = op(b, "ScatterND", NULL, zeros, at, rows, NULL);
    attr_str(b, n, "reduction", "add");
    const char *sum = op_out(n);
    if (l->pooling != POOL_MEAN)
        return sum;
    const char *ones = filled(b, op_out(op(b, "Shape", NULL, bags, NULL)), 1.0f);
    n = op(b, "ScatterND", NULL, n_zeros, at, ones, NULL);
    attr_str(b, n, "reduction", "add");
    const char *len = op_out(op(b, "Max", NULL, op_out(n), one, NULL));
    const char *inv = op_out(op(b, "Reciprocal", NULL, len, NULL));
    inv = op_out(op(b, "Unsqueeze", NULL, inv, axis1, NULL));
    return op_out(op(b, "Mul", NULL, sum, inv, NULL));
}

/* The whole graph into b->g. */
static void build(struct graph *b, const struct model_layout *l, const float *w,
                  const struct export_tables *x, int weighted)
{
    int T = l->n_tables, V = T + 1;
    const char *n_dims[2] = {"N", NULL};
    int64_t dense_dims[2] = {0, l->n_dense};
    b->g.input[b->g.n_input++] = value(b, EXPORT_DENSE, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2,
                                       n_dims, dense_dims);
    for (int t = 0; t < T; t++) {
        const char *k[1] = {text(&b->a, "K_%d", t)};
        b->g.input[b->g.n_input++] = value(b, text(&b->a, EXPORT_IDS, t),
                                           ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, k, NULL);
        b->g.input[b->g.n_input++] = value(b, text(&b->a, EXPORT_BAGS, t),
                                           ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, k, NULL);
        if (weighted)
            b->g.input[b->g.n_input++] = value(b, text(&b->a, EXPORT_WTS, t),
                                               ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, k, NULL);
    }
    b->g.output[b->g.n_output++] = value(b, EXPORT_PROB, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1,
                                         n_dims, NULL);

    const char *zero = scalar_f32(b, "zero", 0.0f), *one = scalar_f32(b, "one", 1.0f);
    const int64_t c0 = 0, c1 = 1, cdim = l->dim, flat[2] = {0, -1}, perm[3] = {0, 2, 1};
    const char *axis0 = init_i64(b, "axis0", &c0, 1), *axis1 = init_i64(b, "axis1", &c1, 1);
    const char *x0 = dense_transform(b, EXPORT_DENSE, zero, one);
    const char *v0 = mlp(b, x0, "bottom", w, l->bot_w, l->bot_b, l->bot, l->n_bot);

    /* N from the dense input's shape; zeros to pool into */
    const char *shape = op_out(op(b, "Shape", NULL, EXPORT_DENSE, NULL));
    const char *n1 = op_out(op(b, "Gather", NULL, shape, axis0, NULL)); /* [N] as a 1-d tensor */
    Onnx__NodeProto *cat = op(b, "Concat", NULL, n1, init_i64(b, "dim", &cdim, 1), NULL);
    attr_int(b, cat, "axis", 0);
    const char *zeros = filled(b, op_out(cat), 0.0f);
    const char *n_zeros = l->pooling == POOL_MEAN ? filled(b, n1, 0.0f) : NULL;

    /* V = [v0, v1 .. vT] as [N x V x dim] */
    char **vs = grab(&b->a, (size_t)V * sizeof(char *));
    vs[0] = (char *)op_out(op(b, "Unsqueeze", NULL, v0, axis1, NULL));
    for (int t = 0; t < T; t++) {
        const char *p = pool(b, l, x, t, weighted, zeros, n_zeros, axis1, one);
        vs[t + 1] = (char *)op_out(op(b, "Unsqueeze", NULL, p, axis1, NULL));
    }
    Onnx__NodeProto *stack = op(b, "Concat", NULL, NULL); /* after its inputs' nodes */
    stack->input = vs;
    stack->n_input = (size_t)V;
    attr_int(b, stack, "axis", 1);
    Onnx__NodeProto *tr = op(b, "Transpose", NULL, op_out(stack), NULL);
    attr_ints(b, tr, "perm", perm, 3);
    const char *z = op_out(op(b, "MatMul", NULL, op_out(stack), op_out(tr), NULL));
    z = op_out(op(b, "Reshape", NULL, z, init_i64(b, "flat", flat, 2), NULL)); /* [N x V*V] */
    size_t P = (size_t)V * T / 2, at = 0;
    int64_t *pairs = ss_xmalloc(P * sizeof *pairs);
    for (int a = 1; a < V; a++)
        for (int c = 0; c < a; c++)
            pairs[at++] = (int64_t)a * V + c;
    Onnx__NodeProto *g = op(b, "Gather", NULL, z, init_i64(b, "pairs", pairs, P), NULL);
    free(pairs);
    attr_int(b, g, "axis", 1);
    Onnx__NodeProto *top_in = op(b, "Concat", NULL, v0, op_out(g), NULL);
    attr_int(b, top_in, "axis", 1);

    const char *logit = mlp(b, op_out(top_in), "top", w, l->top_w, l->top_b, l->top, l->n_top);
    const char *prob = op_out(op(b, "Sigmoid", NULL, logit, NULL));
    op(b, "Squeeze", EXPORT_PROB, prob, axis1, NULL);
}

/* protobuf-c's packer appends into a FILE. */
struct file_buffer {
    ProtobufCBuffer base;
    FILE *f;
    int failed;
};

static void file_append(ProtobufCBuffer *buf, size_t len, const uint8_t *data)
{
    struct file_buffer *fb = (struct file_buffer *)buf;
    if (!fb->failed && fwrite(data, 1, len, fb->f) != len)
        fb->failed = errno ? errno : EIO;
}

int export_graph(const struct model_layout *l, const float *w, const struct export_tables *x,
                 int weighted, const char *path, struct ss_err *e)
{
    struct graph b = {0};
    onnx__graph_proto__init(&b.g);
    int T = l->n_tables;
    b.cap = 64 + 16 * (size_t)T + 4 * (size_t)(l->n_bot + l->n_top); /* nodes, initializers */
    b.g.name = "shadowsync_dlrm";
    b.g.node = grab(&b.a, b.cap * sizeof *b.g.node);
    b.g.initializer = grab(&b.a, b.cap * sizeof *b.g.initializer);
    b.g.input = grab(&b.a, (size_t)(1 + 3 * T) * sizeof *b.g.input);
    b.g.output = grab(&b.a, sizeof *b.g.output);
    b.g.doc_string = text(&b.a, "A DLRM trained by shadowsync %s: inputs dense [N x %d] (raw "
                          "values), per table t ids_t (row ids) and bags_t (the example of each "
                          "id)%s; output prob [N]. The preprocessing from a raw line is in the "
                          "JSON beside this file (docs/export.md).", SS_VERSION, l->n_dense,
                          weighted ? " and wts_t (each id's weight in its bag)" : "");
    build(&b, l, w, x, weighted);

    Onnx__OperatorSetIdProto opset;
    onnx__operator_set_id_proto__init(&opset);
    opset.domain = "";
    opset.has_version = 1;
    opset.version = OPSET;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    Onnx__ModelProto m;
    onnx__model_proto__init(&m);
    m.has_ir_version = 1;
    m.ir_version = IR_VERSION;
    m.n_opset_import = 1;
    m.opset_import = opsets;
    m.producer_name = "shadowsync";
    m.producer_version = SS_VERSION;
    m.graph = &b.g;

    int rc = 0;
    size_t size = onnx__model_proto__get_packed_size(&m);
    FILE *f = NULL;
    if (size > INT32_MAX) /* protobuf's own limit; the tables are outside it */
        rc = ss_fail(e, SS_EINVAL, "%s: the graph would take %zu bytes, over protobuf's 2 GB: "
                     "its dense layers are too large to export", path, size);
    else if (!(f = fopen(path, "wb")))
        rc = ss_fail(e, SS_EIO, "%s: cannot write: %s", path, strerror(errno));
    if (f) {
        struct file_buffer fb = {{file_append}, f, 0};
        errno = 0;
        onnx__model_proto__pack_to_buffer(&m, &fb.base);
        if (fclose(f) != 0 && !fb.failed)
            fb.failed = errno ? errno : EIO;
        if (fb.failed)
            rc = ss_fail(e, SS_EIO, "%s: write failed: %s", path, strerror(fb.failed));
    }
    arena_free(&b.a);
    return rc;
}

int export_available(char *why, size_t cap)
{
    (void)why, (void)cap;
    return 1;
}

#else /* built without protobuf-c or python3-onnx's onnx.proto */

int export_graph(const struct model_layout *l, const float *w, const struct export_tables *x,
                 int weighted, const char *path, struct ss_err *e)
{
    (void)l, (void)w, (void)x, (void)weighted;
    return ss_fail(e, SS_ESTATE, "%s: this build has no ONNX export", path);
}

int export_available(char *why, size_t cap)
{
    snprintf(why, cap, "this build has no ONNX export: it needs protoc-c, libprotobuf-c and the "
             "onnx.proto of python3-onnx (apt-get install protobuf-c-compiler "
             "libprotobuf-c-dev python3-onnx, or tools/install-deps), then make");
    return 0;
}

#endif
