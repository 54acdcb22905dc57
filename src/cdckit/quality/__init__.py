"""Data-quality suites for what cdckit emits (Great Expectations 1.x on Spark).

Library use, from any Spark job, on a DataFrame of records (``topic``, ``key``, ``value`` as JSON text; ``part``
and ``seq`` give the consumer order when present, as from Kafka's ``partition`` and ``offset``)::

    from cdckit.quality import check_records
    report = check_records(records_df, options={"tombstones.on.delete": "true"})
    assert report.success, report.to_markdown()
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdckit.quality.report import QualityReport, SuiteRun, run_suites, write_summaries

__all__ = ["QualityReport", "check_records", "suite_runs"]

logging.getLogger("great_expectations").setLevel(logging.WARNING)


def _ordered(records: DataFrame) -> DataFrame:
    columns = set(records.columns)
    if "partition" in columns and "part" not in columns:
        records = records.withColumnRenamed("partition", "part")
    if "offset" in columns and "seq" not in columns:
        records = records.withColumnRenamed("offset", "seq")
    if "part" not in records.columns:
        records = records.withColumn("part", F.lit(0))
    if "seq" not in records.columns:
        records = records.withColumn("seq", F.monotonically_increasing_id())
    return records.select("topic", "part", "seq", F.col("key").cast("string").alias("key"),
                          F.col("value").cast("string").alias("value"))


def suite_runs(records: DataFrame, options: Mapping[str, str] | None = None, notes: list[str] | None = None,
               catalog: tuple[DataFrame, DataFrame] | None = None) -> list[SuiteRun]:
    """The suites that apply to these records, each with the frame it validates. ``catalog`` adds source column
    types and the tables with a key (see ``types.source_columns_from_catalog``) to what the records give."""
    from cdckit.quality import envelopes

    return _suite_runs(envelopes.classify(_ordered(records)), options or {},
                       notes if notes is not None else [], catalog)


def _suite_runs(classified: DataFrame, options: Mapping[str, str], notes: list[str],
                catalog: tuple[DataFrame, DataFrame] | None, kinds: Mapping[str, int] | None = None
                ) -> list[SuiteRun]:
    """The suites and their frames. With ``kinds`` (the records counted per kind), a suite with nothing of its
    kind to judge gets no frame (0 rows checked, and no Spark job): transactions without transaction records, Qlik
    without Qlik messages, type mappings and decimal scales without source column types (from schema change
    records or the catalog)."""
    from cdckit.quality import envelopes, qlik, types

    def has(kind: str) -> bool:
        return kinds is None or kinds.get(kind, 0) > 0

    columns, keyed = catalog if catalog is not None else (None, None)
    envelope_rows = envelopes.envelope_frame(classified, keyed)
    sources = types.source_columns_from_records(classified) if has("schema") else None
    if columns is not None:
        sources = columns if sources is None else sources.unionByName(columns).dropDuplicates(
            ["schema", "table", "column"])
    spark = classified.sparkSession
    if options.get("cdckit.message.format") != "qlik" and not _schemas_enabled(options):
        notes.append("type mappings not checked: the values carry no schema (value.converter.schemas.enable=false)")
    typed = sources if has("data") else None  # the suites that need source column types
    return [
        SuiteRun("envelopes", envelope_rows if has("data") else None, envelopes.envelope_expectations(options),
                 ["record"]),
        SuiteRun("transactions", envelopes.transaction_frame(classified, envelope_rows) if has("transaction") else None,
                 envelopes.transaction_expectations(), ["id"]),
        SuiteRun("type_mappings", types.type_frame(types.field_frame(classified), typed,
                                                   types.reference(spark, options)) if typed is not None else None,
                 types.type_expectations(), ["record"]),
        SuiteRun("values", types.value_frame(classified) if has("data") else None, types.value_expectations(),
                 ["record"]),
        SuiteRun("decimal_scales", types.decimal_scale_frame(classified, typed) if typed is not None else None,
                 types.decimal_scale_expectations(), ["record"]),
        SuiteRun("qlik", qlik.qlik_frame(classified) if has("qlik") else None, qlik.qlik_expectations(), ["record"]),
    ]


def _schemas_enabled(options: Mapping[str, str]) -> bool:
    return str(options.get("value.converter.schemas.enable", "true")).lower() != "false"


def check_no_transforms(options: Mapping[str, str]) -> None:
    """The suites know Debezium's records as the connector writes them; transformed ones are refused."""
    if str(options.get("transforms", "")).strip():
        from cdckit.errors import ConfigurationError

        raise ConfigurationError([
            f"the quality suites check Debezium's records as the connector writes them, and this configuration's "
            f"transforms ({options['transforms']}) change them; run the suites on records written without "
            f"transforms (the same configuration without the transforms.* settings)"])


def check_records(records: DataFrame, options: Mapping[str, str] | None = None, report_dir: Path | None = None,
                  reconcile: bool = False) -> QualityReport:
    """Run the suites on a DataFrame of records; with ``report_dir``, write Data Docs and the summaries there.

    ``options`` is the connector configuration the records were produced with (handling modes, tombstones); with
    ``reconcile`` it also names the source database, whose tables are compared with the replayed events (and,
    for PostgreSQL / YugabyteDB, whose catalog gives the column types)."""
    from cdckit.quality import envelopes, types
    from cdckit.quality import reconcile as rec

    options = dict(options or {})
    check_no_transforms(options)
    notes: list[str] = []
    holder = None
    postgres = not str(options.get("connector.class", "")).endswith("SqlServerConnector")
    catalog = types.source_columns_from_catalog(records.sparkSession, options) if reconcile and postgres else None
    # Read and parsed once, kept by the executors for every suite and the replay (nothing reaches the driver).
    classified = envelopes.classify(_ordered(records)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # one job reads and keeps them, and tells which suites have anything to judge
        kinds = {str(row["kind"]): int(row["count"]) for row in classified.groupBy("kind").count().collect()}
        runs = _suite_runs(classified, options, notes, catalog, kinds)
        if reconcile:
            skipped = rec.unreconcilable_topics(classified)
            notes.extend(f"reconciliation skipped for {topic}: a table without a key whose updates or deletes carry "
                         f"no before image (REPLICA IDENTITY DEFAULT or NOTHING) cannot be replayed; give it REPLICA "
                         f"IDENTITY FULL or a key (message.key.columns)" for topic in skipped)
            state = rec.replayed_state(classified, skipped)
            source, holder = rec.source_state(records.sparkSession, options)
            if skipped:
                source = source.where(~F.col("topic").isin(*skipped))
            keyed = rec.reconcile_frame(state, source)
            runs += [SuiteRun("reconciliation_counts", rec.count_frame(state, source), rec.count_expectations(),
                              ["topic"]),
                     SuiteRun("reconciliation_rows", keyed, rec.reconcile_expectations(), ["record"])]
        else:
            notes.append("reconciliation not run: it needs the source database (pass its configuration)")
        report = run_suites(runs, report_dir)
        if reconcile and not all(o.success for o in report.outcomes if o.suite == "reconciliation_rows"):
            report.notes.extend(f"first difference: {line}" for line in rec.first_differences(keyed))
    finally:
        if holder is not None:
            holder.close()
        classified.unpersist()
    report.notes = list(dict.fromkeys([*notes, *report.notes]))  # each once, in the order first given
    if report_dir is not None:
        write_summaries(report, report_dir)
    return report
