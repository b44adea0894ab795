"""The HTTPS Site edge (seed 004 §4B; docs/site-edge.md)."""
