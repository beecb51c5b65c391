"""Watching committed history without touching it, on either backend: the observer protocol and
fan-out, Prometheus metrics with bounded labels, and the HTTP endpoint that serves them."""
