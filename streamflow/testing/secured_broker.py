"""A single-node KRaft broker that authenticates every client with SASL/SCRAM-SHA-256 and
authorizes every request with ACLs (``StandardAuthorizer``, nothing allowed without an ACL):
what the least-privilege tests of ``streamflow acls`` run against. Its super user ``admin``
(created when the storage is formatted) makes the other users and grants their ACLs.

The controller listener stays plain text on loopback, its principal (``ANONYMOUS``) a super
user, as a single node's broker talks to its own controller there: a test broker, not a
production layout.
"""

from __future__ import annotations

import importlib
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streamflow.kafka.acls import Acl
from streamflow.testing.broker import LocalKafkaBroker

ADMIN = "admin"
MECHANISM = "SCRAM-SHA-256"


class SecuredKafkaBroker(LocalKafkaBroker):
    """:class:`LocalKafkaBroker` behind SASL/SCRAM and ACLs (see the module's docstring)."""

    def __init__(self, work_dir: Path | str | None = None) -> None:
        super().__init__(work_dir)
        self.admin_password = secrets.token_urlsafe(18)

    def properties(self, port: int, controller_port: int) -> dict[str, str]:
        """The plain broker's properties with a SASL listener and the authorizer."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.admin_password}";'
        )
        return super().properties(port, controller_port) | {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_args(self) -> list[str]:
        """Format with the super user's SCRAM credentials."""
        return [
            "--standalone",
            "--add-scram",
            f"{MECHANISM}=[name={ADMIN},password={self.admin_password}]",
        ]

    def client_config(self, user: str = ADMIN, password: str | None = None) -> dict[str, str]:
        """The librdkafka properties of ``user`` (default: the super user)."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.admin_password if password is None else password,
        }

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, **self.client_config()})

    def add_user(self, user: str) -> str:
        """Create SCRAM credentials for ``user``; its (random) password."""
        kafka: Any = importlib.import_module("confluent_kafka.admin")  # its stubs re-export none
        password = secrets.token_urlsafe(18)
        info = kafka.ScramCredentialInfo(kafka.ScramMechanism.SCRAM_SHA_256, 4096)
        upsert = kafka.UserScramCredentialUpsertion(user, info, password.encode())
        admin = self._admin()  # held until the futures resolve: its handle serves them
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        return password

    def grant(self, user: str, acls: Iterable[Acl]) -> None:
        """Allow ``user`` exactly ``acls``."""
        bindings = [acl.binding(f"User:{user}") for acl in acls]
        if not bindings:
            return
        admin = self._admin()
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
