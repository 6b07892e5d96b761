"""DeepL API v2: /v2/translate, languages, usage, glossaries, documents (DeepL's errors, form or JSON fields)."""
