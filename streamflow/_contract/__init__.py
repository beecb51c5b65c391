"""The wire contract and topology manifests shipped with the package (links to the
repository's schemas/ and topologies/, which are the sources)."""
