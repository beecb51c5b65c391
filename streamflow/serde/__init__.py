"""The wire contract: message types, the Avro single-object codec and record mappings."""
