"""Build routes across an outage: a registration its instance could not refresh because the
cluster was out of reach is not taken for a dead route once the journal hears from the cluster
again; a route that stays silent after that expires as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streamflow.kafka import admin
from streamflow.kafka.manifest import load_manifest
from streamflow.topologies.registry import DEFAULT_TTL, Advertiser, RouteTable


def test_an_outage_is_added_to_the_life_of_every_route_for_one_ttl(kafka):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=1)
    advertiser = Advertiser(
        kafka, group=f"{kafka.namespace}.processor._unpinned", instance="0", role="processor",
        compatibility=None,
    )  # fmt: skip
    routes = RouteTable(kafka)
    try:
        now = datetime.now(UTC)
        # The processor's last heartbeat before a 30 s outage, read just after it.
        advertiser.beat(now - DEFAULT_TTL - timedelta(seconds=5), force=True)
        assert not routes.has_route(None, now), "a heartbeat older than its ttl is not live"

        routes.excuse(timedelta(seconds=30), now)
        assert routes.has_route(None, now)
        assert routes.has_route(None, now + DEFAULT_TTL - timedelta(seconds=1))
        # One ttl after the cluster came back, a route that never heartbeated again is gone.
        assert not routes.has_route(None, now + DEFAULT_TTL + timedelta(seconds=1))
        assert not routes.has_route(None, now), "the excuse is spent"
    finally:
        routes.close()
        advertiser.withdraw()
