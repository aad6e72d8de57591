# Lakelog build: a virtualenv in .venv/ with the project installed, and the JVM jars Spark needs
# resolved once by Maven into .jars/ (git-ignored). Nothing downloads when Spark starts.
PYTHON ?= python3
VENV   := .venv
JARS   := .jars
BIN    := $(VENV)/bin

.PHONY: setup venv jars up test bench bench-tiering bench-spark bench-peer clean

setup: venv jars

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

jars: $(JARS)/.resolved
$(JARS)/.resolved: infra/pom.xml
	mkdir -p $(JARS)
	mvn --batch-mode --quiet -f infra/pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(JARS) -DincludeScope=runtime
	touch $@

# The main job: a local cluster on the embedded defaults.
up: setup
	$(BIN)/lakelog up

# The whole test suite.
test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/storage.py

# The remote tier against moto's S3 server (tests/support/s3server.py), about two minutes.
bench-tiering: setup
	$(BIN)/python bench/tiering.py

bench-spark: setup
	$(BIN)/python bench/spark.py

# Apache Kafka 4.1 (jars from Maven Central via bench/pom.xml into .jars/kafka) against Lakelog's client.
bench-peer: setup
	$(BIN)/python bench/peer_kafka.py

clean:
	rm -rf $(VENV) $(JARS) build *.egg-info
