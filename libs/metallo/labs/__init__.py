"""Lab software that stands in for systems no test machine can run (never imported by services)."""
