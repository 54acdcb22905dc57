"""Paths that only one machine sees are refused when executors run on other machines."""

from __future__ import annotations

import pytest

from cdckit.errors import ConfigurationError
from cdckit.spark.cluster import check_paths_for

S3 = {"cdckit.checkpoint.location": "s3://bucket/checkpoint"}


def test_local_mode_takes_any_path() -> None:
    check_paths_for("local[2]", {"cdckit.output.path": "/data/out"})


def test_the_files_sink_on_a_cluster_needs_a_shared_mount() -> None:
    with pytest.raises(ConfigurationError, match=r"cdckit.output.path=/data/out: a path on one machine, but Spark "
                                                 r"runs executors on other machines \(master yarn\)"):
        check_paths_for("yarn", {**S3, "cdckit.output.path": "/data/out"})
    check_paths_for("yarn", {**S3, "cdckit.output.path": "/mnt/efs/out", "cdckit.local.paths.shared": "true"})


def test_a_local_checkpoint_is_refused_whatever_the_sink() -> None:
    with pytest.raises(ConfigurationError, match=r"cdckit\.checkpoint.location=cdckit-checkpoint"):
        check_paths_for("k8s://https://api:443", {"cdckit.sink": "kafka"})


def test_kafka_with_an_s3_checkpoint_needs_no_local_path_unless_dead_letters_are_written() -> None:
    check_paths_for("spark://10.0.0.1:7077", {**S3, "cdckit.sink": "kafka", "cdckit.output.path": "/data/out"})
    with pytest.raises(ConfigurationError, match=r"cdckit\.output.path=/data/out"):
        check_paths_for("spark://10.0.0.1:7077", {**S3, "cdckit.sink": "kafka", "cdckit.output.path": "/data/out",
                                                  "cdckit.kafka.oversize.handling": "dead-letter"})


def test_the_delta_sink_takes_s3() -> None:
    check_paths_for("yarn", {**S3, "cdckit.sink": "delta", "cdckit.delta.path": "s3://bucket/delta"})
    with pytest.raises(ConfigurationError, match=r"cdckit\.delta\.path=cdckit-delta"):
        check_paths_for("yarn", {**S3, "cdckit.sink": "delta"})
