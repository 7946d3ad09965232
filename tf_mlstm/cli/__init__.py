"""Command-line binaries (absl): define flags, build one frozen config, call the library."""
