"""Command-line helpers that talk to a running service over HTTP (no model loading, no torch)."""
