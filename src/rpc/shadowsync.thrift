/* shadowsync wire protocol (DESIGN §2 "Wires"). Tensors travel as binary
 * blobs of little-endian arrays, never as lists of numbers. Every request
 * carries the job token. One request per (worker, PS) per batch covers every
 * table that PS holds, in the PS's order. Code is generated at build time. */
namespace c_glib ss

exception RpcError {
  1: i32 code,
  2: string message
}

/* A batch's bags for the k shards one PS holds (a shard: rows [lo, hi) of
 * one table, by the job's placement plan): offsets is int32 [n*k+1]
 * (example-major: example i, shard j at i*k+j), ids is uint64 [offsets[n*k]],
 * each a row (id mod the table's rows) inside its shard's range; weights,
 * when set, float32 [offsets[n*k]]: each id's weight in its bag (libsvm
 * values; unset: every id weighs 1). id_bytes: 8, or 4 where every row
 * fits (ids then uint32). wire: the form of this request's vectors both
 * ways, the lookup's answer and the push's grads (embedding.wire: 0 fp32,
 * 1 fp16 led by its float32 scale, 2 bf16; wire.c). */
struct Bags {
  1: binary token,
  2: i32 n,
  3: binary shards,     /* int32 [k]: the plan's shard ids, the PS's shards in order */
  4: binary offsets,
  5: binary ids,
  6: optional binary weights,
  7: i32 id_bytes = 8,
  8: i32 wire = 0,
  9: bool reuse = false /* a push only: its bags are this connection's last lookup's, and
                         * shards, offsets, ids and weights go empty */
}

/* A trainer's embedding cache (DESIGN §9 "HET", embps.h row_req): rows
 * addressed by at, an index into shards (this PS's shards, as in Bags), and
 * row (id mod the table's rows, inside that shard). The deltas (float32
 * [m * stride], stride = dim + the optimizer's floats per row) are added
 * first, each with the updates it holds (add_count); then every asked row's
 * clock is answered, and the row itself when the asker holds none
 * (get_have = 2^32-1) or its copy is more than bound updates behind. */
struct RowSync {
  1: binary token,
  2: binary shards,
  3: binary add_at,     /* int32 [m] */
  4: binary add_rows,   /* uint64 [m] */
  5: binary add_delta,  /* float32 [m * stride] */
  6: binary add_count,  /* uint32 [m] */
  7: binary get_at,     /* int32 [g] */
  8: binary get_rows,   /* uint64 [g] */
  9: binary get_have,   /* uint32 [g] */
  10: i32 bound
}

/* clocks: uint32 [g]; rows: float32 [stride] for each row sent, in order. */
struct RowAnswer {
  1: binary clocks,
  2: binary rows
}

service EmbeddingPS {
  /* Pooled bags: [m*dim] in bags.wire's form, m the non-empty bags
   * (offsets[q+1] > offsets[q]), in order: an empty bag is neither
   * answered nor pushed. */
  binary lookup(1: Bags bags) throws (1: RpcError err),
  /* grads: [m*dim] in bags.wire's form, the gradient of each non-empty pooled bag;
   * lr_scale: the factor in [0, 1] on the rows' learning rate for this push
   * (the trainer's rates' schedule; 1 when not sent). */
  void push(1: Bags bags, 2: binary grads, 3: double lr_scale = 1.0) throws (1: RpcError err),
  RowAnswer rows(1: RowSync req) throws (1: RpcError err),
  /* Checkpoints and the model: writes this PS's shards (rows and optimizer
   * state) to path (a file in the job's checkpoint directory, which every
   * rank sees, or in output.dir/model, made on its host); answers the bytes
   * written. */
  i64 save(1: binary token, 2: string path) throws (1: RpcError err)
}

service SyncPS {
  /* EASGD at the center (DESIGN §3) for the slice of the dense vector this
   * sync PS holds, atomically: center <- (1-alpha) center + alpha w; the
   * answer is the new center slice. offset: the slice's first float (must be
   * this PS's); w: float32 [slice length]. */
  binary elastic(1: binary token, 2: i64 offset, 3: binary w, 4: double alpha)
    throws (1: RpcError err),
  /* Checkpoints: writes this PS's slice of the center to path. */
  i64 save(1: binary token, 2: string path) throws (1: RpcError err)
}

/* Up to max examples of one reader's share; n = 0: its data has ended.
 * label float32 [n], dense float32 [n*n_dense], offsets int32 [n*T+1],
 * ids uint64 [offsets[n*T]], example_ids uint64 [n] (weights: as Bags'); bad_lines: the bad
 * lines this reader has skipped so far; done: how far through the data
 * this reader is, 0..1 (reader_fraction). */
struct BatchReply {
  1: i32 n,
  2: i32 n_dense,
  3: i32 n_tables,
  4: binary label,
  5: binary dense,
  6: binary offsets,
  7: binary ids,
  8: binary example_ids,
  9: i64 bad_lines,
  10: double done,
  11: i64 at = -1,       /* the examples this reader had handed out before this batch */
  12: optional binary weights /* float32 [offsets[n*T]], each id's weight; unset: 1 */
}

service Reader {
  BatchReply next_batch(1: binary token, 2: i32 max) throws (1: RpcError err),
  /* Checkpoints: writes the position of this reader's share to path. */
  i64 save(1: binary token, 2: string path) throws (1: RpcError err)
}
