# Sourced by this folder's exp_*.sh: 2026-11-25h's setup (the clone, ../shared, the venv's python, the benchmarked
# packages, $OUT), with this session's start (ea4c745) as the base worktree.
BASE_COMMIT=ea4c745
source "$(dirname "${BASH_SOURCE[0]}")/../2026-11-25h/exp_env.sh"
