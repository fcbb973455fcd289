# The two commands a new user runs (see README):  make demo  |  make test
# Both install missing Debian packages first (scripts/install-deps, idempotent).
BUILD_DIR ?= build
PREFIX    ?= /usr/local
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build demo test install python asan clean

all: build

deps:
	@scripts/install-deps

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: every claim measured, written as an HTML report (atomically) in report/.
demo: build
	./$(BUILD_DIR)/attnlab report --out report
	@echo "The report is in report/index.html (open it in a browser; data in report/data, figures in report/figures)."

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# AddressSanitizer + UndefinedBehaviorSanitizer build of the whole suite.
asan: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR)
