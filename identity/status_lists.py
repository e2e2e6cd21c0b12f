"""The revocation status list the operator publishes, and where it is served.

The status list credential is kept in `identity_status_lists` and published as
`$ACCORD_HOME/credentials/status-list.json`; verifiers read it from there. Its URL, the
`statusListCredential` of every credential issued, is `status_list_url(public_url)`, where the
service serves it (`GET /credentials/status/revocation`) for any verifier to follow. One
bitstring backs every URL a credential was ever issued with (an earlier public URL, or the
`urn:accord:status:…` of credentials issued before lists were served): a revocation re-signs
the list under each of them, so older credentials keep verifying.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Field, SQLModel

from accord.identity.errors import RegistryError
from accord.identity.status import StatusList, status_list_credential
from accord.ledger.database import create_tables, db_reason
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer

STATUS_LIST_FILE = "status-list.json"
STATUS_LIST_PATH = "/credentials/status/revocation"
"""Where the service serves the revocation list, below its public URL."""


def status_list_url(public_url: str) -> str:
    """The URL of the revocation status list credential of the service at `public_url`."""
    return public_url.rstrip("/") + STATUS_LIST_PATH


class PublishedStatusList(SQLModel, table=True):
    """The current signed status list credential at `url`."""

    __tablename__ = "identity_status_lists"

    url: str = Field(primary_key=True)
    document: str


_STATUS_LISTS = PublishedStatusList.__table__  # type: ignore[attr-defined]


def operator_key(ledger: Ledger) -> Ed25519Signer:
    """The operator's Ed25519 key, which signs credentials and status lists.

    Raises RegistryError when the operator signs with another kind of key.
    """
    operator = ledger.operator
    if not isinstance(operator, Ed25519Signer):
        raise RegistryError("issuing credentials needs the operator's Ed25519 key")
    return operator


def write_document(folder: Path, name: str, document: dict[str, Any]) -> Path:
    """Write `document` as `folder/name` (indented JSON), replacing any earlier file whole."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)
    return path


class StatusLists:
    """The operator's published status list credentials, one per URL, all over one bitstring.

    `url` is the current URL (new credentials name it); `folder` receives `status-list.json`.
    Raises RegistryError when its table cannot be prepared.
    """

    def __init__(self, ledger: Ledger, url: str, folder: Path) -> None:
        self.ledger = ledger
        self.engine: Engine = ledger.store.engine
        self.url = url
        self.folder = folder
        try:
            create_tables(self.engine, [_STATUS_LISTS])
        except SQLAlchemyError as exc:
            raise RegistryError(f"cannot prepare the status list table: {db_reason(exc)}") from exc

    def status_lookup(self, url: str) -> dict[str, Any]:
        """The published status list credential at `url`. Raises KeyError when there is none."""
        with self.engine.begin() as connection:
            text = connection.execute(
                select(_STATUS_LISTS.c.document).where(_STATUS_LISTS.c.url == url)
            ).scalar_one_or_none()
        if text is None:
            raise KeyError(f"no status list {url}")
        value: dict[str, Any] = json.loads(text)
        return value

    def status_list_at(self, path: str) -> dict[str, Any]:
        """The published status list credential whose URL has the path `path` (the service
        serves it there whatever host it is reached by), the current URL's first.

        Raises KeyError when none has that path.
        """
        for url in [self.url, *self.published_urls()]:
            if urlsplit(url).path == path:
                try:
                    return self.status_lookup(url)
                except KeyError:
                    continue
        raise KeyError(f"no status list at {path}")

    def published_urls(self) -> list[str]:
        with self.engine.begin() as connection:
            return list(
                connection.execute(select(_STATUS_LISTS.c.url).order_by(_STATUS_LISTS.c.url))
                .scalars()
                .all()
            )

    def current(self, now: datetime) -> StatusList:
        """The one bitstring: every published list's bits together (they are kept equal)."""
        self.ensure(now)
        return self.combined()

    def combined(self) -> StatusList:
        combined = bytearray(StatusList.empty().bits)
        for url in self.published_urls():
            document = self.status_lookup(url)
            bits = StatusList.decode(document["credentialSubject"]["encodedList"]).bits
            if len(bits) > len(combined):
                combined.extend(bytes(len(bits) - len(combined)))
            for position, byte in enumerate(bits):
                combined[position] |= byte
        return StatusList(bytes(combined))

    def ensure(self, now: datetime) -> None:
        """Publish the list under the current URL if it is not there yet."""
        try:
            self.status_lookup(self.url)
        except KeyError:
            self.publish(self.combined(), now)

    def publish(self, status_list: StatusList, now: datetime) -> None:
        """Sign `status_list` under the current URL and every URL already published."""
        urls = dict.fromkeys([self.url, *self.published_urls()])
        for url in urls:
            document = status_list_credential(operator_key(self.ledger), url, status_list, now=now)
            text = json.dumps(document, sort_keys=True)
            with self.engine.begin() as connection:
                changed = connection.execute(
                    update(_STATUS_LISTS).where(_STATUS_LISTS.c.url == url).values(document=text)
                ).rowcount
                if changed == 0:
                    connection.execute(insert(_STATUS_LISTS).values(url=url, document=text))
            if url == self.url:
                write_document(self.folder, STATUS_LIST_FILE, document)
