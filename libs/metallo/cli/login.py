"""``metallo login`` / ``metallo logout``: the member's access token from the OIDC issuer.

The issuer comes from ``--issuer``, ``METALLO_OIDC_ISSUER`` or ``oidc_issuer`` in the
config file; its CA from ``--ca-file``, ``METALLO_OIDC_CA_FILE`` or ``oidc_ca_file``.
The password is asked on the terminal, or read from standard input with
``--password-stdin`` (never an argument). Tokens: ``metallo.cli.credentials``.
"""

from __future__ import annotations

import getpass
import sys
from typing import Annotated

import typer

from metallo.cli import credentials
from metallo.cli.exits import CliError, Exit
from metallo.cli.render import out
from metallo.cli.settings import load_config

Issuer = Annotated[str | None, typer.Option("--issuer", envvar="METALLO_OIDC_ISSUER",
                                            help="OIDC issuer URL (default: config oidc_issuer)")]
CaFile = Annotated[str | None, typer.Option("--ca-file", envvar="METALLO_OIDC_CA_FILE",
                                            help="CA bundle for the issuer's TLS certificate")]


def login_with_password(issuer: str, username: str, password: str, *,
                        ca_file: str | None, client_id: str) -> credentials.Credentials:
    """Log in and save the tokens; return them. Raises CliError."""
    got = credentials.password_login(issuer, username, password, client_id=client_id,
                                     ca_file=ca_file)
    credentials.save(got)
    return got


def login(issuer: Issuer = None, ca_file: CaFile = None,
          username: Annotated[str | None, typer.Option(
              "--username", "-u", help="your account at the issuer (asked when left out)")] = None,
          password_stdin: Annotated[bool, typer.Option(
              "--password-stdin", help="read the password from standard input")] = False,
          client_id: Annotated[str, typer.Option(
              "--client-id", envvar="METALLO_OIDC_CLIENT",
              help="the OIDC client of the CLI")] = credentials.DEFAULT_CLIENT) -> None:
    """Log in at the OIDC issuer and keep the member token (0600) for later commands."""
    config = load_config()
    issuer = issuer or config.get("oidc_issuer")
    ca_file = ca_file or config.get("oidc_ca_file")
    if not issuer:
        raise CliError("no OIDC issuer", "pass --issuer URL, set METALLO_OIDC_ISSUER, or put "
                       "oidc_issuer = \"https://…\" in the config file (docs/quickstart.md)",
                       Exit.USAGE, code="invalid-argument")
    if not username:
        if not sys.stdin.isatty():
            raise CliError("no user name", "pass --username", Exit.USAGE, code="invalid-argument")
        username = input("user name: ").strip()
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass("password: ")
    else:
        raise CliError("no password", "type it on a terminal, or pipe it with --password-stdin",
                       Exit.USAGE, code="invalid-argument")
    got = login_with_password(str(issuer), username, password, ca_file=ca_file,
                              client_id=client_id)
    out.print(f"logged in as {got.username} at {got.issuer}; token kept in "
              f"{credentials.credentials_path()}", markup=False, highlight=False)


def logout() -> None:
    """Forget the stored member token."""
    path = credentials.credentials_path()
    if credentials.forget(path):
        out.print(f"logged out (removed {path})", markup=False, highlight=False)
    else:
        out.print("not logged in", markup=False, highlight=False)



