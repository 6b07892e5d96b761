#!/usr/bin/env bash
# The multilingual model of issue 60 (docs/models-round3.md) from a finished run to a served bundle and the numbers of
# its model card:
#   bash scripts/release_multi.sh
# 1. decide: German<->Chinese direct (the model's own <2zh>/<2de> tags) or by pivot through English, measured on the
#    held-out bridge pairs (bridge-tatoeba.test) with PyTorch, beam 4, each way on its own: pivot unless direct
#    scores higher and, on sources of other domains (captions, news, Wikipedia), comes out in another language than
#    the target at most 1 point more often than pivot (model.cli off-target);
# 2. export one bundle, $REPOSITORY/multi/$VERSION (fp32 + int8 calibrated on tagged training sources of all six
#    directions; weights rounded to float16 and stored so, which keeps the release inside the issue's 80 MB: 72 MB
#    for the 24.6M model against 119 MB in float32), with every direction in its manifest and a 4-gram block by
#    default; a lexical shortlist learned on every direction's pairs, kept only if it costs at most 0.2 BLEU in each
#    direction. $OUT keeps no copy of the weights (the bundle's are the release's);
# 3. score every direction through the engine (int8, beam 4, the service's tagging; export.cli evaluate --direction)
#    on our test splits, sealed into the manifest; the reports go to $OUT/evaluation.<direction>.json;
#    a confidence map per direct direction into English or German (export.confidence --direction), fitted on
#    validation splits; and, in a second lane beside them (read-only), how often its Chinese holds Latin-script words
#    on Multi30k's test captions ($OUT/foreign-words.*.json) and step 4's previous release;
# 4. the previous release (de-en 3, zh-en 2) on the same splits: $OUT/previous.<direction>.json, and which of the
#    two should answer de->en and zh->en (the higher mean BLEU): $OUT/direction-models and $REPOSITORY/direction-models,
#    which the service reads unless MT_DIRECTION_MODELS is set.
# The run must be finished: $RUN/release (model/train.py finalize: the checkpoint average or the best) must exist.
# STAGE=export skips step 1 (DIRECT=de-zh,zh-de|zh-de|de-zh|none says which are served direct), STAGE=evaluate
# also step 2.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-runs/data/multi6}
RUN=${RUN:-runs/long/m6-d384}
PY=${PYTHON:-.venv/bin/python}
STAGE=${STAGE:-all}
OUT=${OUT:-checkpoints/multi}
REPOSITORY=${REPOSITORY:-model_repository}
VERSION=${VERSION:-1}
VARIANTS=${VARIANTS:-fp32 int8}
BEAM=${BEAM:-4}
BLOCK=${BLOCK:-4}
LIMIT=${LIMIT:-0} # a smoke run: the first N sentences of each split (scores not sealed)
CONFIDENCE_LIMIT=${CONFIDENCE_LIMIT:-500} # sentences of each split a confidence map is fitted and measured on
BUNDLE=$REPOSITORY/multi/$VERSION
export OMP_NUM_THREADS=1

if [ ! -f "$RUN/release/model.safetensors" ]; then
    echo "no $RUN/release: finish (or finalize) the run first (python -m model.cli train ... resumes and finalizes)" >&2
    exit 2
fi
mkdir -p "$OUT"

# one way's measurements: bridge BLEU direct and pivot, then the off-target checks of its splits
# off-target: translations outside the bridge's own domain (no German-Chinese reference there: only the language
# of the output is judged); zero-shot German->Chinese turned Multi30k captions into English or a mix of both
decide_way() {
    local pair=$1 && shift
    local mode extra split
    for mode in direct pivot; do
        extra=() && [ "$mode" = pivot ] && extra=(--pivot en)
        "$PY" -m model.cli evaluate --model "$RUN/release" --data "$DATA" --split bridge-tatoeba.test \
            --direction "$pair" --beam "$BEAM" --limit "$LIMIT" --threads 1 "${extra[@]}" \
            --output "$OUT/bridge.$pair.$mode.json" > /dev/null
    done
    for split in "$@"; do
        for mode in direct pivot; do
            extra=() && [ "$mode" = pivot ] && extra=(--pivot en)
            "$PY" -m model.cli off-target --model "$RUN/release" --data "$DATA" --split "$split" --direction "$pair" \
                --beam "$BEAM" --limit "${OFF_TARGET_LIMIT:-300}" --threads 1 "${extra[@]}" \
                --output "$OUT/off-target.$pair.$split.$mode.json" > /dev/null
        done
    done
}

