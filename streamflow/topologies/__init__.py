"""The Kafka topologies: journal, processor, worker, timer, hooks and observers, one module each,
and the exactly-once loop, build registry and local state they share."""
