"""Use cases of Site Coordination and the ports they need (Protocols)."""
