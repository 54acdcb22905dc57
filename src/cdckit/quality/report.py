"""Running suites with Great Expectations and writing the reports.

A report folder gets the Great Expectations project (``gx/``, whose ``uncommitted/data_docs/local_site/index.html``
is the Data Docs site; its pages load their styles from public CDNs) and a self-contained summary:
``summary.md`` and ``summary.json`` (suite, check, expectation, result, failing examples).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from cdckit.spark.session import session_setting

EXAMPLES = 10
ROWS_PER_TASK = 1_000_000


@dataclass
class Outcome:
    suite: str
    check: str
    expectation: str
    arguments: dict[str, Any]
    success: bool
    checked: int
    unexpected: int
    examples: list[Any] = field(default_factory=list)


@dataclass
class SuiteRun:
    name: str
    frame: DataFrame | None  # None: nothing of the suite's kind to judge
    expectations: list[Any]
    id_columns: list[str] = field(default_factory=list)


@dataclass
class QualityReport:
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    data_docs: str | None = None

    @property
    def success(self) -> bool:
        return all(o.success for o in self.outcomes)

    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success]

    def outcome(self, suite: str, check: str) -> Outcome:
        for found in self.outcomes:
            if found.suite == suite and found.check == check:
                return found
        raise KeyError(f"no check {check!r} in suite {suite!r}")

    def to_json(self) -> dict[str, Any]:
        return {"success": self.success, "rows": self.rows, "notes": self.notes, "data_docs": self.data_docs,
                "outcomes": [asdict(o) for o in self.outcomes]}

    def to_markdown(self) -> str:
        failed = len(self.failed())
        lines = ["# cdckit quality report", "",
                 f"**{'PASSED' if self.success else 'FAILED'}**: {len(self.outcomes) - failed} of "
                 f"{len(self.outcomes)} expectations met.", ""]
        if self.rows:
            lines += ["Rows checked: " + ", ".join(f"{suite} {count}" for suite, count in self.rows.items()), ""]
        for note in self.notes:
            lines.append(f"- {note}")
        if self.notes:
            lines.append("")
        lines += ["| suite | check | expectation | result | unexpected / checked | failing examples |",
                  "|---|---|---|---|---|---|"]
        for o in self.outcomes:
            examples = "; ".join(_short(e) for e in o.examples[:3])
            lines.append(f"| {o.suite} | {o.check} | `{o.expectation}` | {'pass' if o.success else '**FAIL**'} | "
                         f"{o.unexpected} / {o.checked} | {examples.replace('|', '/')} |")
        return "\n".join(lines) + "\n"


def _short(example: Any) -> str:
    text = example if isinstance(example, str) else json.dumps(example, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def preload() -> threading.Thread:
    """Import Great Expectations (about 4 s) in a thread, while the caller waits for its Spark session to start."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    thread = threading.Thread(target=_import, name="cdckit-gx-import", daemon=True)
    thread.start()
    return thread


def _import() -> None:
    with contextlib.suppress(ImportError):  # told by the first use
        import great_expectations  # noqa: F401
        from great_expectations.expectations import row_conditions  # noqa: F401


