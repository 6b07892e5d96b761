"""Ten everyday German sentences translated by two de-en models side by side (beam 4), as a markdown table.

.venv/bin/python scripts/everyday_de_en.py checkpoints/de-en checkpoints/de-en-v2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from model.checkpoint import TOKENIZER_FILE, load_release
from model.evaluate import translate
from model.tokenizer import Tokenizer

# Written for this comparison; the first two are the examples, the last is in Multi30k's caption style.
# Four (how are you, the station, the lost key, see you tomorrow) turned out to be in Tatoeba's training split.
SENTENCES = [
    "Wie geht es dir?",
    "Ich möchte morgen einen Termin beim Arzt vereinbaren.",
    "Wo ist der Bahnhof?",
    "Kannst du mir bitte helfen?",
    "Ich habe heute keine Zeit.",
    "Wie viel kostet das?",
    "Ich habe meinen Schlüssel verloren.",
    "Das Wetter ist heute schön.",
    "Wir sehen uns morgen.",
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="released model folders")
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args()
    columns = []
    for folder in args.models:
        model, _ = load_release(folder)
        columns.append(translate(model, Tokenizer(Path(folder) / TOKENIZER_FILE), SENTENCES, args.beam, 0.6))
    print("| German | " + " | ".join(f"`{m}`" for m in args.models) + " |")
    print("|---" * (len(args.models) + 1) + "|")
    for i, sentence in enumerate(SENTENCES):
        print(f"| {sentence} | " + " | ".join(column[i] for column in columns) + " |")


if __name__ == "__main__":
    main()
