"""The forms cdckit picks by the PostgreSQL server's version (tests/integration/test_postgres_versions.py runs them
against a real server)."""

from __future__ import annotations

import pytest

from cdckit.dialect.postgres.pending import peek_options
from cdckit.dialect.postgres.replication import create_slot_command
from cdckit.dialect.postgres.server_version import ServerVersion, check_supported
from cdckit.errors import SourcePreconditionError


@pytest.mark.parametrize(("number", "text"), [(100023, "10.23"), (150004, "15.4"), (180000, "18.0"),
                                              (90624, "9.6.24")])
def test_version_reads_as_the_server_writes_it(number: int, text: str) -> None:
    assert str(ServerVersion(number)) == text


def test_servers_before_10_are_refused_naming_their_version() -> None:
    check_supported(ServerVersion(100000), "db:5432")
    with pytest.raises(SourcePreconditionError, match=r"db:5432 runs PostgreSQL 9\.6\.24, but cdckit needs "
                                                      r"PostgreSQL 10 or later"):
        check_supported(ServerVersion(90624), "db:5432")


def test_slot_command_takes_options_in_parentheses_from_15_and_the_keyword_before() -> None:
    assert create_slot_command('a"b', "pgoutput", ServerVersion(150000)) == \
        """CREATE_REPLICATION_SLOT "a""b" LOGICAL pgoutput (SNAPSHOT 'export')"""
    assert create_slot_command('a"b', "pgoutput", ServerVersion(140011)) == \
        """CREATE_REPLICATION_SLOT "a""b" LOGICAL pgoutput EXPORT_SNAPSHOT"""


def test_peek_asks_for_logical_decoding_messages_only_where_pgoutput_knows_the_option() -> None:
    options = {"publication.name": "pub"}
    assert peek_options(options, ServerVersion(140000)) == ["proto_version", "1", "publication_names", "pub",
                                                            "messages", "true"]
    assert peek_options(options, ServerVersion(130012)) == ["proto_version", "1", "publication_names", "pub"]
