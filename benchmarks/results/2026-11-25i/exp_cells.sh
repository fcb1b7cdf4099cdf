#!/bin/bash
# The nine cells (2026-11-25h/exp_cells.sh): the clone's head and this session's start (ea4c745) alternating,
# SPECS default new-r2 base-r2 new-r3 (this folder's cells-*; new-r1 and base-r1 ran first: summary-*.md).
BASE_COMMIT=ea4c745 SPECS=${SPECS:-new-r2 base-r2 new-r3} CELLS_DIR=cells exec bash "$(dirname "$0")/../2026-11-25h/exp_cells.sh"
