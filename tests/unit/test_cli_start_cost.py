"""The ``metallo`` CLI starts without the services' database stack: importing the
outbox, relay and consumers (SQLAlchemy) with the request client cost every command
about a second on the lab machine."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_tree_imports_no_sqlalchemy():
    probe = "import sys, metallo.cli.app; print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy')[:3])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_messaging_names_still_resolve_on_first_use():
    import metallo.messaging as messaging

    assert messaging.Outbox.__name__ == "Outbox"
    assert messaging.RequestClient.__module__ == "metallo.messaging.client"
    assert set(messaging.__all__) <= set(dir(messaging))
    try:
        messaging.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_every_exported_name_has_a_home():
    import metallo.messaging as messaging

    assert sorted(messaging.__all__) == sorted(messaging._HOMES)
