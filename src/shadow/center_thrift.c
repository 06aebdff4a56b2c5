/* The EASGD center as the shadow thread sees it in a cluster job: the
 * dense vector's partitions on the sync PSs (DESIGN §3), reached over
 * Thrift. One elastic() = one request per sync PS, all sent first. */
#include "shadowsync/rpc.h"
#include "shadowsync/shadow.h"

#include <stdlib.h>
#include <string.h>

struct part {
    char name[128], host[64];
    int port;
    size_t lo, hi;
    struct rpc_conn *conn;
    ssSyncPSIf *client;
    GByteArray *w;
};

struct thrift_center {
    int P;
    size_t n;
    GByteArray *token;
    struct part *parts;
};

static int part_failed(const struct part *p, ssRpcError *rerr, GError *gerr, struct ss_err *e)
{
    return rpc_call_failed(e, p->name, p->host, p->port, "elastic sync", rerr, gerr);
}

static int thrift_elastic(struct center *c, const float *w, float *out, size_t n, float alpha,
                          struct ss_err *e)
{
    struct thrift_center *tc = c->impl;
    if (n != tc->n)
        return ss_fail(e, SS_EINVAL, "elastic sync of %zu floats against a center of %zu", n,
                       tc->n);
    for (int i = 0; i < tc->P; i++) {
        struct part *p = &tc->parts[i];
        g_byte_array_set_size(p->w, 0);
        g_byte_array_append(p->w, (const guint8 *)(w + p->lo), (guint)((p->hi - p->lo) * 4));
        GError *gerr = NULL;
        if (!ss_sync_p_s_client_send_elastic(p->client, tc->token, (gint64)p->lo, p->w, alpha,
                                             &gerr))
            return part_failed(p, NULL, gerr, e);
    }
    for (int i = 0; i < tc->P; i++) {
        struct part *p = &tc->parts[i];
        GByteArray *ret = NULL;
        ssRpcError *rerr = NULL;
        GError *gerr = NULL;
        if (!ss_sync_p_s_client_recv_elastic(p->client, &ret, &rerr, &gerr) || rerr ||
            !ret || ret->len != (p->hi - p->lo) * 4) {
            if (ret)
                g_byte_array_unref(ret);
            return part_failed(p, rerr, gerr, e);
        }
        memcpy(out + p->lo, ret->data, ret->len);
        g_byte_array_unref(ret);
    }
    return 0;
}

static void thrift_center_free(struct center *c)
{
    struct thrift_center *tc = c->impl;
    for (int i = 0; i < tc->P; i++) {
        struct part *p = &tc->parts[i];
        if (p->client)
            g_object_unref(p->client);
        rpc_conn_close(p->conn);
        if (p->w)
            g_byte_array_unref(p->w);
    }
    g_byte_array_unref(tc->token);
    free(tc->parts);
    free(tc);
    free(c);
}

static const struct center_ops thrift_center_ops = {thrift_elastic, thrift_center_free, NULL,
                                                    NULL};

int center_thrift(struct center **out, const struct sync_endpoint *ps, int P, size_t n,
                  const char *token, int timeout_ms, double pace, struct ss_err *e)
{
    struct thrift_center *tc = ss_xcalloc(1, sizeof *tc);
    tc->P = P;
    tc->n = n;
    tc->token = g_byte_array_new();
    g_byte_array_append(tc->token, (const guint8 *)token, (guint)strlen(token));
    tc->parts = ss_xcalloc(P, sizeof *tc->parts);
    struct center *c = ss_xcalloc(1, sizeof *c);
    *c = (struct center){&thrift_center_ops, tc};
    for (int i = 0; i < P; i++) {
        struct part *p = &tc->parts[i];
        snprintf(p->host, sizeof p->host, "%s", ps[i].host);
        snprintf(p->name, sizeof p->name, "%s", ps[i].name ? ps[i].name : "sync PS");
        p->port = ps[i].port;
        ss_partition(n, P, i, &p->lo, &p->hi);
        p->w = g_byte_array_new();
        int rc = rpc_connect_named(p->name, p->host, p->port, timeout_ms, &p->conn, e);
        if (rc < 0) {
            thrift_center_free(c);
            return rc;
        }
        rpc_conn_pace(p->conn, pace);
        ThriftProtocol *proto = rpc_conn_protocol(p->conn);
        p->client = g_object_new(SS_TYPE_SYNC_P_S_CLIENT, "input_protocol", proto,
                                 "output_protocol", proto, NULL);
    }
    *out = c;
    return 0;
}
