"""What a processor and a worker share: the builds they serve and the route they advertise.

A processor instance and a worker instance both run user code (a ``FlowRuntime``) for the builds
their compatibility serves (:func:`served_builds`), in the consumer group of its current build
(the unpinned group without one). Before they serve, they make sure the tasks topic of every
served build exists; while they run, they advertise their route on ``{ns}.builds``
(:class:`~streamflow.topologies.registry.Advertiser`); told to stop, they withdraw it (one that
fails leaves it to expire, for the successor its supervisor starts to take over). Each
has a plain producer of its own, which also parks the records it cannot process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import ClassVar

from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.kafka import admin
from streamflow.kafka.clients import Deadline, producer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.topologies.common import DeadLetters
from streamflow.topologies.options import Serving, ServingOptions
from streamflow.topologies.registry import Advertiser
from streamflow.workflow.runtime import FlowRuntime, served_pairs


def served_builds(compatibility: RuntimeBuildCompatibility | None) -> list[str | None]:
    """The builds whose runs (and step tasks) a group with ``compatibility`` serves."""
    if compatibility is None:
        return [None]
    builds: list[str | None] = list(compatibility.builds())
    if compatibility.accepts_unpinned:
        builds.append(None)
    return builds


class BuildServer:
    """One processor or worker instance (see the module docstring), serving ``runtime``.
    ``options``: its caller's keyword arguments (:class:`~streamflow.topologies.options.Serving`);
    ``group``: the name of a build's group in its role (``Names.processor_group``, say)."""

    component: ClassVar[str]
    """``processor`` or ``worker``: the role it advertises; its static member ids and its log
    lines start with it."""

    def __init__(
        self,
        settings: KafkaSettings,
        runtime: FlowRuntime,
        options: ServingOptions,
        group: Callable[[Names, str | None], str],
    ) -> None:
        serving = self._serving = Serving(**options)
        compatibility = serving.compatibility
        self._settings = settings
        self._wire = settings.wire()
        self._runtime = runtime
        self._hook_secret = serving.hook_secret
        self._compat = compatibility
        self._builds = served_builds(compatibility)
        self._build = None if compatibility is None else str(compatibility.current)
        self._names = Names(settings.namespace)
        self._group = group(self._names, self._build)
        self._instance = serving.instance
        self._clock = serving.clock
        self._producer = producer(settings)
        self._letters = DeadLetters(
            self._producer, self._names, self._wire, self.component, self._clock
        )
        self._advertiser = Advertiser(
            settings,
            group=self._group,
            instance=serving.instance,
            role=self.component,
            compatibility=compatibility,
            workflows=served_pairs(runtime) if self.component == "processor" else None,
            limited=runtime.limited_workflows() if self.component == "processor" else (),
        )
        self.ready = threading.Event()

    def _open_route(self, partitions: int) -> None:
        """Make sure the tasks topic (of ``partitions``) of every served build exists, and
        advertise the route."""
        for build in self._builds:
            admin.ensure_tasks_topic(
                self._settings, build, partitions=partitions, profile=self._serving.topic_profile
            )
        self._advertiser.beat(self._clock(), force=True)

    def _withdraw(self, budget: Deadline) -> None:
        """Withdraw the route (a registration that cannot be withdrawn expires on its own)."""
        try:
            self._advertiser.withdraw(budget.left(2.0))
        except Exception:
            logging.getLogger(f"streamflow.{self.component}").exception(
                "%s: could not withdraw the build registration", self.component
            )
