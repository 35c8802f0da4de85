# Developer and CI entry points; a thin layer over tools/install-deps.sh, CMake presets, CTest and CPack, so that
# `make test` on a fresh Debian 12 machine installs, builds and tests everything, and on a built tree does nothing
# but run the tests. Run one make at a time per checkout (the build folders are shared).
#
#   make [build]   install missing packages, configure once, build          (build/)
#   make run       build, then start build/bin/memscope on its bundled sample
#   make test      build, then run every CTest test
#   make package   build, then write the .deb into build/package/
#   make bench     build, then run every build/bin/bench_*
#   make asan      build with AddressSanitizer + UBSan (build-asan/), run every CTest test under them
#   make fuzz      build the libFuzzer targets with clang (build-fuzz/), run each for FUZZ_SECONDS (30; CI: 60)
#   make format    clang-format every C++ file in the tree
#   make clean     remove every build folder

SHELL := /bin/bash
.DEFAULT_GOAL := build

JOBS := $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 30
DEPS_STAMP := build/.deps-$(shell sha256sum cmake/dependencies.txt | cut -c1-16)

.PHONY: deps configure build run test package bench asan fuzz format clean

deps: $(DEPS_STAMP)

# The stamp's name carries the list's hash: editing cmake/dependencies.txt makes the next make check again.
$(DEPS_STAMP): cmake/dependencies.txt
	tools/install-deps.sh
	mkdir -p build
	rm -f build/.deps-*
	touch $@

# Configure once (build.ninja exists only after a configure that succeeded); after that `cmake --build` re-runs
# CMake by itself whenever a CMakeLists.txt changes.
build/build.ninja: CMakePresets.json | deps
	cmake --preset default
	touch $@

build-asan/build.ninja: CMakePresets.json | deps
	cmake --preset asan
	touch $@

build-fuzz/build.ninja: CMakePresets.json | deps
	cmake --preset fuzz
	touch $@

configure: deps
	cmake --preset default

build: build/build.ninja
	cmake --build --preset default -j $(JOBS)

run: build
	build/bin/memscope

test: build
	ctest --preset default --output-on-failure -j $(JOBS)

# Slower than `make test` (a Debug build, every test under the sanitizers: ~3x the time), so not part of it.
asan: build-asan/build.ninja
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan --output-on-failure -j $(JOBS)

package: build
	cpack --preset default

bench: build
	@set -e; found=0; \
	for b in build/bin/bench_*; do \
		[[ -x "$$b" ]] || continue; found=1; \
		echo "== $$b"; "$$b"; \
	done; \
	((found)) || echo "memscope: no benchmarks built (build/bin/bench_*)"

# Seeds: the small real snapshots and the test data. Every target runs for FUZZ_SECONDS, even after one failed; a
# crash, leak, timeout or out-of-memory input is saved as tests/data/fuzz-regressions/<target>-crash-<sha1> (the
# wire-* ones tst_viewer replays, every one tst_badinput does) and the run fails, naming it. Only the fuzz targets are
# built (`fuzzers`), not the instrumented tests.
FUZZ_SEEDS := tests/data $(wildcard ../shared/snapshots)

fuzz: build-fuzz/build.ninja
	cmake --build --preset fuzz -j $(JOBS) --target fuzzers
	@touch build-fuzz/.fuzz-start; failed=(); for f in build-fuzz/bin/fuzz_*; do \
		[[ -x "$$f" ]] || continue; \
		name="$${f##*/}"; \
		mkdir -p "build-fuzz/corpus/$$name" tests/data/fuzz-regressions; \
		echo "== $$f ($(FUZZ_SECONDS) s)"; \
		"$$f" -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
			-artifact_prefix="tests/data/fuzz-regressions/$${name#fuzz_}-" \
			"build-fuzz/corpus/$$name" $(FUZZ_SEEDS) $(FUZZ_ARGS) || failed+=("$$name"); \
	done; \
	if (($${#failed[@]})); then \
		echo "memscope: fuzzing failed: $${failed[*]}; the input is in tests/data/fuzz-regressions/:" >&2; \
		find tests/data/fuzz-regressions -type f -newer build-fuzz/.fuzz-start >&2; \
		exit 1; \
	fi

format:
	git ls-files -z --cached --others --exclude-standard -- '*.h' '*.cpp' '*.hpp' '*.cc' \
		| xargs -0 -r clang-format -i

clean:
	rm -rf build build-debug build-asan build-fuzz
