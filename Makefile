# Everyday targets. Release builds: scripts/release.sh (see its header).
GO ?= go

.PHONY: build test test-install test-container release package ci

build:
	$(GO) build ./...

test:
	$(GO) test -race ./...

# Installs, starts, stops and uninstalls the real systemd service on this
# machine (root and systemd as PID 1 required); see
# installer/install_integration_test.go.
test-install:
	sudo env PATH="$$PATH" RXEDGE_TEST_INSTALL=1 $(GO) test -count=1 -run TestInstallIntegration -v ./installer

# Boots systemd in a container and runs the install and package tests in
# it (root; see scripts/systemd-container.sh).
test-container:
	sudo env PATH="$$PATH" bash scripts/systemd-container.sh

release:
	bash scripts/release.sh

package:
	bash scripts/package.sh

ci:
	bash .ci/run
