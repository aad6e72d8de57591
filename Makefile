# Lakelog build: a virtualenv in .venv/ with the project installed, and the JVM jars Spark needs
# resolved once by Maven into .jars/ (git-ignored). Nothing downloads when Spark starts. The web
# console's few front-end files come from npm (package-lock.json) into ingest_api/console/vendor/
# (git-ignored): nodes serve them, nothing is fetched from a CDN at run time.
PYTHON ?= python3
VENV   := .venv
JARS   := .jars
BIN    := $(VENV)/bin

.PHONY: setup venv jars kafka jvm console browser up test bench bench-tiering bench-spark bench-sql bench-console bench-peer bench-reassignment clean
.PHONY: bench-kafka-perf
.PHONY: bench-kafka-fetch

setup: venv jars jvm console

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "setuptools>=74.1" wheel
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

jars: $(JARS)/.resolved
$(JARS)/.resolved: infra/pom.xml
	mkdir -p $(JARS)
	mvn --batch-mode --quiet -f infra/pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(JARS) -DincludeScope=runtime
	touch $@

# Apache Kafka's own programs (broker, shell tools, Connect's standalone worker with the FileStream
# connectors), from Maven Central into .jars/kafka: the Kafka-protocol tests drive Lakelog with them and
# the peer benchmarks run the broker beside Lakelog.
kafka: $(JARS)/kafka/.resolved
$(JARS)/kafka/.resolved: infra/kafka/pom.xml
	mkdir -p $(JARS)/kafka
	mvn --batch-mode --quiet -f infra/kafka/pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(JARS)/kafka -DincludeScope=runtime
	touch $@

# The JVM `lakelog` data source (spark_log/jvm/): javac + jar against pyspark's own jars, no
# download; a JDK 17 from Debian when javac is missing and we are root (CI).
JVM_JAR := spark_log/jvm/lakelog-spark.jar
jvm: $(JVM_JAR)
$(JVM_JAR): $(VENV)/.installed spark_log/jvm/build.sh $(shell find spark_log/jvm/src spark_log/jvm/resources -type f)
	@if ! command -v javac >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && apt-get install -y -q openjdk-17-jdk-headless; fi
	bash spark_log/jvm/build.sh $(BIN)/python

# The console's libraries: Preact + htm (components without a build step) and uPlot (charts), as
# ES modules. Only these files are served; node_modules/ is not needed at run time.
VENDOR := ingest_api/console/vendor
VENDOR_FILES := node_modules/preact/dist/preact.mjs node_modules/preact/hooks/dist/hooks.mjs \
	node_modules/htm/dist/htm.mjs node_modules/uplot/dist/uPlot.esm.js node_modules/uplot/dist/uPlot.min.css
console: $(VENDOR)/.installed
$(VENDOR)/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(VENDOR)
	cp $(VENDOR_FILES) $(VENDOR)/
	@# The source-map comments point at files we do not ship (a browser with devtools open asks for them).
	sed -i '/^\/\/# sourceMappingURL=/d' $(VENDOR)/*.mjs
	touch $@

# The browser the console tests drive (Playwright on the system Chromium; Playwright's own browser
# download is not used). Installed from Debian when missing and we are root (CI).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	    if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	    else echo "the console tests need /usr/bin/chromium (apt-get install chromium)" >&2; fi; fi

# libfaketime, which the clock-jump fault test preloads into a node (the Debian package `faketime`).
.PHONY: faketime
faketime:
	@if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 && [ ! -e /usr/lib/faketime/libfaketime.so.1 ]; then \
	    if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q faketime; \
	    else echo "tests/faults/test_clock_jumps.py needs libfaketime (apt-get install faketime)" >&2; fi; fi

# The main job: a local cluster on the embedded defaults, with its SQL server (`lakelog sql` answers at once).
up: setup
	$(BIN)/lakelog up --sql

# The whole test suite.
test: setup kafka browser faketime
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/storage.py

# The remote tier against moto's S3 server (tests/support/s3server.py), about two minutes.
bench-tiering: setup
	$(BIN)/python bench/tiering.py

bench-spark: setup
	$(BIN)/python bench/spark.py

# SQL answers through `lakelog sql-server` against a one-shot run, a few minutes.
bench-sql: setup
	$(BIN)/python bench/sql.py

# The web console's JSON with 2,000 topics (creating them takes a few minutes).
bench-console: setup
	$(BIN)/python bench/console.py

# Apache Kafka 4.1 (jars from Maven Central via infra/kafka/pom.xml into .jars/kafka) against Lakelog's client.
bench-peer: setup kafka
	$(BIN)/python bench/peer_kafka.py --rf 1
	$(BIN)/python bench/peer_kafka.py --rf 3

# Kafka's own ProducerPerformance / ConsumerPerformance against Lakelog's Kafka door and Apache Kafka 4.1:
# 1 node vs 1 broker, then 3 nodes vs 3 brokers (RF 3). Run it on a quiet machine (about 15 minutes).
bench-kafka-perf: setup kafka
	$(BIN)/python bench/kafka_perf.py --rf 1
	$(BIN)/python bench/kafka_perf.py --rf 3

# Partition moves on a 4-node cluster, unthrottled and under a replication throttle, about two minutes.
bench-reassignment: setup
	$(BIN)/python bench/reassignment.py

# Kafka Fetch through the Kafka door: sendfile (zero-copy) against read-and-send, alternated; a few minutes.
bench-kafka-fetch: setup
	$(BIN)/python bench/kafka_fetch.py

clean:
	rm -rf $(VENV) $(JARS) build *.egg-info node_modules $(VENDOR)
