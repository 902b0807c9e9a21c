#!/usr/bin/env bash
# Make sure the server binaries the tests start exist, caching what it builds:
# - PostgreSQL: Debian's postgresql package (initdb, pg_ctl) if missing.
# - Weaviate: built once from its published Go module into ~/.cache/rag-sweep (about 6 minutes cold).
# - Chromium: Debian's chromium package, the real browser of the report's screenshot test.
# Prints `export` lines for WEAVIATE_BIN, PG_BINDIR and CHROMIUM_BIN; skip Weaviate when WEAVIATE_URL is set.
set -euo pipefail
WEAVIATE_VERSION="${WEAVIATE_VERSION:-v1.35.2}"
CACHE="${RAG_SWEEP_CACHE:-$HOME/.cache/rag-sweep}"

pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(pg_bindir)" ] || [ ! -x "$(pg_bindir)/initdb" ]; then
  echo "[servers] installing PostgreSQL from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
echo "export PG_BINDIR=$(pg_bindir)"

if ! command -v chromium >/dev/null; then
  echo "[servers] installing Chromium from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq chromium >&2
fi
echo "export CHROMIUM_BIN=$(command -v chromium)"

if [ -z "${WEAVIATE_URL:-}" ]; then
  bin="$CACHE/weaviate-$WEAVIATE_VERSION/weaviate-server"
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null || { echo "[servers] Go is needed to build Weaviate" >&2; exit 1; }
    echo "[servers] building weaviate-server $WEAVIATE_VERSION from its Go module (cached in $CACHE)" >&2
    mkdir -p "$(dirname "$bin")"
    tmp="$(mktemp -d)"
    GOBIN="$tmp" go install "github.com/weaviate/weaviate/cmd/weaviate-server@$WEAVIATE_VERSION" >&2
    mv "$tmp/weaviate-server" "$bin"
    rmdir "$tmp"
  fi
  echo "export WEAVIATE_BIN=$bin"
fi
