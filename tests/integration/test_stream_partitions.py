"""A large PostgreSQL micro-batch is read by several Spark tasks, each a range of whole transactions: what comes out
is exactly what one task writes (same records, same order), schema changes are announced once, and a batch that
fails half-written is written again whole, cut the same way."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload, records, replay

from cdckit.config import Config
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.pending import peek_bound, pending_changes
from cdckit.dialect.postgres.replication import advance_slot
from cdckit.errors import CdcKitError
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

WORKLOAD = (
    "INSERT INTO public.accounts SELECT g, 'a' || g FROM generate_series(1, 6) g",
    "INSERT INTO public.moves SELECT g, g * 10 FROM generate_series(1, 4) g",
    "UPDATE public.accounts SET name = 'renamed' WHERE id <= 3",
    "BEGIN; INSERT INTO public.moves VALUES (5, 50); UPDATE public.accounts SET id = 60 WHERE id = 6; COMMIT",
    "DELETE FROM public.moves WHERE id = 2",
    "ALTER TABLE public.accounts ADD COLUMN tier integer",
    "INSERT INTO public.accounts VALUES (7, 'after the change', 2), (8, 'and another', 3)",
    "UPDATE public.accounts SET tier = 1 WHERE tier IS NULL",
    "INSERT INTO public.moves SELECT g, g FROM generate_series(6, 12) g",
    "DELETE FROM public.accounts WHERE id = 1",
)
TOPICS = ("it.public.accounts", "it.public.moves", "it", "it.transaction")


def _config(postgres: Any, database: str, workdir: Path, name: str, parts: int, **extra: str) -> Config:
    return make_config(postgres, database, workdir / name, **{
        "slot.name": f"slot_{name}_{database}", "publication.name": f"pub_{name}_{database}",
        "snapshot.mode": "no_data", "include.schema.changes": "true", "provide.transaction.metadata": "true",
        "cdckit.stream.partitions": str(parts), "cdckit.stream.partition.min.events": "1", **extra})


def _comparable(config: Config, topic: str) -> list[Any]:
    """A topic's records of the second micro-batch in file order, without the time each was formatted at (a
    schema change record's source carries that time too)."""
    found = []
    folder = Path(config.str("cdckit.output.path")) / topic
    for path in sorted(folder.glob("stream-000000000001*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            value = payload(record["value"])
            if isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "ts_ms"}
                if topic == "it":
                    value["source"] = {k: v for k, v in value["source"].items() if k != "ts_ms"}
            found.append((record["key"], value))
    return found


def _moves_backlog(postgres: Any, spark: Any, database: str, workdir: Path, name: str,
                   transactions: int) -> dict[str, str]:
    """A stream of ``public.moves`` cut into 2 partitions, with a backlog of ``transactions`` transactions of 3
    inserts (ids 10 to 12, 20 to 22, ...); returns its connector properties."""
    execute(postgres.dsn(database), "CREATE TABLE public.moves (id integer PRIMARY KEY, amount integer)")
    config = _config(postgres, database, workdir, name, 2)
    run_snapshot(spark, config, data=False)
    execute(postgres.dsn(database), *(
        f"INSERT INTO public.moves SELECT g, g FROM generate_series({i * 10}, {i * 10 + 2}) g"
        for i in range(1, transactions + 1)))
    return config.as_properties(include_secrets=True)


def _structure(metadata: dict[str, Any]) -> tuple[str, int]:
    return metadata["schemaId"], metadata["lineage"]["tableVersion"]


@pytest.mark.parametrize("message_format", ["debezium", "qlik"])
def test_a_batch_cut_into_partitions_writes_what_one_partition_writes(
        postgres: Any, spark: Any, database: str, workdir: Path, message_format: str) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, name text)",
            "CREATE TABLE public.moves (id integer PRIMARY KEY, amount integer)")
    # Qlik messages carry structures and transactions themselves, not as Debezium's extra records
    extra = {"cdckit.message.format": message_format, "include.schema.changes": "false",
             "provide.transaction.metadata": "false"} if message_format == "qlik" else {}
    whole = _config(postgres, database, workdir, "whole", 1, **extra)
    parts = _config(postgres, database, workdir, "parts", 3, **extra)
    for config in (whole, parts):  # both slots exist before the changes
        run_snapshot(spark, config, data=False)
    # a first batch, so that the next one starts at the same commit for both (a stream's very first transaction
    # names the slot's start as the commit before it, and the two slots started apart)
    execute(dsn, "INSERT INTO public.moves VALUES (0, 0)")
    for config in (whole, parts):
        run_stream(spark, config)
    execute(dsn, *WORKLOAD)
    for config in (whole, parts):
        run_stream(spark, config)

    files = sorted(p.name for p in (workdir / "parts" / "out" / "it.public.accounts").glob("stream-*.jsonl"))
    assert len(files) >= 2 and all(name.startswith("stream-000000000001-") for name in files), files
    assert len(list((workdir / "whole" / "out" / "it.public.accounts").glob("stream-*.jsonl"))) == 1
    topics = sorted(p.name for p in (workdir / "whole" / "out").iterdir())
    assert topics == sorted(p.name for p in (workdir / "parts" / "out").iterdir())
    if message_format == "debezium":
        assert set(TOPICS) <= set(topics)
    for topic in topics:
        cut, one = _comparable(parts, topic), _comparable(whole, topic)
        if message_format == "qlik":
            # Qlik metadata messages precede a table's data in every partition (as in every batch); their
            # structures are the ones the single task announced, the data messages are the same
            assert {_structure(v) for k, v in cut if k is None} == {_structure(v) for k, v in one if k is None}
            cut, one = [(k, v) for k, v in cut if k is not None], [(k, v) for k, v in one if k is not None]
        assert cut == one, topic
    if message_format == "debezium":
        alters = [payload(r["value"])["tableChanges"][0]["type"] for r in records(parts, "it")]
        assert alters == ["ALTER"], alters  # announced by the partition that holds it, not again by the next
        assert replay(parts, "it.public.accounts") == {
            (i,): {"id": i, "name": n, "tier": t}
            for i, n, t in fetch(dsn, "SELECT id, name, tier FROM public.accounts")}


