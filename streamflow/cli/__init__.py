"""The ``streamflow`` command line."""
