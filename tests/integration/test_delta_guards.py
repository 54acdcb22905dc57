"""What the Delta sink says where it cannot run: a Spark without a Delta Lake build, a session without Delta, and
settings it cannot honour. (The sink itself is tested in tests/delta, on a Spark with Delta.)"""

from __future__ import annotations

from typing import Any

import pyspark
import pytest

from cdckit import versions
from cdckit.artifacts import delta_jars
from cdckit.config import validate
from cdckit.errors import CdcKitError, ConfigurationError
from cdckit.spark.sinks import Sink
from cdckit.spark.sinks.delta import DeltaSinkError

BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
        "database.user": "u", "database.password": "pw", "database.dbname": "d", "topic.prefix": "p"}


@pytest.mark.skipif(versions.delta_build(pyspark.__version__) is not None,
                    reason="this Spark has a Delta Lake build; tests/delta runs the sink on it")
def test_a_spark_without_a_delta_build_is_refused_with_the_pairings_cdckit_runs() -> None:
    with pytest.raises(CdcKitError) as refused:
        delta_jars()
    message = str(refused.value)
    assert f"not on Spark {pyspark.__version__}" in message and "Spark 4.0.x with Delta 4.0.0" in message
    assert "Spark 4.2.x with Delta 4.4.0" in message
    assert f"pip install 'pyspark[sql]=={versions.DELTA_NEWEST_SPARK}'" in message
    assert "--packages io.delta" in message


@pytest.mark.spark
def test_a_session_without_delta_is_refused_before_anything_is_read(spark: Any) -> None:
    options = validate({**BASE, "cdckit.sink": "delta"}).as_properties()
    with pytest.raises(DeltaSinkError) as refused:
        Sink(spark, options)
    message = str(refused.value)
    assert "cdckit.sink=delta needs Delta Lake in the Spark session" in message
    assert "delta-defaults" in message and "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in message


@pytest.mark.parametrize(("settings", "problem"), [
    ({"cdckit.message.format": "qlik"}, "cdckit.sink=delta writes change rows from Debezium envelopes"),
    ({"value.converter.schemas.enable": "false"}, "cdckit.sink=delta reads each event's schema"),
    ({"cdckit.delta.mode": "latest"}, "cdckit.delta.mode"),
    ({"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"},
     "applies no transforms"),
])
def test_settings_the_delta_sink_cannot_honour_are_refused(settings: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        validate({**BASE, "cdckit.sink": "delta", **settings})
