/* What plot.c lends sweep.c (private to src/trainer/): metrics.json's
 * figures, gnuplot's quoting and its pipe. */
#ifndef SS_TRAINER_PLOT_H
#define SS_TRAINER_PLOT_H

#include "shadowsync/core.h"

#include <glib.h>

/* The text of path (g_free it), or NULL where it cannot be read. */
char *plot_read_text(const char *path);
/* A number of a flat JSON object as metrics.json holds them ("key": 1.5);
 * NAN where key is absent or null. */
double plot_json_number(const char *json, const char *key);
/* 1 when path holds a whole metrics.json of a run that ended by itself
 * (its closing brace written, no "stopped_by"). */
int plot_metrics_complete(const char *path);
/* text as a gnuplot string in single quotes (a quote doubled). */
void plot_quote(GString *s, const char *text);
/* Runs script (without its terminal and output lines: they are put first)
 * through gnuplot's standard input into png, written whole or not at all,
 * and writes the same script beside it (plot_script_path) so `gnuplot
 * FILE.gp` draws it again. Fails naming the package where gnuplot is
 * missing, and with gnuplot's last message where it fails. */
int plot_gnuplot(const char *png, int width, int height, const char *script, struct ss_err *e);
/* png's script: FILE.png -> FILE.gp (else png + ".gp"); g_free it. */
char *plot_script_path(const char *png);

#endif
