"""What the service tells about itself: logs (JSON lines), Prometheus metrics, Triton's per-model statistics."""
