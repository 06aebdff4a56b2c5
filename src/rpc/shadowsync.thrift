/* shadowsync wire protocol (DESIGN §2 "Wires"). Tensors travel as binary
 * blobs of little-endian arrays, never as lists of numbers. Every request
 * carries the job token. Code is generated at build time (Makefile). */
namespace c_glib ss

exception RpcError {
  1: i32 code,
  2: string message
}

struct Hello {
  1: binary token,
  2: i32 rank,
  3: string role
}

service Control {
  /* Liveness check: answers the service's role and rank. */
  Hello ping(1: Hello who) throws (1: RpcError err)
}
