"""Migration scripts (a package so that they ship with the wheel; Alembic skips this file)."""
