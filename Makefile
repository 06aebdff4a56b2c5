# shadowsync — one Makefile, no generator (STYLE.md "Build").
#   make            build/shadowsync
#   make test       install deps, build, run every test (ends "N passed, N failed")
#   make demo       install deps, build, generate a small data set, train it
#   make asan|tsan  sanitizer builds in build-asan/ build-tsan/
#   make fuzz       libFuzzer targets (clang, ASan+UBSan) in build-fuzz/fuzz/
#   make GPU=0      leave the CUDA trainer out even where nvcc and NCCL are found
CC      ?= gcc
BUILD   ?= build
GEN_DIR := $(BUILD)/gen
PKGS    := thrift_c_glib gobject-2.0 glib-2.0 ompi-c openblas zlib
OPT     ?= -O3 -march=native -g
WERROR  ?= -Werror
# -fno-math-errno: nothing reads errno after a math call, and with it GCC
# vectorizes sqrtf (dense Adagrad's step over every parameter ran 4x slower
# as a call per element)
CFLAGS  += -std=c11 -D_GNU_SOURCE -fopenmp-simd -fno-math-errno -Wall -Wextra $(WERROR) -Iinclude -I$(GEN_DIR) $(OPT) \
           $(shell pkg-config --cflags $(PKGS)) -pthread
LDLIBS  += $(shell pkg-config --libs $(PKGS)) -lm -pthread

# The CUDA trainer (src/gpu/gpu.cu, DESIGN §6) is built whenever nvcc and
# NCCL are found, with code for sm_80 and sm_90 (and sm_90 PTX for newer
# chips), as $(BUILD)/libshadowsync_gpu.so, which src/gpu/loader.c opens on
# first use (a process that never uses a GPU never maps CUDA). Without it
# the loader says why there is no GPU. The CPU simulation of that library
# (src/gpu/sim.c: the same device trainer over OpenBLAS and loops) is built
# everywhere as $(BUILD)/libshadowsync_gpusim.so; the tests load it with
# SS_GPU_LIB to run trainer.device = cuda where there is no GPU.
CUDA    ?= /usr/local/cuda
NVCC    ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA)/bin/nvcc))
NCCL_H  := $(firstword $(wildcard $(CUDA)/include/nccl.h /usr/include/nccl.h))
GPU     ?= $(if $(and $(NVCC),$(NCCL_H)),1,0)
GENCODE := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]

# oneDNN (libdnnl-dev) runs the MLP matmuls where it is found (src/core/dense_onednn.c);
# without it they run on OpenBLAS. DNNL=0 leaves it out.
DNNL    ?= $(if $(wildcard /usr/include/dnnl.h),1,0)
ifeq ($(DNNL),1)
CFLAGS  += -DSS_DNNL=1
LDLIBS  += -ldnnl -lgomp
endif

# The ONNX export (src/export/, docs/export.md) packs its graph with
# protobuf-c, from the onnx.proto that Debian's python3-onnx ships,
# generated into $(GEN_DIR) at build time (never committed). Built where
# protoc-c, libprotobuf-c and that proto are found (tools/install-deps
# installs them); without them `export` says what is missing. ONNX=0 leaves it out.
ifndef ONNX_PROTO
ONNX_PROTO := $(firstword $(shell dpkg -L python3-onnx 2>/dev/null | grep '/onnx\.proto$$') \
                          $(wildcard /usr/lib/python3/dist-packages/onnx/onnx.proto))
endif
PROTOC_C ?= $(shell command -v protoc-c 2>/dev/null)
ONNX    ?= $(if $(and $(ONNX_PROTO),$(PROTOC_C),$(wildcard /usr/include/protobuf-c/protobuf-c.h)),1,0)
ifeq ($(ONNX),1)
CFLAGS  += -DSS_ONNX=1
LDLIBS  += -lprotobuf-c
ONNX_GEN := $(GEN_DIR)/onnx.pb-c.c
endif

GPU_LIB := $(if $(filter 1,$(GPU)),$(BUILD)/libshadowsync_gpu.so)
ifeq ($(GPU),1)
CFLAGS  += -DSS_GPU=1
endif
LDLIBS  += -ldl

