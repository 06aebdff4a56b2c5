/* A test's config and model layout from "section.key=value" sets, the
 * earlier ones freed first (c and l start zeroed). */
#ifndef SS_TEST_LAYOUT_H
#define SS_TEST_LAYOUT_H
#include "check.h"
#include "shadowsync/core.h"

#include <string.h>

static inline int load_layout(struct ss_config *c, struct model_layout *l, char **sets, int n)
{
    struct ss_err e = {0};
    ss_config_free(c);
    if (l->rows)
        model_layout_free(l);
    memset(l, 0, sizeof *l);
    if (ss_config_load(c, NULL, sets, n, &e) < 0 || model_layout_init(l, c, &e) < 0) {
        CHECK(0, "test config loads", "%s", e.msg);
        return -1;
    }
    return 0;
}
#endif
