from metallo.persistence.migrations import run_env
from tests.integration.ledger.tables import metadata

run_env(metadata)