if [ "$STAGE" = all ]; then
    # the two ways side by side, one thread each (PyTorch beam 4 is the release's slowest part)
    decide_way de-zh multi30k.test news-de.val & first=$!
    decide_way zh-de news-zh.val wiki-zh.test & second=$!
    failed=0 && { wait $first || failed=1; } && { wait $second || failed=1; }
    [ $failed = 0 ] || { echo "the German<->Chinese measurements failed" >&2; exit 1; }
    DIRECT=$("$PY" - "$OUT" "$BEAM" <<'EOF'
import glob, json, sys
out, beam = sys.argv[1], f"beam{sys.argv[2]}"
score = lambda p, m: json.load(open(f"{out}/bridge.{p}.{m}.json"))["results"][beam]["bleu"]
direct = []
for p in ("de-zh", "zh-de"):
    ok = score(p, "direct") > score(p, "pivot")
    print(f"{p}: bridge BLEU direct {score(p, 'direct')} pivot {score(p, 'pivot')}", file=sys.stderr)
    for path in sorted(glob.glob(f"{out}/off-target.{p}.*.direct.json")):
        d, v = json.load(open(path)), json.load(open(path.replace(".direct.", ".pivot.")))
        ok &= d["share"] <= v["share"] + 0.01  # in another language at most 1 sentence in 100 more often than pivot
        print(f"{p} {d['split']}: off-target direct {d['share']:.1%} pivot {v['share']:.1%}", file=sys.stderr)
    direct += [p] if ok else []
print(",".join(direct) or "none")
EOF
)
fi
DIRECT=${DIRECT:-none}
[ "$DIRECT" = yes ] && DIRECT=de-zh,zh-de
DIRECTIONS=de-en,en-de,zh-en,en-zh
for pair in de-zh zh-de; do
    case ",$DIRECT," in
        *",$pair,"*) DIRECTIONS+=",$pair" ;;
        *) DIRECTIONS+=",$pair:pivot=en" ;;
    esac
done
echo "directions: $DIRECTIONS" >&2

