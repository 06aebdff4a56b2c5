/* model.rows = auto (issue 29), resolved to numbers once, before anything
 * reads the model's layout: placement, the embedding PSs' memory check,
 * hot rows and the tables themselves see plain rows. A run sizes the auto
 * tables from the distinct ids of data.train (reader_rows_auto: one pass,
 * under model.rows_budget_mb); a resume or an eval takes the rows its
 * tables were saved with instead, so a model never meets other rows. A
 * cluster job's master resolves them and every rank takes the text
 * (trainer_master_checks). */
#include "job.h"

#include <glib.h>

/* rows[0..n) as model.rows text; g_free it. */
static char *rows_text(const int64_t *rows, int n)
{
    GString *s = g_string_new("");
    for (int t = 0; t < n; t++)
        g_string_append_printf(s, "%s%lld", t ? "," : "", (long long)rows[t]);
    return g_string_free(s, FALSE);
}

/* The rows of the tables saved in dir; a number model.rows gives must be
 * the one saved. */
static int saved_rows(const struct ss_config *c, const char *dir, const int64_t *given, int n,
                      int64_t *rows, struct ss_err *e)
{
    int rc = embps_saved_rows(dir, rows, n, e);
    for (int t = 0; rc == 0 && t < n; t++)
        if (given[t] != MODEL_ROWS_AUTO && given[t] != rows[t])
            rc = ss_config_fail(e, c, "model.rows", "model.rows = %s gives table %d %lld rows, "
                                "and %s holds it with %lld: give the model's rows (or auto)",
                                c->model.rows, t, (long long)given[t], dir, (long long)rows[t]);
    return rc;
}

int trainer_rows_auto(const struct ss_config *c, const char *saved, FILE *say, char **out,
                      struct ss_err *e)
{
    int64_t given[SS_MAX_TABLES], rows[SS_MAX_TABLES];
    int n, rc = 0;
    *out = NULL;
    if (!model_rows_auto(c))
        return 0;
    if ((n = model_rows_parse(c, given, e)) < 0)
        return n;
    if (saved) {
        if ((rc = saved_rows(c, saved, given, n, rows, e)) < 0)
            return rc;
        *out = rows_text(rows, n);
        if (say)
            fprintf(say, "# model.rows = auto: the rows saved in %s\n", saved);
    } else {
        struct rows_auto r;
        if ((rc = reader_rows_auto(c, &r, e)) < 0)
            return rc;
        for (int t = 0; t < r.n_tables; t++)
            rows[t] = r.t[t].rows;
        *out = rows_text(rows, r.n_tables);
        if (say)
            reader_rows_auto_print(c, &r, say);
        reader_rows_auto_free(&r);
    }
    if (say)
        fprintf(say, "# model.rows = %s\n", *out), fflush(say);
    return 0;
}

int trainer_resolve_rows(struct ss_config *c, const char *saved, FILE *say, struct ss_err *e)
{
    char *rows;
    int rc = trainer_rows_auto(c, saved, say, &rows, e);
    if (rows) {
        g_free(c->model.rows);
        c->model.rows = rows;
    }
    return rc;
}