def test_a_batch_that_fails_half_written_is_written_again_whole(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, name text)",
            "CREATE TABLE public.moves (id integer PRIMARY KEY, amount integer)")
    config = _config(postgres, database, workdir, "fails", 2)
    run_snapshot(spark, config, data=False)
    execute(dsn, *WORKLOAD)
    folder = workdir / "fails" / "out" / "it.public.moves"
    # the second partition's file cannot be put in place (a folder holds its name), after the first's was
    trap = folder / "stream-000000000000-00001.jsonl"
    trap.mkdir(parents=True)
    with pytest.raises(CdcKitError) as failure:
        run_stream(spark, config)
    assert "Is a directory" in str(failure.value) and "written again, whole" in str(failure.value)
    trap.rmdir()
    run_stream(spark, config)  # the batch comes again, cut at the same transactions
    moves = [payload(r["value"]) for r in records(config, "it.public.moves")]
    assert len([m for m in moves if m is not None]) == 4 + 1 + 1 + 7  # each change once
    assert replay(config, "it.public.moves") == {
        (i,): {"id": i, "amount": a} for i, a in fetch(dsn, "SELECT id, amount FROM public.moves")}


def test_pending_changes_cut_at_transaction_ends_into_parts_of_about_equal_changes(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.moves (id integer PRIMARY KEY, amount integer)")
    config = _config(postgres, database, workdir, "cuts", 4)
    run_snapshot(spark, config, data=False)
    execute(dsn, *(f"INSERT INTO public.moves VALUES ({i}, {i})" for i in range(1, 9)),
            "INSERT INTO public.moves SELECT g, g FROM generate_series(100, 139) g")
    options = config.as_properties(include_secrets=True)
    slot = options["slot.name"]
    commits = [parse_lsn(lsn) for lsn, in fetch(dsn, (
        f"SELECT lsn::text FROM pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, 'proto_version', '1', "
        f"'publication_names', '{options['publication.name']}') WHERE get_byte(data, 0) = ascii('C')"))]
    assert len(commits) == 9
    with closing(connect(options)) as conn:
        start = parse_lsn(fetch(dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                     f"WHERE slot_name = '{slot}'")[0][0])
        eight = pending_changes(conn, options, start, 8, None, parts=4, min_events_per_part=1)
        assert (eight.end_lsn, eight.events) == (commits[7], 8)
        assert eight.splits == (commits[1], commits[3], commits[5])  # 2 changes in each part
        assert pending_changes(conn, options, start, 8, None, parts=4, min_events_per_part=3).splits == (
            commits[3],)  # only as many parts as keep 3 changes each: 2
        assert pending_changes(conn, options, start, 8, None, parts=1).splits == ()
        big = pending_changes(conn, options, commits[7], 8, None, parts=4, min_events_per_part=1)
        assert (big.end_lsn, big.events, big.splits) == (commits[8], 40, ())  # one transaction is never cut
        # one peek plans the batches after the first too, cut as a peek from their own start would cut them;
        # the last (the 40-row transaction) ends the peek, so it is left to a later one (more may follow it)
        chained = pending_changes(conn, options, start, 2, None, parts=2, min_events_per_part=1, ahead=10)
        assert (chained.end_lsn, chained.splits) == (commits[1], (commits[0],))
        assert chained.following == ((commits[3], (commits[2],)), (commits[5], (commits[4],)),
                                     (commits[7], (commits[6],)))
        for low, (high, cuts) in zip((commits[1], commits[3], commits[5]), chained.following, strict=True):
            alone = pending_changes(conn, options, low, 2, None, parts=2, min_events_per_part=1)
            assert (alone.end_lsn, alone.splits) == (high, cuts)
        assert pending_changes(conn, options, start, 2, None, ahead=1).following == ((commits[3], ()),)
        assert pending_changes(conn, options, start, 8, None).following == ()



@pytest.mark.parametrize("available_now", [False, True])
def test_the_next_batches_are_planned_on_a_copy_of_the_slot_and_cut_as_their_own_peeks_would(
        postgres: Any, spark: Any, database: str, workdir: Path, monkeypatch: pytest.MonkeyPatch,
        available_now: bool) -> None:
    """While a backlog lasts, latestOffset peeks the slot for the first batch alone; the batches after it are
    planned, three in one peek, on a copy of the slot while the batch before them is taken. Each batch ends, and
    is cut, where a peek from its own start would end and cut it. The batch that reaches the backlog's end comes
    from a peek of the slot (more may be committed by then); up to the available-now target, where no more can
    come, the copy's plan stands, and nothing is peeked after it."""
    from cdckit.dialect.postgres import plan_ahead
    from cdckit.spark.compat import ReadMaxRows
    from cdckit.spark.sources import postgres_stream

    dsn = postgres.dsn(database)
    options = _moves_backlog(postgres, spark, database, workdir, "ahead", 14)
    peeks = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        peeks.append(("slot" if args[1]["slot.name"] == options["slot.name"] else "copy", args[2]))
        return pending_changes(*args, **kwargs)

    slot = options["slot.name"]
    first = {"lsn": fetch(dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                               f"WHERE slot_name = '{slot}'")[0][0]}
    expected, low = [], parse_lsn(first["lsn"])
    with closing(connect(options)) as conn:  # each batch from a peek of its own (the slot still at the first start)
        while (alone := pending_changes(conn, options, low, 9, None, parts=2, min_events_per_part=1)).end_lsn:
            assert alone.end_lsn is not None
            expected.append({"lsn": format_lsn(alone.end_lsn), "splits": [format_lsn(cut) for cut in alone.splits]})
            low = alone.end_lsn
    assert len(expected) == 5  # 42 changes in batches of 3 transactions (9 changes), the last of 2

    monkeypatch.setattr(postgres_stream, "pending_changes", counting)
    monkeypatch.setattr(plan_ahead, "pending_changes", counting)
    reader = postgres_stream.PostgresChangeStreamReader(options)
    start = reader.initialOffset()
    assert start == first
    if available_now:
        reader.prepareForTriggerAvailableNow()
    ends = []
    for _ in range(6):
        end = reader.latestOffset(start, ReadMaxRows(9))
        if end == start:
            break
        ends.append(end)
        reader.commit(end)
        start = end
    reader.stop()
    assert ends == expected
    # the slot's peek planned the first batch; a copy's the next three when the first was taken (the fifth ends
    # the backlog, so it was left), and a copy's the fifth when the fourth was taken. Streaming, the slot's own
    # peek found the fifth again, and the last found nothing; up to the available-now target, the copy's stood
    at = [parse_lsn(offset["lsn"]) for offset in (first, *ends)]
    assert peeks == [("slot", at[0]), ("copy", at[1]), ("copy", at[4]),
                     *([] if available_now else [("slot", at[4]), ("slot", at[5])])]
    assert reader._plan_ahead.planned == 2
    assert fetch(dsn, "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'cdckit_plan_%'") == []
    assert fetch(dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{slot}'") == [
        (ends[-1]["lsn"],)]  # the copies' moves left the slot where the reader confirmed it


def test_a_later_partition_peeks_a_copy_of_the_slot_and_takes_turns_when_none_can_be_made(
        postgres: Any, spark: Any, database: str, workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The partitions of a batch decode at once: a later partition peeks a temporary copy of the slot, so it reads
    its range while another session holds the slot, and drops the copy after. Where no copy can be made (every
    replication slot in use) it says why once in the log and peeks the slot itself, taking its turn: the records
    are the same."""
    import psycopg2.extras

    from cdckit.spark.compat import ReadMaxRows
    from cdckit.spark.sources.postgres_stream import PostgresChangeStreamReader
    from cdckit.spark.sources.postgres_stream_partition import LsnRange

    dsn = postgres.dsn(database)
    options = _moves_backlog(postgres, spark, database, workdir, "copies", 6)
    reader = PostgresChangeStreamReader(options)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(100))
    first, later = reader.partitions(start, end)
    assert isinstance(later, LsnRange) and later.start > first.start

    def later_records() -> list[Any]:
        return [(key, json.loads(value)["payload"]["after"]) for batch in reader.read(later)
                for topic, key, value in zip(*(batch.column(name).to_pylist() for name in ("topic", "key", "value")),
                                             strict=True) if topic == "it.public.moves"]

    holder = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:  # another session holds the slot, as the first partition does while it decodes
        with holder.cursor() as cur:
            cur.start_replication(slot_name=options["slot.name"], decode=False, options={
                "proto_version": "1", "publication_names": options["publication.name"]})
            held = f"SELECT active FROM pg_replication_slots WHERE slot_name = '{options['slot.name']}'"
            assert fetch(dsn, held) == [(True,)]
            copied = later_records()
            assert fetch(dsn, held) == [(True,)]  # read while the slot was held, not once it was let go
    finally:
        holder.close()
    assert [after["id"] for _key, after in copied] == [g for i in range(4, 7) for g in range(i * 10, i * 10 + 3)]
    assert fetch(dsn, "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'cdckit_peek_%'") == []

    free = 50 - fetch(dsn, "SELECT count(*) FROM pg_replication_slots")[0][0]  # the lab's max_replication_slots
    fillers = [f"filler_{database}_{n}" for n in range(free)]
    try:
        execute(dsn, *(f"SELECT pg_create_physical_replication_slot('{name}')" for name in fillers))
        with caplog.at_level("INFO", logger="cdckit"):
            assert later_records() == copied
    finally:
        execute(dsn, *(f"SELECT pg_drop_replication_slot('{name}')" for name in fillers))
    assert "take turns to peek the slot" in caplog.text and "replication slots are in use" in caplog.text
    reader.stop()


def test_planning_ahead_turns_itself_off_when_the_slot_cannot_be_copied(
        postgres: Any, database: str, caplog: pytest.LogCaptureFixture) -> None:
    """Planning ahead is a shortcut: where the slot cannot be copied, it says why once in the log, plans nothing,
    and latestOffset goes on peeking the slot itself."""
    from cdckit.dialect.postgres.plan_ahead import PlanAhead

    options = {**postgres.connector_properties(database), "slot.name": "no_such_slot"}
    planner = PlanAhead(options)
    with caplog.at_level("INFO", logger="cdckit"):
        planner.start(0, 10, None, 1, 1, 100, 0)
        assert planner.take(0, 10, None) is None
    planner.close()
    assert not planner.enabled and planner.planned == 0
    assert "no_such_slot" in caplog.text and "planned as each is asked for" in caplog.text
    planner.start(0, 10, None, 1, 1, 100, 0)  # off: it starts nothing
    assert planner.take(0, 10, None) is None


def test_the_counting_peek_is_bounded_by_the_workloads_own_messages_per_change(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    """latestOffset's peek decodes 3 messages a change until it has seen the workload: with 500-row transactions
    the next bound is some 1.2 a change, so the server decodes less than half as much for the same batch; a
    transaction larger than the bound still comes whole; one-row transactions keep 3 a change."""
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.moves (id integer PRIMARY KEY, amount integer)")
    config = _config(postgres, database, workdir, "bound", 1)
    run_snapshot(spark, config, data=False)
    execute(dsn, *(f"INSERT INTO public.moves SELECT g, g FROM generate_series({start}, {start + 499}) g"
                   for start in range(1, 3001, 500)),  # 6 transactions of 500 rows
            "INSERT INTO public.moves SELECT g, g FROM generate_series(10001, 14000) g",  # one of 4,000
            *(f"INSERT INTO public.moves VALUES ({i}, {i})" for i in range(20001, 20031)))  # 30 of one row
    options = config.as_properties(include_secrets=True)
    slot = options["slot.name"]
    with closing(connect(options)) as conn:
        start = parse_lsn(fetch(dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                     f"WHERE slot_name = '{slot}'")[0][0])
        first = pending_changes(conn, options, start, 1200, None)
        assert first.events == 1000  # two whole transactions of 500
        ratio = first.messages_per_change()
        assert ratio is not None and 1.0 < ratio < 1.01
        bounded = pending_changes(conn, options, start, 1200, None, bound=peek_bound(1200, ratio))
        assert (bounded.end_lsn, bounded.events) == (first.end_lsn, first.events)
        assert bounded.messages < first.messages / 2  # the server decoded less than half as much
        # after the six 500-row transactions comes one of 4,000: larger than the batch and the bound, it is whole
        after = pending_changes(conn, options, start, 3000, None, bound=peek_bound(3000, ratio))
        assert after.events == 3000
        # the slot still stands at the start (not advanced, as the reader does): the peek grows its bound to
        # reach past what it has to skip, rather than report nothing pending
        big = pending_changes(conn, options, after.end_lsn, 100, None, bound=peek_bound(100, ratio))
        assert big.events == 4000 and big.messages >= 3000 + 4000
        assert big.end_lsn is not None
        advance_slot(conn, slot, big.end_lsn)
        ones = pending_changes(conn, options, big.end_lsn, 10, None, bound=peek_bound(10, ratio))
        assert ones.events >= 1  # a bound from large transactions admits fewer one-row ones, never none
        one_ratio = ones.messages_per_change()
        assert one_ratio is not None and one_ratio == pytest.approx(3.0, rel=0.05)
        assert peek_bound(10, one_ratio) == peek_bound(10, None)
        full = pending_changes(conn, options, big.end_lsn, 10, None, bound=peek_bound(10, one_ratio))
        assert full.events == 10