if [ "$STAGE" = all ] || [ "$STAGE" = export ]; then
    cp "$RUN"/release/model.safetensors "$RUN"/release/config.json "$RUN"/release/tokenizer.model "$OUT"/
    cp "$RUN"/curve.png "$RUN"/log.jsonl "$OUT"/ 2>/dev/null || true
    cp "$DATA"/prepare.json "$OUT"/
    # int8 ranges from the sources as the model saw them: tagged lines of every direction (train.src)
    shuf -n 4000 --random-source=<(yes) "$DATA"/train.src > "$OUT"/calibration.src
    "$PY" -m export.cli export --model "$OUT" --out "$BUNDLE" --name multi --version "$VERSION" \
        --variants $VARIANTS --directions "$DIRECTIONS" --calibration-data "$OUT"/calibration.src --force \
        --float16-storage
    rm "$OUT"/calibration.src "$OUT"/model.safetensors  # one copy of the weights in the clone: the bundle's
    "$PY" -m export.cli decoding --bundle "$BUNDLE" --no-repeat-ngram-size "$BLOCK" \
        --why "scripts/release_multi.sh: the general-domain release's loops (docs/general-domain.md)"
    # The lexical shortlist, learned on the tagged sources of every direction (a tag is a source piece too: its
    # candidates are its language's frequent pieces), on a copy; kept only if int8 beam-4 BLEU stays within 0.2 of
    # the whole vocabulary on the first test split of every direction (export.cli compare).
    folder=$OUT/shortlist-data && mkdir -p "$folder"
    ln -sf "$(realpath "$DATA"/train.src)" "$folder"/train.de  # the manifest's own pair names the files: de-en
    ln -sf "$(realpath "$DATA"/train.tgt)" "$folder"/train.en
    trial=$(mktemp -d)/multi/$VERSION && mkdir -p "$(dirname "$trial")" && cp -r "$BUNDLE" "$trial"
    "$PY" -m export.cli shortlist --bundle "$trial" --data "$folder" --limit "${SHORTLIST_PAIRS:-400000}" > /dev/null
    keep=yes
    for check in de-en:multi30k.test en-de:multi30k.test zh-en:wiki-zh.test en-zh:wiki-zh.test \
        de-zh:bridge-tatoeba.test zh-de:bridge-tatoeba.test; do
        d=${check%%:*} && split=${check#*:}
        for b in "$BUNDLE:whole" "$trial:shortlist"; do
            "$PY" -m export.cli evaluate --bundle "${b%:*}" --data "$DATA" --direction "$d" --split "$split" \
                --beam "$BEAM" --variants int8 --no-seal --limit "$LIMIT" \
                --report "$OUT/shortlist-check.$d.${b##*:}.json" > /dev/null
        done
        "$PY" -m export.cli compare --base "$OUT/shortlist-check.$d.whole.json" \
            --candidate "$OUT/shortlist-check.$d.shortlist.json" --max-loss 0.2 || keep=no
    done
    if [ $keep = yes ]; then
        rm -rf "$BUNDLE" && cp -r "$trial" "$BUNDLE" && echo "$BUNDLE: shortlist kept" >&2
    else
        echo "$BUNDLE: shortlist left out (over 0.2 BLEU lost; see $OUT/shortlist-check.*.json)" >&2
    fi
    rm -rf "$(dirname "$(dirname "$trial")")" "$folder"
fi

# Read-only measurements, in a second lane beside the scoring and the confidence fits (which seal into the manifest
# one after the other; core/bundle.py write_manifest replaces it whole, so a load here never reads half of one)
measure_aside() {
    # Chinese written with Latin-script words (the service's foreign_words warning; multi 1 leaked German words into
    # English->Chinese) on Multi30k's test captions: $OUT/foreign-words.<direction>.json
    for way in en-zh:en de-zh:de; do
        part=() && [ "$LIMIT" != 0 ] && part=(--limit "$LIMIT")
        "$PY" -m export.foreign_words --bundle "$BUNDLE" --input "$DATA/multi30k.test.${way#*:}" \
            --direction "${way%:*}" --beam "$BEAM" --output "$OUT/foreign-words.${way%:*}.json" "${part[@]}" > /dev/null
    done
    # the previous release (one bundle per direction into English) on the same splits, for the card's comparison
    previous() {
        local bundle=$1 direction=$2 && shift 2
        [ -d "$bundle" ] || return 0
        local part=() && [ "$LIMIT" != 0 ] && part=(--limit "$LIMIT")
        "$PY" -m export.cli evaluate --bundle "$bundle" --data "$DATA" --split "$@" --beam "$BEAM" \
            --variants int8 --no-seal --report "$OUT/previous.$direction.json" "${part[@]}" > /dev/null
    }
    previous "${PREVIOUS_DE:-model_repository/de-en/3}" de-en multi30k.test tatoeba-de.test news-de.val
    previous "${PREVIOUS_ZH:-model_repository/zh-en/2}" zh-en wiki-zh.test tatoeba-zh.test tico-zh.test news-zh.val
}
measure_aside & aside=$!

# every direction on its test splits (the first split of a direction is its headline in the card)
score() {
    local direction=$1 && shift
    local seal=() && [ "$LIMIT" != 0 ] && seal=(--limit "$LIMIT")
    "$PY" -m export.cli evaluate --bundle "$BUNDLE" --data "$DATA" --direction "$direction" --split "$@" \
        --beam "$BEAM" --variants int8 --report "$OUT/evaluation.$direction.json" "${seal[@]}" > /dev/null
}
score de-en multi30k.test tatoeba-de.test news-de.val
score en-de multi30k.test tatoeba-de.test news-de.val
score zh-en wiki-zh.test tatoeba-zh.test tico-zh.test news-zh.val
score en-zh wiki-zh.test tatoeba-zh.test tico-zh.test news-zh.val
score de-zh bridge-tatoeba.test
score zh-de bridge-tatoeba.test
# a confidence map per direct direction into English or German (export.confidence --direction; the service's
# `confidence` and `low_confidence`), fitted on validation splits and measured on test splits of its languages, one
# after the other (each re-seals the manifest): $OUT/confidence.<direction>.json. None into Chinese: sentence chrF
# >= 50 is rare for Chinese text whatever its quality (5.9% of multi 1's en-zh on our test splits; "今天天气很好。"
# mapped to 0.29), so such a map would flag nearly every answer; those answers carry no confidence
# (docs/models-round3.md)
confidence_map() {
    local direction=$1 fit=$2 test=$3
    # shellcheck disable=SC2086  # the split lists are words
    "$PY" -m export.confidence --bundle "$BUNDLE" --data "$DATA" --direction "$direction" --fit-split $fit \
        --test-split $test --beam "$BEAM" --limit "$CONFIDENCE_LIMIT" > "$OUT/confidence.$direction.json"
}
confidence_map de-en "multi30k.val tatoeba-de.val" "multi30k.test tatoeba-de.test"
confidence_map en-de "multi30k.val tatoeba-de.val" "multi30k.test tatoeba-de.test"
confidence_map zh-en "tatoeba-zh.val wiki-zh.val tico-zh.val" "tatoeba-zh.test wiki-zh.test tico-zh.test"
if [[ ",$DIRECT," == *",zh-de,"* ]]; then
    confidence_map zh-de bridge-tatoeba.val bridge-tatoeba.test
fi
wait $aside || { echo "the foreign-words or previous-release measurements failed" >&2; exit 1; }
# which model answers de->en and zh->en once both are served: the higher mean int8 BLEU on the splits both were
# scored on (MT_DIRECTION_MODELS; without it, zh->en would go to "multi" before "zh-en" by name)
"$PY" - "$OUT" "$BEAM" > "$OUT"/direction-models <<'EOF'
import json, os, sys
out, beam = sys.argv[1], f"beam{sys.argv[2]}"
chosen = []
for direction in ("de-en", "zh-en"):
    if not os.path.exists(f"{out}/previous.{direction}.json"):
        continue
    new, old = (json.load(open(f"{out}/{kind}.{direction}.json"))["int8"] for kind in ("evaluation", "previous"))
    splits = sorted(set(new) & set(old))
    mean = lambda r: sum(r[s][beam]["bleu"] for s in splits) / len(splits)
    winner = "multi" if mean(new) > mean(old) else direction
    print(f"{direction}: multi {mean(new):.2f}, previous {mean(old):.2f} (mean BLEU on {', '.join(splits)})",
          file=sys.stderr)
    chosen.append(f"{direction}={winner}")
print(",".join(chosen))
EOF
cp "$OUT"/direction-models "$REPOSITORY"/direction-models # the service's default (MT_DIRECTION_MODELS overrides it)
echo "serve with MT_DIRECTION_MODELS=$(cat "$OUT"/direction-models) (written to $OUT/direction-models and" \
    "$REPOSITORY/direction-models, which the service reads when the setting is empty)" >&2
echo "wrote $BUNDLE, $OUT/evaluation.*.json and $OUT/previous.*.json" >&2
