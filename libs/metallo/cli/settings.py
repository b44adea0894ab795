"""Where ``metallo`` connects and whom it acts for.

Each value comes from the command's option, else the environment, else the
config file (TOML, ``METALLO_CONFIG`` or ``~/.config/metallo/config.toml``)::

    member = "m-alice"          # METALLO_MEMBER   (--member)
    project = "demo"            # METALLO_PROJECT  (--project)
    amqp_url = "amqp://guest:guest@127.0.0.1:5672/"   # METALLO_AMQP_URL
    topology_prefix = ""        # METALLO_TOPOLOGY_PREFIX
    timeout_seconds = 15        # METALLO_CLI_TIMEOUT (reply wait per request, seconds)

The AMQP password may sit in the URL in the file or the environment; it is never
printed (``redacted_url``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from metallo.cli.exits import CliError, Exit

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
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
    return Connection(
        amqp_url=os.environ.get("METALLO_AMQP_URL") or config.get("amqp_url") or DEFAULT_AMQP_URL,
        topology_prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX",
                                       str(config.get("topology_prefix", ""))),
        timeout_seconds=timeout,
    )


@dataclass(frozen=True)
class Actor:
    """Who acts (member id) and where (Project id)."""

    member: str
    project: str


def actor(member: str | None, project: str | None, config: dict | None = None) -> Actor:
    """Resolve the acting member and Project (option > environment > config file).

    The options are declared with ``envvar`` so Typer has already applied the
    environment; this adds the config file and refuses a missing value (exit 2).
    """
    config = load_config() if config is None else config
    member = member or os.environ.get("METALLO_MEMBER") or config.get("member")
    project = project or os.environ.get("METALLO_PROJECT") or config.get("project")
    if not member:
        raise CliError("no acting member", "pass --member m-…, set METALLO_MEMBER, or put "
                       f"member = \"m-…\" in {config_path()}", Exit.USAGE)
    if not project:
        raise CliError("no Project", "pass --project ID, set METALLO_PROJECT, or put "
                       f"project = \"…\" in {config_path()}", Exit.USAGE)
    for name, value in (("member", member), ("project", project)):
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
