"""The Spark data sources: each dialect's snapshot (a batch source of parallel partitions) and change stream (a
streaming source whose offsets are the source's positions), registered with Spark by ``cdckit.spark.session``."""
