# KIVI Chat: the two commands a newcomer needs are `make run` and `make test`.
# Both install what is missing first (scripts/setup.sh is idempotent).

SHELL := /bin/bash
export KIVI_MODEL ?= $(CURDIR)/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: run test setup ui app cli lint test-rust test-mac test-ui test-app test-window fuzz gpu-check clean

## run: set up, build and start the desktop app on the offline default model
ifeq ($(shell uname -s),Darwin)
# On a Mac the app runs on the GPU through MLX built from source; a debug build of the
# engine (and its per-array GPU-stream guard) would make every answer slow.
run: setup ui
	cargo build --release -p kivi-chat
	scripts/run-app.sh
else
run: setup app
	scripts/run-app.sh
endif

## test: set up, then run every test (Rust, UI unit + browser, app end-to-end, fuzz smoke)
test: setup
	scripts/test.sh

setup:
	scripts/setup.sh

ui:
	cd ui && npm run build

app: ui
	cargo build -p kivi-chat

cli:
	cargo build -p kivi-cli

lint:
	scripts/test.sh lint

test-rust:
	scripts/test.sh rust

test-mac:
	scripts/test.sh mac

test-ui:
	scripts/test.sh ui

test-app:
	scripts/test.sh app

## fuzz: each fuzz target for 10 minutes
fuzz:
	scripts/fuzz.sh 600

## gpu-check: build and pack the Mac path's tests for an NVIDIA GPU (scripts/gpu-check.sh)
gpu-check:
	scripts/gpu-check.sh prepare

clean:
	cargo clean
	rm -rf ui/dist artifacts
