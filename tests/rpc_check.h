/* Shared by the RPC tests: the outcome of a raw Thrift call. */
#ifndef SS_RPC_CHECK_H
#define SS_RPC_CHECK_H
#include <stdio.h>
#include "shadowsync/rpc.h"

/* 0 if the call succeeded, 1 if it failed; the reason goes to why[256];
 * *rerr and *gerr are freed. They are passed by address so they are read
 * after the call (as an argument beside it, their order is unspecified). */
static int call_outcome(gboolean ok, ssRpcError **rerr_p, GError **gerr_p, char *why)
{
    ssRpcError *rerr = *rerr_p;
    GError *gerr = *gerr_p;
    int rc = ok && !rerr ? 0 : 1;
    snprintf(why, 256, "%s", rerr ? rerr->message : gerr ? gerr->message : "");
    if (rerr)
        g_object_unref(rerr);
    if (gerr)
        g_error_free(gerr);
    return rc;
}
#endif
