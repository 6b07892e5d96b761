"""Where work meets the engine: typed work and the engine runner, the supervised engine (its worker)."""
