"""A captured table that the publication leaves out, where cdckit may not change the publication
(``publication.autocreate.mode=disabled``): the message gives the statement that adds it, and the other ways out."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, make_config

from cdckit.dialect.postgres.catalog import load_table
from cdckit.dialect.postgres.replication import ensure_publication
from cdckit.errors import SourcePreconditionError

pytestmark = pytest.mark.postgres


def test_a_table_missing_from_the_publication_is_named_with_the_fixes(postgres: Any, database: str,
                                                                       workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id int PRIMARY KEY)",
            "CREATE TABLE public.customers (id int PRIMARY KEY)", 'CREATE TABLE public."Returns" (id int PRIMARY KEY)',
            f"CREATE PUBLICATION pub_{database} FOR TABLE public.orders")
    config = make_config(postgres, database, workdir, **{"publication.autocreate.mode": "disabled",
                                                         "table.include.list": "public.orders,public.customers"})
    options = config.as_properties(include_secrets=True)
    with closing(psycopg2.connect(dsn)) as conn:
        # as discovered from table.include.list and a table whose name needs quotes
        tables = [load_table(conn, "public", name, options) for name in ("orders", "customers", "Returns")]
        with pytest.raises(SourcePreconditionError) as raised:
            ensure_publication(conn, options, tables)
    message = str(raised.value)
    assert f"publication 'pub_{database}' does not include public.customers, public.Returns" in message
    assert f'ALTER PUBLICATION pub_{database} ADD TABLE public.customers, public."Returns"' in message
    assert "publication.autocreate.mode=filtered" in message
    assert "narrow table.include.list" in message and "table.exclude.list" in message
