"""Write the suites as Great Expectations JSON (``python -m cdckit.quality.export quality/expectations``), for
teams that run Great Expectations themselves on frames shaped as ``cdckit.quality`` derives them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def suites() -> dict[str, list[Any]]:
    from cdckit.quality import envelopes, qlik, reconcile, types

    return {"envelopes": envelopes.envelope_expectations(), "transactions": envelopes.transaction_expectations(),
            "type_mappings": types.type_expectations(), "values": types.value_expectations(),
            "decimal_scales": types.decimal_scale_expectations(), "qlik": qlik.qlik_expectations(),
            "reconciliation_counts": reconcile.count_expectations(),
            "reconciliation_rows": reconcile.reconcile_expectations()}


def suite_documents() -> dict[str, dict[str, Any]]:
    """Each suite as the JSON Great Expectations stores (without the ids it assigns when saving)."""
    documents = {}
    for name, expectations in suites().items():
        documents[name] = {"name": name, "expectations": [
            {"type": e.expectation_type, "kwargs": e.configuration.kwargs, "meta": e.meta} for e in expectations]}
    return documents


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "quality/expectations")
    folder.mkdir(parents=True, exist_ok=True)
    for name, document in suite_documents().items():
        (folder / f"{name}.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(suite_documents())} suites to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
