"""The bundled checkpoint translates sentences of our own writing into recognisable German."""

from pathlib import Path

import sacrebleu

from model.checkpoint import load_checkpoint
from model.evaluate import translate_corpus

BUNDLED = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"
PAIRS = [
    ("A brown dog is running through the grass.", "Ein brauner Hund rennt durch das Gras."),
    ("Two children are playing soccer in a park.", "Zwei Kinder spielen Fußball in einem Park."),
    ("A man in a red jacket is climbing a rock.", "Ein Mann in einer roten Jacke klettert an einem Felsen."),
    ("An old woman is selling vegetables at a market.", "Eine alte Frau verkauft Gemüse auf einem Markt."),
    ("A group of people are standing in front of a building.", "Eine Gruppe von Menschen steht vor einem Gebäude."),
    ("A girl with a blue hat is riding a bicycle.", "Ein Mädchen mit einem blauen Hut fährt Fahrrad."),
]


def test_bundled_checkpoint_translates_into_recognisable_german():
    model, tokenizer, meta = load_checkpoint(BUNDLED)
    hyps = translate_corpus(model, tokenizer, [en for en, _ in PAIRS])
    chrf = sacrebleu.corpus_chrf(hyps, [[de for _, de in PAIRS]]).score
    assert chrf >= 50, f"chrF {chrf:.1f}: {hyps}"
    assert len(set(hyps)) == len(hyps), "the same output for different inputs: the model ignores its source"
    assert model.num_parameters() * 4 < 50e6 and meta["command"].startswith("nmt-train ")
