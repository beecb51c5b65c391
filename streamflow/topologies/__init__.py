"""The Kafka topologies: journal, processor, worker and timer, one module each."""
