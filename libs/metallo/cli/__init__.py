"""The ``metallo`` command line: the same RabbitMQ request/reply contract
the Go API speaks, with Rich output and documented exit codes (``exits.py``).

Groups: ``action``, ``pipeline``, ``run``, ``site`` (grant, drain, resume), ``dev``. Settings come
from options, then ``METALLO_*`` variables, then the config file (``settings.py``).
"""
