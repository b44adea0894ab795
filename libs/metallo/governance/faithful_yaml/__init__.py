"""Bounded, schema-directed YAML loading that keeps what the author wrote.

Both operator-edited files (the governance file) and member-authored files
(``actions.yaml``) go through here. The rules:

* The document is composed into ruamel.yaml nodes and converted by walking the
  node tree *alongside a JSON Schema*. A plain scalar becomes a number, boolean
  or null only where the schema allows that type; where the schema wants a
  string, the exact text the author typed is kept. So a 40-hex commit made only
  of digits, a version such as ``3.10``, ``0755`` or ``007`` stay strings, and
  keys are always their literal text (``on``, ``yes`` and ``no`` included).
  Booleans are YAML 1.2 only (``true``/``false``); ``yes``/``no`` are text.
* Inputs are bounded before they are trusted: size in bytes, nesting depth,
  alias count and the number of nodes after alias expansion (alias bombs).
* Every problem is collected with its file, line, column and field path, and
  all of them are reported at once in :class:`DocumentError`.

Modules: :mod:`.document` (what a loaded document and its problems are),
:mod:`.loader` (bounded, schema-directed loading), :mod:`.schema_view` (which types
a location allows), :mod:`.validation` (schema violations located by line).
"""

from metallo.governance.faithful_yaml.document import (
    Document,
    DocumentError,
    Limits,
    Path,
    Problem,
    dotted,
)
from metallo.governance.faithful_yaml.loader import load, load_document
from metallo.governance.faithful_yaml.validation import schema_problems

__all__ = [
    "Document",
    "DocumentError",
    "Limits",
    "Path",
    "Problem",
    "dotted",
    "load",
    "load_document",
    "schema_problems",
]
