/* What the tree builder (draft_tree.c) and the draft head's step (draft_head.c) share: the logistic calibration's
   logit and sigmoid (engine/draft_head.py, DepthOneFeature), the same arithmetic as the Python code's. */
#ifndef FASTCODER_DRAFT_HEAD_H
#define FASTCODER_DRAFT_HEAD_H

#include <math.h>

#define HEAD_EPS 1e-4
#define HEAD_FEATURE_FLOOR 16.0

static inline double head_logit(double q) {
    double qc = q < HEAD_EPS ? HEAD_EPS : (q > 1.0 - HEAD_EPS ? 1.0 - HEAD_EPS : q);
    return log(qc / (1.0 - qc));
}

static inline double head_sigmoid(double z) {
    if (z >= 0.0) return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

#endif
