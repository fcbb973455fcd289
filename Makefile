# The two commands a new user runs (see README):  make demo  |  make test
# Both install missing Debian packages first (scripts/install-deps, idempotent).
BUILD_DIR ?= build
PREFIX    ?= /usr/local
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=
# ccache when installed: the Python wheel's build (setup.py, ctest python.wheel_install)
# compiles the same files with the same commands, and then takes them from the cache.
# Decided when CMake configures (`=`, not `:=`): on a fresh machine scripts/install-deps
# installs ccache only after this file is read. Compile commands relative to the source
# (CCACHE_BASEDIR), so that build/ and the wheel's build-python/ hash alike.
CCACHE_ARG = $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR ?= $(CURDIR)

.PHONY: all deps configure build demo test test-release install install-lib python asan asan-build fuzz clean

all: build

deps:
	@scripts/install-deps

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CCACHE_ARG) $(CMAKE_ARGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: every claim measured, written as an HTML report (atomically) in report/.
demo: build
	./$(BUILD_DIR)/attnlab report --out report
	@echo "The report is in report/index.html (open it in a browser; data in report/data, figures in report/figures)."

# Everything CI checks (.ci/run is `make test`): the release suite, the same suite
# under AddressSanitizer + UndefinedBehaviorSanitizer, and every fuzzer for FUZZ_SECONDS.
# `make test-release` runs the first part alone, for a quick loop while developing.
test: test-release asan fuzz

test-release: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# The library alone (libattnlab, its headers, its CMake package): a build directory of
# its own with the tests, tools, benchmarks and Python module off, building only the
# target that `make install` would install first.
LIB_BUILD_DIR ?= build-lib
install-lib: deps
	cmake -S . -B $(LIB_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CCACHE_ARG) \
	  -DATTNLAB_BUILD_TESTS=OFF -DATTNLAB_BUILD_TOOLS=OFF -DATTNLAB_BUILD_PYTHON=OFF $(CMAKE_ARGS)
	cmake --build $(LIB_BUILD_DIR) --target attnlab -j $(JOBS)
	cmake --install $(LIB_BUILD_DIR) --prefix $(PREFIX)

# AddressSanitizer + UndefinedBehaviorSanitizer: one clang build (build-asan, the asan
# preset) of the whole suite and of the libFuzzer targets, so that CI compiles the library
# under the sanitizers once (the Python module and the benchmark peers are left out: they
# need an unsanitized host). `make asan` runs the suite, `make fuzz` every fuzzer for
# FUZZ_SECONDS on its seed corpus.
asan: asan-build
	ctest --preset asan -j $(JOBS)

asan-build: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)

FUZZ_SECONDS ?= 60
fuzz: asan-build
	scripts/run-fuzzers build-asan $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR) $(LIB_BUILD_DIR) build-asan

# The Python module alone, into $(BUILD_DIR)/python/attnlab (PYTHONPATH=$(BUILD_DIR)/python).
python: configure
	cmake --build $(BUILD_DIR) --target attnlab_python -j $(JOBS)
