"""Pure rules of Site Coordination (seed 004 §4A–4C, seed 001): no I/O here."""
