/* shadowsync export: a saved model as an ONNX graph that a serving runtime
 * scores (docs/export.md). The whole DLRM is in the graph (the dense
 * transform, both MLPs, each table's gather and pooling, the interaction,
 * the sigmoid); the tables go beside it as ONNX external data, streamed
 * from the model's files (never all in memory), with the hot rows folded
 * back into them; what the reader does from a raw line to the graph's
 * inputs is written beside it as JSON. It reads model files (ckpt), saved
 * tables (embps) and the data's schema (reader); nothing reads it but
 * main. */
#ifndef SHADOWSYNC_EXPORT_H
#define SHADOWSYNC_EXPORT_H

#include "core.h"

/* The model in dir (a model directory, or a run directory's model/) under
 * config c, into out (the graph), out.data (the tables) and out.json (the
 * preprocessing); each is written as NAME.tmp and renamed once all three
 * are whole. What it did goes to say. */
int export_onnx(const struct ss_config *c, const char *dir, const char *out, FILE *say,
                struct ss_err *e);
/* 1 where this build has the ONNX export (protobuf-c and the onnx.proto of
 * python3-onnx were found); else 0 and why into why. */
int export_available(char *why, size_t cap);

#endif
