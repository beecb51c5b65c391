"""The chaos suite: streamflow on Kafka under process kills, frozen processes, broker restarts,
a lost cluster node and poison records, checked by an independent history checker.

``python -m bench.chaos --short`` runs one fault of each kind in a few minutes (CI runs it);
``python -m bench.chaos`` runs the full suite (docs/reliability.md has its figures).
"""
