"""Where the service keeps the items of bank exams (`accord.identity.item_banks`): a table of
its database, off the log."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Column, Integer, String, Text, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Field, SQLModel

from accord.identity.errors import SkillError
from accord.identity.item_banks import BankItem
from accord.ledger.canonical import canonical_json
from accord.ledger.database import create_tables, db_reason


class SkillBankItem(SQLModel, table=True):
    """One item of a declared skill's bank, kept off the log."""

    __tablename__ = "identity_skill_bank_items"

    skill_id: str = Field(sa_column=Column(String(64), primary_key=True))
    position: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    item: str = Field(sa_column=Column(Text, nullable=False))


_BANK = SkillBankItem.__table__  # type: ignore[attr-defined]


class BankStore:
    """The banks of declared skills, by skill id, in the service's database.

    Raises SkillError when its table cannot be prepared."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        try:
            create_tables(engine, [_BANK])
        except SQLAlchemyError as exc:
            raise SkillError(f"cannot prepare the bank table: {db_reason(exc)}") from exc

    def put(self, skill_id: str, items: Sequence[BankItem]) -> None:
        """Keep `items` as `skill_id`'s bank (once: a skill id names one bank)."""
        rows = [
            {"skill_id": skill_id, "position": i, "item": canonical_json(dict(item)).decode()}
            for i, item in enumerate(items)
        ]
        with self.engine.begin() as connection:
            if connection.execute(
                select(_BANK.c.position).where(_BANK.c.skill_id == skill_id).limit(1)
            ).first():
                return
            connection.execute(_BANK.insert(), rows)

    def get(self, skill_id: str) -> list[BankItem] | None:
        """`skill_id`'s bank, or None when this service holds none."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(_BANK.c.item).where(_BANK.c.skill_id == skill_id).order_by(_BANK.c.position)
            ).all()
        return [json.loads(row[0]) for row in rows] or None
