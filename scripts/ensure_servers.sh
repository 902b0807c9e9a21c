#!/usr/bin/env bash
# Make sure the server binaries the tests start exist, caching what it builds:
# - PostgreSQL: Debian's postgresql package (initdb, pg_ctl) if missing.
# - Weaviate: built once from its published Go module into ~/.cache/rag-sweep (about 6 minutes cold).
# - Chromium: Debian's chromium package, the real browser of the report's screenshot test.
# - An S3-compatible server (gofakes3, MIT; MinIO's server is AGPL): built once from its Go module (~10 s).
# - RabbitMQ, the fleet's broker: Debian's rabbitmq-server package; the tests start their own node, so the
#   service the package starts is stopped.
# Prints `export` lines for WEAVIATE_BIN, PG_BINDIR, CHROMIUM_BIN, S3_SERVER_BIN and RABBITMQ_SERVER_BIN;
# skip Weaviate when WEAVIATE_URL is set.
set -euo pipefail
WEAVIATE_VERSION="${WEAVIATE_VERSION:-v1.35.2}"
GOFAKES3_VERSION="${GOFAKES3_VERSION:-v1.2.0}"
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

RABBITMQ_SERVER_BIN=/usr/lib/rabbitmq/bin/rabbitmq-server
if [ ! -x "$RABBITMQ_SERVER_BIN" ]; then
  echo "[servers] installing RabbitMQ from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq rabbitmq-server >&2
  # the package starts a system node on 5672: not ours, and it holds memory for nothing
  (service rabbitmq-server stop || pkill -f beam.smp || true) >/dev/null 2>&1
fi
echo "export RABBITMQ_SERVER_BIN=$RABBITMQ_SERVER_BIN"

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

go_build() {  # go_build MODULE/CMD VERSION NAME: the binary's path, built into the cache once
  local bin="$CACHE/$3-$2/$3"
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null || { echo "[servers] Go is needed to build $3" >&2; exit 1; }
    echo "[servers] building $3 $2 from its Go module (cached in $CACHE)" >&2
    mkdir -p "$(dirname "$bin")"
    local tmp
    tmp="$(mktemp -d)"
    GOBIN="$tmp" go install "$1@$2" >&2
    mv "$tmp/$(basename "$1")" "$bin"
    rmdir "$tmp"
  fi
  echo "$bin"
}
echo "export S3_SERVER_BIN=$(go_build github.com/johannesboyne/gofakes3/cmd/gofakes3 "$GOFAKES3_VERSION" gofakes3)"
