/* Internals shared by the files of src/export/: the graph (onnx.c) and the
 * preprocessing JSON (prep.c), both written by export.c. */
#ifndef SS_EXPORT_INTERNAL_H
#define SS_EXPORT_INTERNAL_H

#include "shadowsync/export.h"

/* The ONNX names of the graph's inputs and output (docs/export.md). */
#define EXPORT_DENSE "dense"
#define EXPORT_IDS "ids_%d"       /* table t's row ids, id mod rows */
#define EXPORT_BAGS "bags_%d"     /* the example each of them belongs to */
#define EXPORT_WTS "wts_%d"       /* (weighted data: libsvm) each id's weight in its bag */
#define EXPORT_PROB "prob"

/* Where table t's rows (rows x dim floats, row-major) sit in the external
 * data file named location (beside the graph). */
struct export_tables {
    const char *location;
    const int64_t *offset, *bytes;    /* [n_tables] */
};

/* The graph of layout l with the dense parameters w (inline) and the tables
 * of x (external), packed into path; weighted: each table takes its ids'
 * weights too (EXPORT_WTS). */
int export_graph(const struct model_layout *l, const float *w, const struct export_tables *x,
                 int weighted, const char *path, struct ss_err *e);
/* The preprocessing of config c's data for the graph (graph and data: the
 * files' names beside it), as JSON into path; *weighted: whether the data's
 * ids may weigh other than 1. */
int export_prep(const struct ss_config *c, const struct model_layout *l, const char *graph,
                const char *data, const char *path, int *weighted, struct ss_err *e);

#endif
