"""A single-node KRaft broker that authenticates every client with SASL/SCRAM-SHA-256 and
authorizes every request with ACLs (``StandardAuthorizer``, nothing allowed without an ACL):
what the least-privilege tests of ``streamflow acls`` run against. Its super user ``admin``
(created when the storage is formatted) makes the other users and grants their ACLs.

With :class:`BrokerTls` the client listener is SASL over TLS (``SASL_SSL``): the broker
presents a certificate from a PEM key store and :meth:`SecuredKafkaBroker.client_config` names
the CA that signed it (``ssl.ca.location``).

The controller listener stays plain text on loopback, its principal (``ANONYMOUS``) a super
user, as a single node's broker talks to its own controller there: a test broker, not a
production layout.
"""

from __future__ import annotations

import importlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamflow.kafka.acls import Acl
from streamflow.testing.broker import LocalKafkaBroker

ADMIN = "admin"
MECHANISM = "SCRAM-SHA-256"


@dataclass(frozen=True, slots=True)
class BrokerTls:
    """The broker's TLS: ``keystore``, a PEM file with its private key (PKCS#8, unencrypted)
    then its certificate chain; ``ca``, the PEM bundle clients verify it with."""

    keystore: Path
    ca: Path


class SecuredKafkaBroker(LocalKafkaBroker):
    """:class:`LocalKafkaBroker` behind SASL/SCRAM and ACLs (see the module's docstring)."""

    def __init__(self, work_dir: Path | str | None = None, *, tls: BrokerTls | None = None) -> None:
        super().__init__(work_dir)
        self.admin_password = secrets.token_urlsafe(18)
        self.tls = tls
        self.protocol = "SASL_PLAINTEXT" if tls is None else "SASL_SSL"

    def properties(self, port: int, controller_port: int) -> dict[str, str]:
        """The plain broker's properties with a SASL listener and the authorizer."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.admin_password}";'
        )
        name = self.protocol
        secured = super().properties(port, controller_port) | {
            "listeners": f"{name}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"{name}://127.0.0.1:{port}",
            "listener.security.protocol.map": f"{name}:{name},CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": name,
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.{name.lower()}.scram-sha-256.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }
        if self.tls is not None:
            secured |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.tls.keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.tls.ca),
            }
        return secured

    def format_args(self) -> list[str]:
        """Format with the super user's SCRAM credentials."""
        return [
            "--standalone",
            "--add-scram",
            f"{MECHANISM}=[name={ADMIN},password={self.admin_password}]",
        ]

    def client_config(self, user: str = ADMIN, password: str | None = None) -> dict[str, str]:
        """The librdkafka properties of ``user`` (default: the super user)."""
        config = {
            "security.protocol": self.protocol,
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.admin_password if password is None else password,
        }
        if self.tls is not None:
            config["ssl.ca.location"] = str(self.tls.ca)
        return config

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
