"""LibreTranslate's API: /translate, /detect, /languages, /translate_file, /download_file."""
