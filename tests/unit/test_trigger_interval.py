"""``cdckit.trigger.interval``: Spark's interval text, or the short form a user types (10s, 500ms), is turned into
what Spark reads; anything else is refused when the configuration is loaded, not by Spark's traceback at the
stream's start (which took the snapshot first)."""

from __future__ import annotations

import pytest

from cdckit.config import validate
from cdckit.errors import ConfigurationError

BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
        "database.user": "u", "database.password": "Pw-interval-1", "database.dbname": "d", "topic.prefix": "t",
        "cdckit.trigger": "processing-time"}


@pytest.mark.parametrize(("given", "spark"), [("1s", "1 seconds"), ("10 seconds", "10 seconds"),
                                              ("500ms", "500 milliseconds"), ("1m30s", "1 minutes 30 seconds"),
                                              ("interval 2 minutes", "2 minutes"), ("1 Second", "1 seconds")])
def test_an_interval_in_either_form_reaches_spark_in_its_own(given: str, spark: str) -> None:
    assert validate({**BASE, "cdckit.trigger.interval": given}).str("cdckit.trigger.interval") == spark


@pytest.mark.parametrize("given", ["10", "0.5s", "1 fortnight", "soon", "1s 2"])
def test_anything_else_is_refused_with_the_forms_it_takes(given: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate({**BASE, "cdckit.trigger.interval": given})
    assert f"cdckit.trigger.interval={given!r} is not an interval Spark reads" in str(refused.value)
    assert "'10 seconds'" in str(refused.value) and "10s" in str(refused.value)
