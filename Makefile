# One target per check; .ci/run calls them in this order, then the README's test command.
.PHONY: ci fmt clippy doc unused-deps test

ci: fmt clippy doc unused-deps test

# Formatting is rustfmt.toml's, checked, never rewritten in CI.
fmt:
	cargo fmt --all -- --check

# Lints as errors, tests and examples included (clippy.toml says why each setting is there).
clippy:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p probelet-actors --features jemalloc --examples -- -D warnings

# The API docs build without a warning (a broken link, an undocumented public engine item).
doc:
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

# Every declared dependency is used (see the script for what it checks).
unused-deps:
	.ci/unused-deps

# The README's test command: the whole suite.
test:
	cargo test --workspace
