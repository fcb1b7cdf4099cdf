/* The indentation shift shared by the context copy (context_copy.c) and the completion history (propose.c):
   engine/indent_shift.py's rule in C, the same tokens. */
#ifndef FC_INDENT_SHIFT_H
#define FC_INDENT_SHIFT_H

#include <stdint.h>

/* Indentation shift (engine/indent_shift.py, IndentTable): an occurrence of the context's tail that sits on a line
   indented d columns less than the context's current line is copied with every newline-and-spaces token of its
   continuation indented d columns more (a method body copied into a nested block, a loop copied out of one).
   table (int32): [0] vocab size V, [1] newline counts kept (1..NL), [2] widths kept (0..W), then per token id the
   code newlines * 256 + width of a token that is newlines followed by spaces only, else -1, then the token of each
   (newlines, width) (index (newlines - 1) * (W + 1) + width), else -1. NULL: no shift. */
#define SCAN_LINE 256 /* tokens scanned back for a line's newline token */

/* The width of the line that holds toks[p - 1]: the width of the last newline token before p (at most SCAN_LINE
   tokens back), -1 when there is none, or a negative token (a buffer's separator) comes first. A width of 0 counts
   as none: the token after "\n" alone may or may not carry the line's first space (" def" at column 1, "def" at
   0), so such a line is never shifted. */
static inline int64_t line_width(const int32_t *table, const int64_t *toks, int64_t p) {
    int64_t v = table[0], stop = p - 1 - SCAN_LINE > 0 ? p - 1 - SCAN_LINE : 0;
    for (int64_t i = p - 1; i >= stop; i--) {
        int64_t t = toks[i];
        if (t < 0) return -1; /* a separator: the line starts in another sequence */
        if (t < v && table[3 + t] >= 0) return (table[3 + t] & 255) ? table[3 + t] & 255 : -1;
    }
    return -1;
}

/* Token t shifted by delta columns: t itself (not a newline token, or delta 0), the newline token of the shifted
   width, or -1 where the table has none or either width is 0 (see line_width: the copy ends there). */
static inline int64_t shifted(const int32_t *table, int64_t t, int64_t delta) {
    if (!table || delta == 0 || t < 0 || t >= table[0]) return t;
    int64_t code = table[3 + t];
    if (code < 0) return t;
    int64_t nl = code >> 8, w = (code & 255) + delta, wmax = table[2];
    if (nl < 1 || nl > table[1] || (code & 255) == 0 || w < 1 || w > wmax) return -1;
    return table[3 + table[0] + (nl - 1) * (wmax + 1) + w];
}

/* The column shift of the occurrence whose continuation starts at s: the width of the context's current line less
   that of the occurrence's, 0 where either is unknown or there is no table. */
static inline int64_t shift_of(const int32_t *table, const int64_t *toks, int64_t width_n, int64_t s) {
    if (!table || width_n < 0) return 0;
    int64_t w = line_width(table, toks, s);
    return w < 0 ? 0 : width_n - w;
}

#endif
