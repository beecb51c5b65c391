"""Example applications shipped with streamflow (used by ``streamflow demo`` and the docs)."""
