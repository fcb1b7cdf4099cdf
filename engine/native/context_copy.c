/* The context copy's drafter (CopySpec / SuffixDecoding over the generation's own context: engine/context_match.py,
   SuffixMatchIndex.draft) in C, the same draft bit for bit; propose.c calls it for a fastcoder step's copy source.

   Plain C with no Python headers: loaded with ctypes (engine/native/__init__.py). */

#include <stdint.h>

#include "indent_shift.h"

/* SuffixDecoding's draft for the end of a token sequence (engine/context_match.py, SuffixMatchIndex.draft):
   the same tokens, probabilities and match length, bit for bit.

   With an indentation table (indent, non-NULL: engine.indent_shift.IndentTable) every occurrence's continuation
   is read re-indented to the context's current line (shifted, below), as SuffixMatchIndex.draft's rows are.

   toks: the (n,) sequence. The candidates are the max_candidates most recent earlier occurrences of the last
   token (continuation starts s < n with toks[s - 1] == toks[n - 1], most recent first), found by scanning
   backwards. A draft after a match of m tokens holds at most min(factor * m, max_tokens) tokens, and at most
   depth - m where depth_bound is nonzero (SuffixDecoding's suffix-tree bound; SuffixMatchIndex.depth_bound).
   Writes at most max_tokens tokens and their probabilities and the match length; returns the draft's length
   (0: none). */
int64_t fc_suffix_draft(const int64_t *toks, int64_t n, int64_t max_candidates, int64_t depth,
                        double factor, double min_prob, int64_t max_tokens, int64_t depth_bound,
                        int64_t *out_tokens, double *out_probs, int64_t *out_match, const int32_t *indent) {
    enum { MAX_STARTS = 256 };
    int64_t starts[MAX_STARTS], match_of[MAX_STARTS], rows[MAX_STARTS], active[MAX_STARTS];
    int64_t next_active[MAX_STARTS], seen_tok[MAX_STARTS], seen_count[MAX_STARTS];
    int64_t delta_of[MAX_STARTS], row_delta[MAX_STARTS], active_delta[MAX_STARTS], next_delta[MAX_STARTS];
    int64_t best_len = 0, best_match = 0, max_m = 0, n_starts = 0;
    double best_score = 0.0;
    *out_match = 0;
    if (n < 2) return 0;
    if (max_candidates > MAX_STARTS) max_candidates = MAX_STARTS;
    for (int64_t s = n - 1; s >= 1 && n_starts < max_candidates; s--)
        if (toks[s - 1] == toks[n - 1]) starts[n_starts++] = s;
    if (n_starts == 0) return 0;
    int64_t width_n = indent ? line_width(indent, toks, n) : -1;
    for (int64_t i = 0; i < n_starts; i++) {
        int64_t s = starts[i], m = 1;
        delta_of[i] = shift_of(indent, toks, width_n, s);
        while (m < depth && m < s && toks[s - 1 - m] == toks[n - 1 - m]) m++;
        match_of[i] = m;
        if (m > max_m) max_m = m;
    }
    int64_t n_rows = 0;
    int64_t draft_tok[64];
    double draft_prob[64];
    for (int64_t m = max_m; m >= 1; m--) {
        for (int64_t i = 0; i < n_starts; i++)  /* occurrences of the last m tokens, most recent first */
            if (match_of[i] == m) row_delta[n_rows] = delta_of[i], rows[n_rows++] = starts[i];
        int64_t cap = (int64_t)(factor * (double)m + 1e-6);
        if (depth_bound && depth - m < cap) cap = depth - m;
        if (max_tokens < cap) cap = max_tokens;
        if (cap > 64) cap = 64;
        if ((double)cap <= best_score || n_rows == 0) continue;
        /* follow the most frequent next token while the running product of frequencies stays >= min_prob */
        int64_t n_active = n_rows, len = 0;
        double prob = 1.0, score = 0.0;
        for (int64_t i = 0; i < n_rows; i++) active[i] = rows[i], active_delta[i] = row_delta[i];
        for (int64_t d = 0; d < cap; d++) {
            if (n_active == 1) {  /* one occurrence left: the rest of it at the same probability */
                int64_t s = active[0], row_len = n - s < depth ? n - s : depth;
                int64_t end = row_len < cap ? row_len : cap, rest = end > d ? end - d : 0;
                int64_t copied = 0;
                for (int64_t j = 0; j < rest; j++) {
                    int64_t t = shifted(indent, toks[s + d + j], active_delta[0]);
                    if (t < 0) break; /* no newline token of that width: the copy ends */
                    draft_tok[len] = t;
                    draft_prob[len++] = prob;
                    copied++;
                }
                score += prob * (double)copied;
                break;
            }
            int64_t n_seen = 0;
            for (int64_t i = 0; i < n_active; i++) {
                int64_t s = active[i], row_len = n - s < depth ? n - s : depth;
                if (d >= row_len) continue;
                int64_t t = shifted(indent, toks[s + d], active_delta[i]), j = 0;
                if (t < 0) continue; /* the shifted row ends before d */
                while (j < n_seen && seen_tok[j] != t) j++;
                if (j == n_seen) { seen_tok[n_seen] = t; seen_count[n_seen++] = 0; }
                seen_count[j]++;
            }
            if (n_seen == 0) break;
            int64_t pick = 0;
            for (int64_t j = 1; j < n_seen; j++)
                if (seen_count[j] > seen_count[pick]) pick = j;
            prob *= (double)seen_count[pick] / (double)n_active;
            if (prob < min_prob) break;
            draft_tok[len] = seen_tok[pick];
            draft_prob[len++] = prob;
            score += prob;
            int64_t kept = 0;
            for (int64_t i = 0; i < n_active; i++) {
                int64_t s = active[i], row_len = n - s < depth ? n - s : depth;
                if (d < row_len && shifted(indent, toks[s + d], active_delta[i]) == seen_tok[pick])
                    next_delta[kept] = active_delta[i], next_active[kept++] = s;
            }
            for (int64_t i = 0; i < kept; i++) active[i] = next_active[i], active_delta[i] = next_delta[i];
            n_active = kept;
        }
        if (len > 0 && score > best_score) {
            best_score = score;
            best_len = len;
            best_match = m;
            for (int64_t j = 0; j < len; j++) { out_tokens[j] = draft_tok[j]; out_probs[j] = draft_prob[j]; }
        }
    }
    *out_match = best_len > 0 ? best_match : 0;
    return best_len;
}
