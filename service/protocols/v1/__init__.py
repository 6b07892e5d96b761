"""The service's own API, /v1: translate (and its stream), embed, attention, models, glossaries, documents."""
