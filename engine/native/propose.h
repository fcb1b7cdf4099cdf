/* What propose.c (the drafter's per-step drafting: fc_propose, fc_propose_retrieve) shares with draft_ahead.c (the
   next step's drafting inside the verification's call: fc_verify_propose, fc_draft_ahead). */
#ifndef FC_PROPOSE_H
#define FC_PROPOSE_H

#include <stdint.h>

/* Returned when neither the cache nor the context copy has a continuation: the caller searches D_r and D_c
   (FastCoder Alg. 1) and calls again with what they gave (n_prefix >= 0). */
#define PROPOSE_RETRIEVE (-100)
/* Returned when no source has a continuation (the caller's empty tree). */
#define PROPOSE_NOTHING (-101)
/* Added to the result when the cache had a continuation (the cache's hit counter). */
#define PROPOSE_CACHE_HIT ((int64_t)1 << 40)
/* Added to the result when neither the cache nor the copy had one and the context's last n_min tokens hold a
   special token (pa[30], pa[31]): no datastore continues it, the retrieval is skipped here (the drafter's skipped
   counter) and the tree built from the history's source. */
#define PROPOSE_SKIPPED ((int64_t)1 << 41)
/* Returned for such a step when the history had nothing either. */
#define PROPOSE_NOTHING_SKIPPED (-102)

/* The sources' bits (engine/draft_tree.py). */
#define SOURCE_CACHE 1
#define SOURCE_CONTEXT 8
#define SOURCE_HISTORY 64

/* The datastores' arguments per store in pa[27] (propose.c: what each of the RETRIEVE_FIELDS holds). */
enum { RETRIEVE_FIELDS = 7 };

int64_t fc_propose(const int64_t *pa, const double *pd, int64_t ctx_len, int64_t cache_len, int64_t history_len,
                   int64_t n_prefix);
int64_t fc_propose_retrieve(const int64_t *pa, const double *pd, int64_t ctx_len, int64_t cache_len,
                            int64_t history_len, int64_t stores);
int64_t fc_chain_extend(const int64_t *buf, int32_t *prev, int32_t *head, int64_t head_len, int64_t from,
                        int64_t to);

#endif
