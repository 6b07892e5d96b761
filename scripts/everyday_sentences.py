"""Everyday sentences translated by one or more models side by side (beam 4), a markdown table per direction.

python scripts/everyday_sentences.py checkpoints/de-en checkpoints/de-en-v2
python scripts/everyday_sentences.py runs/long/m6-d384/release --directions de-en en-de zh-en en-zh de-zh zh-de

A model folder is a release (model.safetensors, config.json) with its tokenizer.model beside the weights or in the
folder above (a run's best/ or release/). A multilingual model (its tokenizer holds the target tags) gets each source
tagged with the direction's target; a single-direction model is given the sentences as they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from model.checkpoint import load_release, tokenizer_path
from model.directions import TAGS, tagged
from model.evaluate import translate
from model.tokenizer import Tokenizer

# Written for these comparisons; German's first two are issue examples, its last is in Multi30k's caption style.
# Four German ones (how are you, the station, the lost key, see you tomorrow) turned out to be in Tatoeba's training
# split; the Chinese and English ones were written later, in the same spirit (a question, a request, a number).
SENTENCES = {
    "de": [
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
    ],
    "zh": [
        "我明天要去北京开会。",
        "这家餐厅的菜很好吃，但是价格有点贵。",
        "请问火车站怎么走？",
        "他每天早上跑步一个小时。",
        "你能帮我一个忙吗？",
        "这件衬衫多少钱？",
        "我把手机忘在出租车上了。",
        "今天下雨，我们改天再去公园吧。",
        "中国经济今年增长了百分之五。",
        "孩子们在海边玩沙子。",
    ],
    "en": [
        "How are you?",
        "I would like to make an appointment with the doctor tomorrow.",
        "Where is the train station?",
        "Can you tell me when the next train to Munich leaves?",
        "The phone is fast, but the battery only lasts half a day.",
        "How much does this cost?",
        "I read the book you recommended, and I liked it very much.",
        "The government plans to cut taxes for small businesses next year.",
        "See you tomorrow.",
        "A woman is walking her dog in the park.",
    ],
}


def is_multilingual(tokenizer: Tokenizer) -> bool:
    return TAGS["en"] in tokenizer.pieces(tokenizer.encode(TAGS["en"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="released model folders")
    parser.add_argument("--directions", nargs="+", default=["de-en"], help="e.g. de-en en-zh (default: de-en)")
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args()
    loaded = []
    for folder in args.models:
        tokenizer = Tokenizer(tokenizer_path(folder))
        loaded.append((load_release(folder)[0], tokenizer, is_multilingual(tokenizer)))
    for direction in args.directions:
        sentences = SENTENCES[direction.split("-")[0]]
        columns = []
        for model, tokenizer, multilingual in loaded:
            sources = [tagged(s, direction) for s in sentences] if multilingual else sentences
            columns.append(translate(model, tokenizer, sources, args.beam, 0.6))
        print(f"\n### {direction}\n\n| source | " + " | ".join(f"`{m}`" for m in args.models) + " |")
        print("|---" * (len(args.models) + 1) + "|")
        for i, sentence in enumerate(sentences):
            print(f"| {sentence} | " + " | ".join(column[i] for column in columns) + " |")


if __name__ == "__main__":
    main()
