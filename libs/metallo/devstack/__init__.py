"""The development stack behind ``metallo dev up|down|status``.

One supervisor process (``python -m metallo.devstack supervise``) prepares the
machine — migrations, the development TLS certificate, the lab Git operator
token, a ``psb_`` command grant for the Site Runtime — then runs the services,
the Site edge and one Site Runtime as child processes with prefixed logs,
restarts a child that dies (bounded), and stops them all on SIGTERM. State lives
under ``var/dev/`` in the repository (git-ignored).

- ``layout``: the paths under ``var/dev``;
- ``components``: which processes run, with which settings;
- ``prepare``: migrations, certificates, secrets, the runtime grant;
- ``supervisor``: the process tree;
- ``control``: ``up`` / ``down`` / ``status`` for the CLI.
"""
