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


def test_decoding_a_reply_imports_only_its_own_context():
    # The first reply a command decodes used to walk (and import) every metallo
    # package: SQLAlchemy, jsonschema and the governance file, 0.3 s per command.
    probe = (
        "import sys\n"
        "from metallo.messaging.registry import message_class\n"
        "cls = message_class('metallo.execution_core.v1.RunCompleted')\n"
        "assert message_class('metallo.persistence.v1.X') is None\n"  # a header names it
        "assert message_class('metallo.__init__.v1.X') is None\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'jsonschema')"
        " or m.startswith(('metallo.governance', 'metallo.persistence', 'metallo.site_coordination')))\n"
        "print(cls.__name__, heavy[:3])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "RunCompleted []"


def test_message_class_knows_every_catalogued_message_and_nothing_else():
    from metallo.messaging.registry import _all_messages, message_class

    catalogue = _all_messages()
    assert len(catalogue) > 40
    for name, cls in catalogue.items():
        assert message_class(name) is cls
    assert message_class("metallo.no_such_context.v1.Anything") is None
    assert message_class("metallo.execution_core.v9.RunCompleted") is None
    assert message_class("metallo.execution_core.v1.NoSuchMessage") is None
    assert message_class("not a name") is None
