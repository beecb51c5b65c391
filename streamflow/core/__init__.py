"""The pure core of streamflow: identifiers, specs, retry policies, events, commands, the
projection and the deciders. Standard library only; no clock, randomness or I/O."""
