/* The accepted draft nodes' keys and values moved into contiguous KV-cache slots after a verification.
 *
 * engine.verify.compact_cache keeps the context, the pending token and the accepted path: the path's nodes sit
 * wherever the draft tree put them, and move down to the slots right after the pending token. Through numpy that
 * is two gathers and two writes a layer (24 calls for a 6-layer model), ~280 us with the caches cold after the
 * forward in one step of ten (the path is in place in the others); here it is one call.
 *
 * Each buffer is a preallocated (B, H, capacity, D) block (engine.kv_cache.PreallocatedLayer), so B * H runs of
 * `capacity` rows of `row_bytes` bytes. Rows src[0..n) move to rows lo, lo + 1, ... in ascending order; the path's
 * nodes come parents first, so src ascends and src[j] >= lo + j: no row is read after it was written, and the
 * result is numpy's gather-then-write. Bytes are copied as they are: the same bits, whatever the dtype.
 */
#include <stdint.h>
#include <string.h>

/* bufs: n_bufs x 4 int64 (address, runs B * H, capacity in rows, row bytes). */
void fc_kv_move(const int64_t *bufs, int64_t n_bufs, const int64_t *src, int64_t n, int64_t lo) {
    for (int64_t b = 0; b < n_bufs; b++) {
        char *base = (char *)(intptr_t)bufs[4 * b];
        int64_t runs = bufs[4 * b + 1], capacity = bufs[4 * b + 2], row = bufs[4 * b + 3];
        for (int64_t r = 0; r < runs; r++, base += capacity * row)
            for (int64_t j = 0; j < n; j++)
                if (src[j] != lo + j)
                    memcpy(base + (lo + j) * row, base + src[j] * row, (size_t)row);
    }
}
