"""One folder per protocol the service speaks: its routes (HTTP), its schemas, and its mapping of a request to the
one typed request (engine/decoding.py TranslateOptions) and the serving layer (service/serving/)."""
