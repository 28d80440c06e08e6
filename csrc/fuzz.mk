# csrc/fuzz.mk -- the fuzz target fuzz_open.c (open / recovery / reads /
# check on arbitrary main-file and log bytes) and its corpus fuzz_corpus/.
#
#   make -f fuzz.mk fuzz [RUNS=N]   build with clang -fsanitize=fuzzer,
#                       address,undefined and run N executions (default
#                       20000) over a copy of the corpus (build-fuzz/corpus;
#                       the repository's corpus is not written).  Crashes,
#                       leaks, timeouts and sanitizer reports fail the run;
#                       the input is saved as build-fuzz/artifacts/crash-*.
#   make -f fuzz.mk fuzz-merge      merge the inputs of build-fuzz/corpus
#                       that add coverage into fuzz_corpus/ (libFuzzer
#                       -merge=1; new files are named by their SHA-1)
#   make -f fuzz.mk replay          build the standalone driver with gcc
#                       -fsanitize=address,undefined and replay the corpus
#   make -f fuzz.mk replay-valgrind the driver without sanitizers, replayed
#                       under valgrind memcheck (leaks included)
#   make -f fuzz.mk corpus          regenerate the seeds (python3 and the
#                       pyqstore package needed)
#   make -f fuzz.mk clean-fuzz
#
# Variables: RUNS, FUZZ_ARGS (extra libFuzzer flags, e.g. -jobs=4 or
# -max_total_time=600), FUZZ_TIMEOUT (seconds per input before libFuzzer
# calls it a hang, default 10), MAX_LEN (largest input it makes, default
# 65536), FUZZ_CC (default clang), CC (default gcc, for replay).

SHELL := /bin/bash
MAKEFLAGS += --no-print-directory

FUZZ_CC ?= clang
CC := $(if $(filter default,$(origin CC)),gcc,$(CC))
PYTHON ?= python3
RUNS ?= 20000
FUZZ_TIMEOUT ?= 10
MAX_LEN ?= 65536
FUZZ_ARGS ?=

# The library: every .c but the tests, the fuzz targets and the leak harness.
LIB_SRCS := $(filter-out test_%.c fuzz_%.c leak_harness.c,$(wildcard *.c))
HDRS := $(wildcard *.h)
CORPUS := fuzz_corpus
# Inputs only: the generator script is not one.
CORPUS_FILES = $(filter-out %.py,$(wildcard $(CORPUS)/*))

COMMON_FLAGS := -g -std=c11 -Wall -Wextra -D_GNU_SOURCE -fno-omit-frame-pointer -pthread

FUZZ_DIR := build-fuzz
FUZZ_BIN := $(FUZZ_DIR)/fuzz_open
FUZZ_CFLAGS := -O1 $(COMMON_FLAGS) -fsanitize=fuzzer,address,undefined

REPLAY_DIR := build-fuzz-replay
REPLAY_BIN := $(REPLAY_DIR)/fuzz_open
REPLAY_CFLAGS := -O1 $(COMMON_FLAGS) -DFUZZ_STANDALONE \
	-fsanitize=address,undefined -fno-sanitize-recover=all

VG_DIR := build-fuzz-vg
VG_BIN := $(VG_DIR)/fuzz_open
VG_CFLAGS := -O1 $(COMMON_FLAGS) -DFUZZ_STANDALONE
VALGRIND := valgrind -q --leak-check=full --error-exitcode=99 \
	--errors-for-leak-kinds=definite,indirect \
	--show-leak-kinds=definite,indirect \
	$(if $(wildcard valgrind.supp),--suppressions=valgrind.supp)

SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

.PHONY: fuzz fuzz-build fuzz-merge replay replay-valgrind corpus clean-fuzz

# ---- libFuzzer (one compile: the sources are few and small)
fuzz-build: $(FUZZ_BIN)

$(FUZZ_BIN): $(LIB_SRCS) fuzz_open.c $(HDRS) fuzz.mk
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(LIB_SRCS) fuzz_open.c -ldl

fuzz: $(FUZZ_BIN)
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/artifacts
	cp -n $(CORPUS_FILES) $(FUZZ_DIR)/corpus/ 2>/dev/null || true
	$(SAN_ENV) ./$(FUZZ_BIN) -runs=$(RUNS) -timeout=$(FUZZ_TIMEOUT) \
	  -max_len=$(MAX_LEN) -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/artifacts/ $(FUZZ_ARGS) $(FUZZ_DIR)/corpus

fuzz-merge: $(FUZZ_BIN)
	@test -d $(FUZZ_DIR)/corpus || { echo "no $(FUZZ_DIR)/corpus: run make -f fuzz.mk fuzz first"; exit 1; }
	@rm -rf $(FUZZ_DIR)/merge && mkdir -p $(FUZZ_DIR)/merge
	cp $(CORPUS_FILES) $(FUZZ_DIR)/merge/
	$(SAN_ENV) ./$(FUZZ_BIN) -merge=1 -timeout=$(FUZZ_TIMEOUT) -max_len=$(MAX_LEN) \
	  $(FUZZ_DIR)/merge $(FUZZ_DIR)/corpus
	@n=0; for f in $(FUZZ_DIR)/merge/*; do \
	  b=$$(basename $$f); \
	  if [ ! -e $(CORPUS)/$$b ]; then cp $$f $(CORPUS)/$$b; n=$$((n + 1)); fi; \
	done; echo "fuzz-merge: $$n new inputs in $(CORPUS)/"

# ---- the standalone driver: gcc + ASan/UBSan, or plain under valgrind
$(REPLAY_BIN): $(LIB_SRCS) fuzz_open.c $(HDRS) fuzz.mk
	@mkdir -p $(REPLAY_DIR)
	$(CC) $(REPLAY_CFLAGS) -o $@ $(LIB_SRCS) fuzz_open.c -ldl

$(VG_BIN): $(LIB_SRCS) fuzz_open.c $(HDRS) fuzz.mk
	@mkdir -p $(VG_DIR)
	$(CC) $(VG_CFLAGS) -o $@ $(LIB_SRCS) fuzz_open.c -ldl

replay: $(REPLAY_BIN)
	$(SAN_ENV) ./$(REPLAY_BIN) $(CORPUS_FILES)

replay-valgrind: $(VG_BIN)
	$(VALGRIND) ./$(VG_BIN) $(CORPUS_FILES)

corpus:
	$(PYTHON) $(CORPUS)/make_corpus.py

clean-fuzz:
	rm -rf $(FUZZ_DIR) $(REPLAY_DIR) $(VG_DIR)