def _context(report_dir: Path | None) -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import logging

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    if report_dir is None:
        context = gx.get_context(mode="ephemeral")
    else:
        report_dir.mkdir(parents=True, exist_ok=True)
        context = gx.get_context(mode="file", project_root_dir=str(report_dir.resolve()))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def run_suites(runs: list[SuiteRun], report_dir: Path | None = None) -> QualityReport:
    """Validate each frame against its suite. With ``report_dir``, Data Docs and the summaries are written there.

    Each expectation costs Great Expectations a few Spark jobs, and asking for failing examples a few more, so a
    suite runs in two passes over its frame, computed once and kept by the executors meanwhile: every expectation
    for its verdict only, then the failed ones again for their counts and examples. An empty frame has nothing to
    judge (its expectations are met with 0 rows checked, without a Spark job each)."""
    import great_expectations as gx

    context = _context(report_dir)
    source = context.data_sources.add_or_update_spark(name="cdckit", persist=False)  # the frames are kept already
    actions = [gx.checkpoint.UpdateDataDocsAction(name="data_docs")] if report_dir is not None else []
    report = QualityReport()
    for run in runs:
        kept = run.frame.persist(StorageLevel.MEMORY_AND_DISK) if run.frame is not None else None
        try:
            rows = kept.count() if kept is not None else 0
            report.rows[run.name] = rows
            if kept is None or rows == 0:
                report.outcomes.extend(_met(run, e, 0) for e in run.expectations)
                continue
            # each of Great Expectations' aggregations costs a task per partition: few partitions for few rows
            frame = kept.coalesce(max(1, min(kept.rdd.getNumPartitions(), -(-rows // ROWS_PER_TASK))))
            # Its metrics are small aggregations of the kept frame, one or two per expectation: adaptive execution
            # would plan each as two Spark jobs, with nothing to adapt.
            with session_setting(frame.sparkSession, "spark.sql.adaptive.enabled", "false"):
                verdicts = _validate(context, source, run.name, run.expectations, frame,
                                     {"result_format": "BOOLEAN_ONLY"}, actions)
                failed = [e for e, item in zip(run.expectations, verdicts, strict=True) if not item.success]
                details = iter(_validate(
                    context, source, f"{run.name}_failed", failed, frame,
                    {"result_format": "SUMMARY", "partial_unexpected_count": EXAMPLES,
                     **({"unexpected_index_column_names": run.id_columns} if run.id_columns else {})},
                    actions) if failed else [])
            for expectation, item in zip(run.expectations, verdicts, strict=True):
                report.outcomes.append(_outcome(run, next(details)) if not item.success else _met(run, expectation,
                                                                                                  rows))
        finally:
            if kept is not None:
                kept.unpersist()
    if report_dir is not None:
        sites = context.get_docs_sites_urls()
        report.data_docs = sites[0]["site_url"] if sites else None
    return report


def _validate(context: Any, source: Any, name: str, expectations: list[Any], frame: DataFrame,
              result_format: dict[str, Any], actions: list[Any]) -> list[Any]:
    """The results of ``expectations`` on ``frame``, in their order."""
    import great_expectations as gx

    with contextlib.suppress(Exception):  # not there yet
        source.delete_asset(name)
    batch_definition = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe("all")
    copies = [e.copy(update={"id": None}) for e in expectations]  # an expectation belongs to one suite
    suite = context.suites.add_or_update(gx.ExpectationSuite(name=name, expectations=copies))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=name, data=batch_definition, suite=suite))
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[definition], actions=actions, result_format=result_format))
    result = checkpoint.run(batch_parameters={"dataframe": frame})
    items = [item for validation in result.run_results.values() for item in validation.results]
    by_id = {item.expectation_config.id: item for item in items}
    return [by_id[e.id] for e in suite.expectations] if len(by_id) == len(items) == len(copies) else items


def _met(run: SuiteRun, expectation: Any, rows: int) -> Outcome:
    """An expectation met on a frame of ``rows`` rows."""
    arguments = {k: v for k, v in expectation.configuration.kwargs.items() if k not in ("batch_id", "result_format")}
    return Outcome(suite=run.name, check=str((expectation.meta or {}).get("check", expectation.expectation_type)),
                   expectation=expectation.expectation_type, arguments=arguments, success=True, checked=rows,
                   unexpected=0)


def _outcome(run: SuiteRun, item: Any) -> Outcome:
    config = item.expectation_config
    result = item.result or {}
    arguments = {k: v for k, v in config.kwargs.items() if k not in ("batch_id", "result_format")}
    examples = result.get("partial_unexpected_index_list") or result.get("partial_unexpected_list") or []
    if item.exception_info and item.exception_info.get("raised_exception"):
        examples = [str(item.exception_info.get("exception_message"))]
    return Outcome(suite=run.name, check=str((config.meta or {}).get("check", config.type)), expectation=config.type,
                   arguments=arguments, success=bool(item.success), checked=int(result.get("element_count") or 0),
                   unexpected=int(result.get("unexpected_count") or 0), examples=list(examples)[:EXAMPLES])


def write_summaries(report: QualityReport, report_dir: Path) -> None:
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "summary.json").write_text(json.dumps(report.to_json(), indent=1, default=str))
    (report_dir / "summary.md").write_text(report.to_markdown())


def print_quality(console: Any, report: QualityReport, folder: Path) -> None:
    """The report's verdict, its failed expectations with examples, and where the full report is."""
    for note in dict.fromkeys(report.notes):  # each once
        console.print(f"  note: {note}", highlight=False, markup=False)
    for outcome in report.failed():
        console.print(f"  FAILED {outcome.suite}: {outcome.check} ({outcome.unexpected} of {outcome.checked})",
                      highlight=False, markup=False)
        for example in outcome.examples[:3]:
            console.print(f"      e.g. {example}", highlight=False, markup=False)
    verdict = "passed" if report.success else "FAILED"
    met = len(report.outcomes) - len(report.failed())
    console.print(f"quality {verdict}: {met} of {len(report.outcomes)} expectations met; report in "
                  f"{folder}/summary.md, Data Docs in {folder}/gx/uncommitted/data_docs/local_site/index.html",
                  highlight=False, markup=False)
