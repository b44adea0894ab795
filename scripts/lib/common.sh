# Shared shell helpers for scripts/test, scripts/demo and .ci/run. Sourced, not run.
# Every function is idempotent.

METALLO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV="$METALLO_ROOT/.venv"
PY="$VENV/bin/python"

# Colour only for a person reading a terminal: a redirected stderr (`2> file`, CI logs)
# gets plain text, and NO_COLOR (any value, https://no-color.org) turns colour off.
say_colour() { # sgr-code label text...: "label text" on stderr, label in colour
  local sgr=$1 label=$2; shift 2
  if [ -t 2 ] && [ -z "${NO_COLOR+set}" ]; then
    printf '\033[%sm%s\033[0m %s\n' "$sgr" "$label" "$*" >&2
  else
    printf '%s %s\n' "$label" "$*" >&2
  fi
}
log() { say_colour 1 '[metallo]' "$@"; }
error() { say_colour 31 '[metallo] error:' "$@"; }
die() { error "$@"; exit 1; }

# Run `"$PY" -m pip install ARGS...` with its output kept in a temporary file: shown
# only when pip fails (then the caller's die names what failed). A machine's pip
# configuration may print many warnings on success; they are not the user's concern.
pip_install() {
  local captured rc=0
  captured=$(mktemp "${TMPDIR:-/tmp}/metallo-pip.XXXXXX")
  "$PY" -m pip install "$@" >"$captured" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    printf '%s\n' "--- pip's output (pip install $*) ---" >&2
    cat "$captured" >&2
    printf '%s\n' "--- end of pip's output ---" >&2
  fi
  rm -f "$captured"
  return "$rc"
}

# Modules every script's Python needs from .venv (the labs read the governance file with
# ruamel.yaml); a .venv that cannot import them is incomplete and is installed again.
VENV_CHECK='import ruamel.yaml, metallo'

# Create .venv and install the project with its dev extra when pyproject.toml changed
# or the .venv cannot import what the scripts need (an interrupted or foreign install).
ensure_venv() {
  local stamp="$VENV/.metallo-installed" want
  want=$(sha256sum "$METALLO_ROOT/pyproject.toml" | cut -d' ' -f1)
  if [ ! -x "$PY" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed: install python3-venv (apt-get install python3-venv)"
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && ! "$PY" -c "$VENV_CHECK" >/dev/null 2>&1; then
    log "$VENV is incomplete (its Python cannot run: $VENV_CHECK): installing again"
    rm -f "$stamp"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing Metallo and its dev tools into .venv (first run takes a minute; pip's output is shown only if it fails)"
    pip_install -q --upgrade pip || die "upgrading pip in $VENV failed (pip's output above)"
    pip_install -q -e "$METALLO_ROOT[dev]" || die "pip install failed (pip's output above)"
    "$PY" -c "$VENV_CHECK" >/dev/null 2>&1 \
      || die "$VENV still cannot run '$VENV_CHECK' after installing; remove $VENV and run this again"
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
