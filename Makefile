# cdckit: every target sets up what it needs (virtualenv, packages) and can be run again safely.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test test-fast test-docker kafka quality quality-suites lint bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "cdckit needs a Java runtime (JDK 17 or 21) for Spark: install one (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## run the embedded end-to-end demo
	$(BIN)/cdckit demo

test: $(STAMP)  ## run the whole test suite
	$(BIN)/python -m pytest

test-fast: $(STAMP)  ## unit tests only (no Spark, no database)
	$(BIN)/python -m pytest tests/unit

test-docker: $(STAMP)  ## the SQL Server 2022 suite against a real container (skips where no Docker engine runs)
	$(BIN)/python -m pytest tests/docker -rs

kafka: $(STAMP)  ## run a local Apache Kafka (KRaft) from its Maven Central jars; CDCKIT_KAFKA_PORT picks the port
	$(BIN)/python -m cdckit.lab.kafka_broker .cdckit-kafka

quality: $(STAMP)  ## the demo, then the quality suites on its output (report in quality-report/; non-zero on failure)
	$(BIN)/cdckit demo --quality-report quality-report

quality-suites: $(STAMP)  ## write the suites' Great Expectations JSON into quality/expectations/
	$(BIN)/python -m cdckit.quality.export quality/expectations

lint: $(STAMP)
	$(BIN)/ruff check src tests jobs bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/snapshot_throughput.py

clean:
	rm -rf $(VENV) .cdckit-demo quality-report .pytest_cache .mypy_cache .ruff_cache
