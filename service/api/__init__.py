"""HTTP layer: schemas, routes, middleware and error handlers over the registry and schedulers."""
