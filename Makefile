# cdckit: every target sets up what it needs (virtualenv, packages) and can be run again safely.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: bench-quick bench-quality demo test test-delta test-fast test-hostile test-debezium-modes test-postgres15 test-oldest-spark test-cluster test-docker kafka quality quality-suites infra-check deploy plan destroy lint bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml lab/pyproject.toml
	@command -v java >/dev/null || { echo "cdckit needs a Java runtime (JDK 17 or 21) for Spark: install one (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e './lab[tools]'
	touch $(STAMP)

# The oldest Spark cdckit supports (Amazon EMR's), in a virtualenv of its own: CI runs the end-to-end suites on it
# as well as the whole suite on the default PySpark (the newest in pyproject.toml's range).
OLDEST_SPARK := $(shell sed -n 's/^OLDEST_SPARK = "\(.*\)"$$/\1/p' src/cdckit/versions.py)
OLDEST_VENV  := .venv-spark-$(OLDEST_SPARK)
OLDEST_STAMP := $(OLDEST_VENV)/.installed
spark_env     = PYSPARK_PYTHON=$(abspath $(1)/bin/python) PYSPARK_DRIVER_PYTHON=$(abspath $(1)/bin/python)
OLDEST_ENV    = $(call spark_env,$(OLDEST_VENV))
# The end-to-end suites, less the tests marked version_neutral (what they add does not depend on Spark's release).
# The standalone-cluster test runs on this Spark in `make test` (test-cluster), on no other.
E2E_SUITES   := tests/integration/test_postgres_end_to_end.py tests/integration/test_restarts.py \
                tests/integration/test_kafka_delivery.py tests/integration/test_stream_partitions.py \
                tests/integration/test_sqlserver_end_to_end.py tests/integration/test_spark_versions.py \
                tests/integration/test_incremental_snapshot.py::test_pause_resume_and_stop

# A virtualenv of a Spark release of its own (.venv-spark-<release>): the oldest's and the newest with Delta's.
.venv-spark-%/.installed: pyproject.toml lab/pyproject.toml
	@command -v java >/dev/null || { echo "cdckit needs a Java runtime (JDK 17 or 21) for Spark: install one (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	test -x .venv-spark-$*/bin/python || $(PYTHON) -m venv .venv-spark-$*
	.venv-spark-$*/bin/pip install --quiet --upgrade pip
	.venv-spark-$*/bin/pip install --quiet -e '.[dev]' -e './lab[tools]' 'pyspark[sql]==$*'
	touch $@

# The newest Spark minor with a Delta Lake build (cdckit.versions.DELTA_NEWEST_SPARK): the Delta sink's suites run
# on it too, with that minor's Delta build (the default PySpark's minor has none).
DELTA_SPARK := $(shell sed -n 's/^DELTA_NEWEST_SPARK = "\(.*\)"$$/\1/p' src/cdckit/versions.py)
DELTA_VENV  := .venv-spark-$(DELTA_SPARK)
DELTA_STAMP := $(DELTA_VENV)/.installed
DELTA_ENV    = $(call spark_env,$(DELTA_VENV))

test-oldest-spark: $(OLDEST_STAMP)  ## the end-to-end suites on the oldest supported Spark (EMR's)
	$(OLDEST_ENV) $(OLDEST_VENV)/bin/python -m pytest -m 'not version_neutral' $(E2E_SUITES)

test-cluster: $(OLDEST_STAMP)  ## spark-submit the jobs on a Spark standalone cluster of the Spark the image ships (EMR's; a master, 2 workers on 127.0.0.1)
	$(OLDEST_ENV) $(OLDEST_VENV)/bin/python -m pytest tests/integration/test_standalone_cluster.py

demo: $(STAMP)  ## run the embedded end-to-end demo
	$(BIN)/cdckit demo

# checkov shares no virtualenv with cdckit: its hcl2 fork would replace python-hcl2.
CHECKOV_STAMP := .venv-checkov/.installed
$(CHECKOV_STAMP):
	test -x .venv-checkov/bin/python || $(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install --quiet 'checkov>=3.2,<4'
	touch $(CHECKOV_STAMP)

test: $(STAMP) $(CHECKOV_STAMP) $(OLDEST_STAMP) $(DELTA_STAMP)  ## run the whole test suite (the Delta sink's on the Spark the image ships and on the newest with a Delta build, the cluster's on the Spark the image ships)
	$(BIN)/python -m pytest -m 'not cluster'
	$(MAKE) --no-print-directory test-delta test-cluster

test-delta: $(OLDEST_STAMP) $(DELTA_STAMP)  ## the Delta sink's suites, on the oldest supported Spark (EMR's) with its Delta Lake, and on the newest Spark with a Delta build
	$(OLDEST_ENV) $(OLDEST_VENV)/bin/python -m pytest tests/delta
	$(DELTA_ENV) $(DELTA_VENV)/bin/python -m pytest tests/delta

test-debezium-modes: $(STAMP)  ## the Debezium 2.5.2 comparison under the non-default handling modes, transaction metadata, schemas off and single message transforms
	CDCKIT_PARITY_PROFILES=modes-a,modes-b,modes-c,modes-d,smt-a,smt-b,smt-c $(BIN)/python -m pytest tests/integration/test_debezium_parity.py

HOSTILE_SUITES := tests/unit/test_signal_checks.py tests/unit/test_topic_names.py tests/unit/test_metrics_endpoint.py \
                  tests/unit/test_secrets_hidden.py tests/unit/test_private_files.py tests/unit/test_connection_security.py \
                  tests/unit/test_artifacts.py tests/unit/test_fuzz_pgoutput.py tests/unit/test_fuzz_config.py \
                  tests/integration/test_hostile_signals.py tests/integration/test_hostile_names.py \
                  tests/integration/test_file_modes.py tests/integration/test_secrets_scan.py

test-hostile: $(STAMP)  ## the hostile-input suite alone (make test runs it too): signals, names, the metrics endpoint, secrets, files, connections, fuzzing
	$(BIN)/python -m pytest $(HOSTILE_SUITES)

test-fast: $(STAMP)  ## unit tests only (no Spark, no database)
	$(BIN)/python -m pytest tests/unit

test-postgres15: $(STAMP)  ## the PostgreSQL suites against Debian's PostgreSQL 15 (postgresql-15 installed with apt-get when missing)
	@if [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo "sudo "); \
	  echo "PostgreSQL 15 is not installed: $${sudo}apt-get update; $${sudo}apt-get install -y postgresql-15"; \
	  $${sudo}apt-get update && $${sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-15 || exit 1; \
	fi
	CDCKIT_TEST_POSTGRES_BIN=/usr/lib/postgresql/15/bin $(BIN)/python -m pytest \
	  tests/integration/test_postgres_versions.py tests/integration/test_postgres_end_to_end.py \
	  tests/integration/test_restarts.py tests/integration/test_schema_evolution.py \
	  tests/integration/test_stream_partitions.py tests/integration/test_postgres_tls.py \
	  "tests/integration/test_incremental_snapshot.py::test_a_table_added_while_stopped_is_read_in_chunks_while_changes_flow"

test-docker: $(STAMP)  ## the SQL Server 2022 suite against a real container (skips where no Docker engine runs)
	$(BIN)/python -m pytest tests/docker -rs

kafka: $(STAMP)  ## run a local Apache Kafka (KRaft) from its Maven Central jars until Ctrl-C; its address in .cdckit-kafka/bootstrap.servers (CDCKIT_KAFKA_PORT picks the port)
	$(BIN)/python -m cdckit_lab.kafka_broker .cdckit-kafka

quality: $(STAMP)  ## the demo, then the quality suites on its output (report in quality-report/; non-zero on failure)
	$(BIN)/cdckit demo --quality-report quality-report

quality-suites: $(STAMP)  ## write the suites' Great Expectations JSON into quality/expectations/
	$(BIN)/python -m cdckit.quality.export quality/expectations

infra-check: $(STAMP) $(CHECKOV_STAMP)  ## terraform fmt/validate, structure and checkov, offline
	$(BIN)/python -m pytest tests/unit/test_terraform.py -q
	BC_SKIP_MAPPING=TRUE .venv-checkov/bin/checkov -d infra/terraform --framework terraform --quiet --compact

ENV ?= dev
RUNTIME ?= emr
JOB_IMAGE ?=
DEPLOY_FLAGS = --env $(ENV) $(if $(filter 1 true yes,$(DRY_RUN)),--dry-run) $(if $(filter 1 true yes,$(AUTO_APPROVE)),--yes)

deploy: $(STAMP)  ## image, terraform apply, artefacts, job configuration, job runs; a second run upgrades the stream (ENV=dev|prod RUNTIME=emr|eks DRY_RUN=1 AUTO_APPROVE=1)
	$(BIN)/python -m cdckit.deploy deploy $(DEPLOY_FLAGS) --runtime $(RUNTIME) --image '$(JOB_IMAGE)'

plan: $(STAMP)  ## terraform plan of ENV
	$(BIN)/python -m cdckit.deploy plan $(DEPLOY_FLAGS)

destroy: $(STAMP)  ## terraform destroy of ENV
	$(BIN)/python -m cdckit.deploy destroy $(DEPLOY_FLAGS)

lint: $(STAMP)
	$(BIN)/ruff check src lab tests jobs bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/shellcheck containers/job/install.sh containers/lab/lab-setup.sh .ci/run

BENCH_BEFORE ?= bench/results/full-2026-11-22T1808TUTC.json

bench: $(STAMP) $(OLDEST_STAMP)  ## the full benchmarks (1M and 10M rows; half an hour or so): bench/RESULTS.md, bench/results/, bench/plots/
	$(BIN)/python bench/run.py --before $(BENCH_BEFORE)

bench-quick: $(STAMP) $(OLDEST_STAMP)  ## the same measurements on small data (a few minutes)
	$(BIN)/python bench/run.py --quick

bench-quality: $(STAMP)  ## what a quality run costs: cdckit quality at two sizes next to Spark's JSON reader (a few minutes)
	$(BIN)/python bench/quality.py

clean:
	rm -rf $(VENV) .venv-spark-* .venv-checkov .cdckit-demo quality-report .pytest_cache .mypy_cache .ruff_cache
