/* optim.schedule = auto (issue 39): a run that sets no decay gets one,
 * fitted to the job's size before anything reads the config, so every
 * later reader (the workers' rates, the embedding PSs' factors, the
 * resolved config printed and saved) sees plain optim.decay_* keys. The
 * decay spans the last optim.auto_decay_share (0.1) of the job's examples
 * (of every pass: two passes train as one over two copies) and ends at
 * x0.05: a pass at a constant rate ends where its last steps' noise left
 * the model (calibration 0.96-0.99 by seed on gen data, ~0.6 on other
 * teacher data), where the decay ends it calibrated; a longer decay cost
 * NE on runs far from converged (docs/benchmarks.md). The size is
 * data.train's examples (reader_count_examples) times data.epochs, capped
 * by data.max_examples;
 * a resume takes the size its checkpoint was fitted to, so the rates it
 * goes on with are the ones it stopped at. A cluster job's master fits it
 * and every rank takes its numbers (trainer_master_checks). */
#include "job.h"

#define AUTO_DECAY_TO 0.05

/* The decay over the last auto_decay_share of a job of `total` examples. */
static void fit(struct ss_config *c, int64_t total)
{
    int64_t span = (int64_t)((double)total * c->optim.auto_decay_share);
    c->optim.decay_examples = span > 0 ? span : 1;
    c->optim.decay_start = total - c->optim.decay_examples;
    c->optim.decay_to = AUTO_DECAY_TO;
    c->optim.auto_examples = total;
}

static void said(FILE *say, const struct ss_config *c, const char *whence)
{
    if (!say)
        return;
    fprintf(say, "# optim.schedule = auto: %s: the rates decay over its last %lld examples to "
            "x%g (optim.decay_start = %lld, optim.decay_examples = %lld, optim.decay_to = %g; "
            "optim.schedule = manual keeps the rates as set)\n", whence,
            (long long)c->optim.decay_examples, c->optim.decay_to,
            (long long)c->optim.decay_start, (long long)c->optim.decay_examples, c->optim.decay_to);
}

int trainer_resolve_schedule(struct ss_config *c, const struct ckpt_meta_set *resumed, FILE *say,
                             struct ss_err *e)
{
    c->optim.auto_examples = 0;
    if (c->optim.schedule == SCHED_MANUAL && !c->optim.decay_examples &&
        !c->optim.warmup_examples && say)
        fprintf(say, "# learning rates constant: optim.schedule = manual sets no warmup or decay "
                "(optim.schedule = auto fits a decay to data.train's size)\n");
    if (c->optim.schedule != SCHED_AUTO || c->optim.decay_examples > 0)
        return 0; /* the keys as set: the run's start says them */
    char whence[700];
    double saved = resumed ? ckpt_meta_get(resumed, "auto_examples", 0) : 0;
    struct example_count n;
    int rc = reader_count_examples(c, &n, e);
    if (rc < 0)
        return rc;
    if (saved > 0 && (n.examples < 2 || (double)n.examples == saved)) {
        fit(c, (int64_t)saved); /* an interrupted run's: the same rates from where it stopped */
        snprintf(whence, sizeof whence, "the job's %lld examples, as the checkpoint it resumes "
                 "was fitted to", (long long)saved);
        said(say, c, whence);
        return 0;
    }
    if (n.examples < 2) {
        if (say)
            fprintf(say, "# optim.schedule = auto: the rates stay as set (no decay): %s; "
                    "optim.decay_start and optim.decay_examples give one\n",
                    n.examples < 0 ? n.why : "data.train holds no examples to fit a decay to");
        return 0;
    }
    fit(c, n.examples);
    int epochs = c->data.epochs > 0 ? c->data.epochs : 1;
    if (n.capped)
        snprintf(whence, sizeof whence, "the job's %lld examples (data.max_examples, of ~%lld "
                 "in data.train%s)", (long long)n.examples, (long long)n.per_pass,
                 epochs > 1 ? " a pass" : "");
    else
        snprintf(whence, sizeof whence, "the job's %s%lld examples (data.train's %d file%s, %s%s)",
                 n.exact ? "" : "~", (long long)n.examples, n.n_files, n.n_files == 1 ? "" : "s",
                 n.exact ? "counted" : "estimated from samples of its lines",
                 epochs > 1 ? ", times data.epochs" : "");
    if (saved > 0) {
        size_t at = strlen(whence);
        snprintf(whence + at, sizeof whence - at, "; refitted: the checkpoint it resumes was "
                 "fitted to %.0f", saved);
    }
    said(say, c, whence);
    return 0;
}
