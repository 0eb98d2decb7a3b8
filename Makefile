# KIVI Chat: the two commands a newcomer needs are `make run` and `make test`.
# Both install what is missing first (scripts/setup.sh is idempotent).

SHELL := /bin/bash
export KIVI_MODEL ?= $(CURDIR)/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: run test setup ui app app-release bundle cli lint test-rust test-mac test-ui test-app test-package test-window fuzz gpu-check clean

## run: set up, build (optimized) and start the desktop app on the offline default model.
## A debug build of the engine decodes about three times slower, so `run` never uses one.
run: setup app-release
	scripts/run-app.sh

## test: set up, then run every test (Rust, UI unit + browser, app end-to-end, fuzz smoke)
test: setup
	scripts/test.sh

setup:
	scripts/setup.sh

ui:
	cd ui && npm run build

app: ui
	cargo build -p kivi-chat

app-release: ui
	cargo build --release -p kivi-chat

## bundle: the installers (Linux: .deb and AppImage; macOS: .app and .dmg) in target/release/bundle
bundle: setup ui
	scripts/bundle.sh

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

test-package:
	scripts/test.sh package

## fuzz: each fuzz target for 10 minutes
fuzz:
	scripts/fuzz.sh 600

## gpu-check: build and pack the Mac path's tests for an NVIDIA GPU (scripts/gpu-check.sh)
gpu-check:
	scripts/gpu-check.sh prepare

clean:
	cargo clean
	rm -rf ui/dist artifacts
