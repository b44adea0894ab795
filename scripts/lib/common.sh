# Shared shell helpers for scripts/test, scripts/demo and .ci/run. Sourced, not run.
# Every function is idempotent.

METALLO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV="$METALLO_ROOT/.venv"
PY="$VENV/bin/python"

log() { printf '\033[1m[metallo]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[metallo] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Create .venv and install the project with its dev extra when pyproject.toml changed.
ensure_venv() {
  local stamp="$VENV/.metallo-installed" want
  want=$(sha256sum "$METALLO_ROOT/pyproject.toml" | cut -d' ' -f1)
  if [ ! -x "$PY" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed: install python3-venv (apt-get install python3-venv)"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing Metallo and its dev tools into .venv (first run takes a minute)"
    "$PY" -m pip install -q --upgrade pip >/dev/null
    "$PY" -m pip install -q -e "$METALLO_ROOT[dev]" || die "pip install failed (see above)"
    echo "$want" > "$stamp"
  fi
}

port_open() { # host port
  "$PY" - "$1" "$2" <<'PYEOF' 2>/dev/null
import socket, sys
s = socket.socket(); s.settimeout(1)
sys.exit(0 if s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0 else 1)
PYEOF
}

wait_port() { # host port seconds name
  local i
  for ((i = 0; i < $3; i++)); do port_open "$1" "$2" && return 0; sleep 1; done
  return 1
}

# PostgreSQL on 127.0.0.1:5432 and RabbitMQ on 127.0.0.1:5672: use them when they
# answer; as root start (or install) Debian's packages; otherwise say what to run.
ensure_services() {
  if ! port_open 127.0.0.1 5432; then
    if [ "$(id -u)" = 0 ]; then
      if ! ls /etc/postgresql >/dev/null 2>&1; then
        log "installing PostgreSQL (Debian package)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      fi
      log "starting PostgreSQL"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    fi
    wait_port 127.0.0.1 5432 30 || die "PostgreSQL is not answering on 127.0.0.1:5432. Start it (as root: pg_ctlcluster <version> main start; with Docker: docker compose up -d postgres) and run this again."
  fi
  if ! port_open 127.0.0.1 5672; then
    if [ "$(id -u)" = 0 ]; then
      if ! command -v rabbitmq-server >/dev/null; then
        log "installing RabbitMQ (Debian package)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
      fi
      log "starting RabbitMQ"
      rabbitmq-server -detached || true
    fi
    wait_port 127.0.0.1 5672 60 || die "RabbitMQ is not answering on 127.0.0.1:5672. Start it (as root: rabbitmq-server -detached; with Docker: docker compose up -d rabbitmq) and run this again."
  fi
}

# Debian's Go toolchain and packages for the Go contract check (contracts/go/build):
# as root install what is missing; otherwise its tests fail saying what to install.
GO_PACKAGES=(golang-go protoc-gen-go golang-google-protobuf-dev golang-github-rabbitmq-amqp091-go-dev protobuf-compiler)
ensure_go_toolchain() {
  local missing=() p
  for p in "${GO_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ]; then
    log "installing the Go contract check's toolchain (Debian packages: ${missing[*]})"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  else
    log "warning: ${missing[*]} not installed; the Go contract tests will fail (as root: apt-get install ${missing[*]})"
  fi
}
