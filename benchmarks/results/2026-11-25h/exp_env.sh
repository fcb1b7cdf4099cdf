# Sourced by this folder's exp_*.sh: the clone, ../shared, its venv's python and site-packages (the benchmarked
# packages), an output folder, and (exp_cells.sh, exp_ab_session.sh) a worktree of the session's start.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)   # the clone (its head is the "new" side)
SHARED=$ROOT/../shared
PY=$ROOT/.venv/bin/python
SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
OUT=${OUT:-/tmp/fastcoder-exp}
mkdir -p "$OUT"
base_worktree() {  # BASE: a worktree of BASE_COMMIT (default: the session's start, 51cd1a6), made when missing
    BASE=${BASE:-$OUT/base}
    [ -d "$BASE" ] || git -C "$ROOT" worktree add -f "$BASE" ${BASE_COMMIT:-51cd1a6}
}