SRC     := $(filter-out src/main.c src/gpu/sim.c,$(wildcard src/*/*.c))
OBJ     := $(SRC:%.c=$(BUILD)/%.o)
GEN_SRC := $(GEN_DIR)/ss_shadowsync_types.c $(GEN_DIR)/ss_embedding_p_s.c $(GEN_DIR)/ss_sync_p_s.c $(GEN_DIR)/ss_reader.c
GEN_OBJ := $(GEN_SRC:%.c=%.o) $(ONNX_GEN:%.c=%.o)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c tests/mpi_*.c))

FUZZ    := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

.PHONY: all test demo deps clean asan tsan bench fuzz fuzz-targets
all: $(BUILD)/shadowsync $(GPU_LIB) $(BUILD)/libshadowsync_gpusim.so $(TESTS) $(BUILD)/rpc_bench $(BUILD)/reader_bench $(BUILD)/dense_bench $(BUILD)/tests/libslowread.so

# Thrift code is generated at build time, never committed (DESIGN layout).
$(GEN_SRC) &: src/rpc/shadowsync.thrift tools/thrift-fixup
	@mkdir -p $(GEN_DIR)
	thrift --gen c_glib -out $(GEN_DIR) $<
	sh tools/thrift-fixup $(GEN_DIR)

$(GEN_DIR)/onnx.pb-c.c $(GEN_DIR)/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(GEN_DIR)
	$(PROTOC_C) --proto_path=$(dir $(ONNX_PROTO)) --c_out=$(GEN_DIR) $(ONNX_PROTO)
$(BUILD)/src/export/onnx.o: $(if $(ONNX_GEN),$(GEN_DIR)/onnx.pb-c.h)

$(GEN_DIR)/%.o: $(GEN_DIR)/%.c
	$(CC) -std=c11 -D_GNU_SOURCE -w $(OPT) $(shell pkg-config --cflags $(PKGS)) -c $< -o $@

$(BUILD)/%.o: %.c include/shadowsync/*.h $(GEN_SRC)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# every header an object includes (src/*/internal.h, src/gpu/api.h ...), as the compiler saw them
-include $(OBJ:.o=.d) $(BUILD)/src/main.d

GPU_SRC := src/gpu/api.h src/gpu/common.h src/gpu/kernels.h include/shadowsync/*.h
$(BUILD)/libshadowsync_gpu.so: src/gpu/gpu.cu $(GPU_SRC)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $@"
	@$(NVCC) -O3 -std=c++17 $(GENCODE) -shared -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra -Iinclude \
	    $(shell pkg-config --cflags ompi-c) $< -o $@ -L$(CUDA)/lib64 -lcublas -lnccl \
	    $(shell pkg-config --libs ompi-c) -Xlinker -rpath,$(CUDA)/lib64

$(BUILD)/libshadowsync_gpusim.so: src/gpu/sim.c $(GPU_SRC)
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -shared $< -o $@ $(shell pkg-config --libs openblas) -lm

$(BUILD)/libshadowsync.a: $(OBJ) $(GEN_OBJ)
	@rm -f $@; ar rcs $@ $^

$(BUILD)/shadowsync: $(BUILD)/src/main.o $(BUILD)/libshadowsync.a
	@echo "  LINK    $@"
	@$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/check.h tests/layout.h tests/rpc_check.h $(BUILD)/libshadowsync.a
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	@$(CC) $(CFLAGS) $< $(BUILD)/libshadowsync.a -o $@ $(LDLIBS)

# a hung file system for e2e_hang (LD_PRELOAD: no sanitizer, which would want to come first)
$(BUILD)/tests/libslowread.so: tests/slowread.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared $< -o $@ -ldl

$(BUILD)/rpc_bench $(BUILD)/reader_bench $(BUILD)/dense_bench: $(BUILD)/%: tools/%.c $(BUILD)/libshadowsync.a
	@echo "  LINK    $@"
	@$(CC) $(CFLAGS) $< $(BUILD)/libshadowsync.a -o $@ $(LDLIBS)

deps:
	sh tools/install-deps

test: deps
	$(MAKE) all
	sh tests/run

demo: deps
	$(MAKE) $(BUILD)/shadowsync $(GPU_LIB) $(BUILD)/libshadowsync_gpusim.so
	BIN=$(BUILD)/shadowsync sh tools/demo

bench: all
	/usr/bin/python3 tools/bench

asan:
	$(MAKE) BUILD=build-asan GPU=0 OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
	    LDLIBS="$(LDLIBS) -fsanitize=address,undefined" all
tsan:
	$(MAKE) BUILD=build-tsan GPU=0 OPT="-O1 -g -fsanitize=thread" LDLIBS="$(LDLIBS) -fsanitize=thread" all

# The fuzz targets (tests/fuzz/fuzz_*.c): the library built with clang's
# coverage and ASan+UBSan, each target linked with libFuzzer.
fuzz:
	$(MAKE) BUILD=build-fuzz GPU=0 CC=clang WERROR= \
	    OPT="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" fuzz-targets
fuzz-targets: $(FUZZ)

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_common.h $(BUILD)/libshadowsync.a
	@mkdir -p $(dir $@)
	@echo "  FUZZ    $@"
	@$(CC) $(CFLAGS) -fsanitize=fuzzer $< $(BUILD)/libshadowsync.a -o $@ $(LDLIBS)

clean:
	rm -rf build build-asan build-tsan build-fuzz build-nogpu build-dev-v4 build-dev-v3
