# Makefile — a thin front over CMake for people. The build itself is CMakeLists.txt.
#   make            configure + build (Release) into build/
#   make test       install dependencies, build, run every test (CTest + GoogleTest + fuzzer)
#   make run        install dependencies, build, chat with MODEL (default: the stories260K fixture)
#   make bench      build and run the benchmarks (BENCH_ARGS=--benchmark_filter=q4 ...)
#   make clean      remove build/
BUILD     ?= build
FIXTURES  ?= $(abspath ../shared/fixtures)
MODEL     ?=
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=

DEFAULT_MODEL := $(FIXTURES)/models/stories260K-F32.gguf

.PHONY: all setup configure build test run bench clean

all: build

setup:
	@./scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVRUN_FIXTURES=$(FIXTURES) $(CMAKE_ARGS)

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: setup
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && KVRUN_FIXTURES=$(FIXTURES) ctest --output-on-failure -j $(JOBS)

run: setup
	@$(MAKE) --no-print-directory build
	@model="$(MODEL)"; \
	if [ -z "$$model" ]; then \
	  if [ -f "$(DEFAULT_MODEL)" ]; then model="$(DEFAULT_MODEL)"; else \
	    echo "make run: no MODEL given and no fixture at $(DEFAULT_MODEL)."; \
	    echo "Get a GGUF model (e.g. a llama-family model converted with llama.cpp's"; \
	    echo "convert_hf_to_gguf.py, or any .gguf from a model hub) and run:"; \
	    echo "  make run MODEL=path/to/model.gguf"; exit 2; fi; \
	fi; \
	./$(BUILD)/kvrun -m "$$model"

bench: build
	./$(BUILD)/kvrun_bench $(BENCH_ARGS)

clean:
	rm -rf $(BUILD)
