"""Where ``metallo`` connects and whom it acts for.

Each value comes from the command's option, else the environment, else the
config file (TOML, ``METALLO_CONFIG`` or ``~/.config/metallo/config.toml``)::

    member = "m-alice"          # METALLO_MEMBER   (--member; default: the logged-in member)
    project = "demo"            # METALLO_PROJECT  (--project)
    amqp_url = "amqp://127.0.0.1:5672/metallo-dev"    # METALLO_AMQP_URL
    amqp_credentials_file = "…/rabbitmq-cli.json"     # METALLO_AMQP_CREDENTIALS_FILE
    topology_prefix = ""        # METALLO_TOPOLOGY_PREFIX
    timeout_seconds = 15        # METALLO_CLI_TIMEOUT (reply wait per request, seconds)

The CLI connects as its own RabbitMQ user (``metallo-cli`` in the dev stack), a
member client that may publish requests and read its own replies, nothing else
(docs/operators.md, Trust boundaries). Its login is a secret: a URL without a
password takes user and password from the credentials file — JSON
``{"username": …, "password": …}``, mode 0600, by default the one ``metallo dev up``
writes (``var/dev/secrets/rabbitmq-cli.json``). A password in the URL is accepted
too; it is never printed (``redacted_url``).
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from metallo.cli.exits import CliError, Exit

DEFAULT_AMQP_URL = "amqp://127.0.0.1:5672/metallo-dev"
MAX_CREDENTIALS_BYTES = 4096
DEFAULT_TIMEOUT_SECONDS = 15.0


def config_path() -> Path:
    """The config file's path (it need not exist)."""
    explicit = os.environ.get("METALLO_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "metallo" / "config.toml"


def load_config() -> dict:
    """The config file's table; {} when absent (``METALLO_CONFIG`` naming a file that
    does not exist is how scripts and tests run without one). Raises CliError (exit 2)
    when it is unreadable."""
    path = config_path()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the config file {path}: {exc}",
                       "fix or remove the file (format: docs/quickstart.md)", Exit.USAGE) from None
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Connection:
    """Broker coordinates: URL, topology prefix and reply timeout (seconds)."""

    amqp_url: str
    topology_prefix: str
    timeout_seconds: float


def connection(config: dict | None = None) -> Connection:
    """The broker connection from the environment, else the config file, else defaults."""
    config = load_config() if config is None else config
    from_env = os.environ.get("METALLO_CLI_TIMEOUT")
    raw_timeout = from_env or config.get("timeout_seconds")
    # Name the setting that holds the bad value: the variable or the file's key.
    fix = ("set METALLO_CLI_TIMEOUT to e.g. 15" if from_env else
           f"set timeout_seconds in {config_path()} to e.g. 15")
    try:
        timeout = float(raw_timeout) if raw_timeout is not None else DEFAULT_TIMEOUT_SECONDS
    except (TypeError, ValueError):
        raise CliError(f"timeout {raw_timeout!r} is not a number of seconds", fix,
                       Exit.USAGE) from None
    if not 0.1 <= timeout <= 600:
        raise CliError("the reply timeout must be 0.1 to 600 seconds", fix, Exit.USAGE)
    url = os.environ.get("METALLO_AMQP_URL") or config.get("amqp_url") or DEFAULT_AMQP_URL
    if urlsplit(url).password is None:
        url = with_login(url, *broker_login(config))
    return Connection(
        amqp_url=url,
        topology_prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX",
                                       str(config.get("topology_prefix", ""))),
        timeout_seconds=timeout,
    )


def credentials_file(config: dict) -> Path:
    """Where the CLI's RabbitMQ login is read: ``METALLO_AMQP_CREDENTIALS_FILE``, the
    config file's ``amqp_credentials_file``, else the dev stack's
    ``secrets/rabbitmq-cli.json``."""
    explicit = os.environ.get("METALLO_AMQP_CREDENTIALS_FILE") or config.get("amqp_credentials_file")
    if explicit:
        return Path(str(explicit)).expanduser()
    from metallo.devstack.layout import Layout
    from metallo.devstack.rabbitmq import CLI_LOGIN_FILE

    return Layout.default().secrets / CLI_LOGIN_FILE


def broker_login(config: dict) -> tuple[str, str]:
    """(user, password) from :func:`credentials_file`. Raises CliError (exit 2) when the
    file is missing, readable by others than its owner, or not ``{"username",
    "password"}``; the message never holds the password."""
    path = credentials_file(config)
    fix = ("run `metallo dev up` (it writes this file), or set METALLO_AMQP_CREDENTIALS_FILE "
           "to your RabbitMQ login (JSON username/password, mode 0600)")
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CliError(f"the RabbitMQ login {path} may be read by others "
                           f"(mode {stat.S_IMODE(mode):o})", f"chmod 600 {path}", Exit.USAGE)
        with path.open("rb") as fh:
            data = json.loads(fh.read(MAX_CREDENTIALS_BYTES + 1)[:MAX_CREDENTIALS_BYTES])
    except FileNotFoundError:
        raise CliError(f"no RabbitMQ login for the CLI at {path}", fix, Exit.USAGE) from None
    except (OSError, ValueError, UnicodeDecodeError):
        raise CliError(f"the RabbitMQ login {path} is unreadable", fix, Exit.USAGE) from None
    user = data.get("username") if isinstance(data, dict) else None
    password = data.get("password") if isinstance(data, dict) else None
    if not (isinstance(user, str) and user and isinstance(password, str) and password):
        raise CliError(f"the RabbitMQ login {path} has no username and password", fix, Exit.USAGE)
    return user, password


def with_login(url: str, user: str, password: str) -> str:
    """``url`` with ``user``/``password`` as its credentials."""
    parts = urlsplit(url)
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.hostname or '127.0.0.1'}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, parts.fragment))


@dataclass(frozen=True)
class Actor:
    """Who acts (member id; "" = the member the login token names) and where (Project id)."""

    member: str
    project: str


def actor(member: str | None, project: str | None, config: dict | None = None) -> Actor:
    """Resolve the acting member and Project (option > environment > config file).

    The options are declared with ``envvar`` so Typer has already applied the
    environment; this adds the config file and refuses a missing Project (exit 2).
    No member means the member of the login token (``metallo login``): the owner
    takes it from the token, and refuses a named member the token does not prove.
    """
    config = load_config() if config is None else config
    member = member or os.environ.get("METALLO_MEMBER") or config.get("member") or ""
    project = project or os.environ.get("METALLO_PROJECT") or config.get("project")
    if not project:
        raise CliError("no Project", "pass --project ID, set METALLO_PROJECT, or put "
                       f"project = \"…\" in {config_path()}", Exit.USAGE)
    checked = [("member", member)] if member else []
    for name, value in (*checked, ("project", project)):
        if len(str(value)) > 200 or not str(value).strip():
            raise CliError(f"the {name} id is empty or longer than 200 characters",
                           f"check --{name}", Exit.USAGE)
    return Actor(member=str(member), project=str(project))


def operator_actor(member: str | None, config: dict | None = None) -> Actor:
    """The acting operator (option > environment > config file's ``member``) for the
    platform-wide operator commands, which name no Project. Exit 2 when missing."""
    config = load_config() if config is None else config
    member = member or os.environ.get("METALLO_MEMBER") or config.get("member")
    if not member or len(str(member)) > 200 or not str(member).strip():
        raise CliError("no acting operator", "pass --member m-…, set METALLO_MEMBER, or put "
                       f"member = \"m-…\" in {config_path()}", Exit.USAGE)
    return Actor(member=str(member), project="")


def redacted_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
