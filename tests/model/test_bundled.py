"""The bundled checkpoints translate sentences of our own writing into recognisable German and French."""

from pathlib import Path

import sacrebleu

from model.checkpoint import load_checkpoint
from model.evaluate import translate_corpus

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
BUNDLED = CHECKPOINTS / "multi30k-en-de"
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


FRENCH = [
    ("A brown dog is running through the grass.", "Un chien marron court dans l'herbe."),
    ("Two children are playing soccer in a park.", "Deux enfants jouent au football dans un parc."),
    ("A man in a red jacket is climbing a rock.", "Un homme en veste rouge escalade un rocher."),
    ("An old woman is selling vegetables at a market.", "Une vieille femme vend des légumes sur un marché."),
    ("A group of people are standing in front of a building.", "Un groupe de personnes se tient devant un bâtiment."),
    ("A girl with a blue hat is riding a bicycle.", "Une fille avec un chapeau bleu fait du vélo."),
]


def test_the_bundled_french_checkpoint_translates_into_recognisable_french_and_records_its_scores():
    model, tokenizer, meta = load_checkpoint(CHECKPOINTS / "multi30k-en-fr")
    hyps = translate_corpus(model, tokenizer, [en for en, _ in FRENCH])
    chrf = sacrebleu.corpus_chrf(hyps, [[fr for _, fr in FRENCH]]).score
    assert chrf >= 50, f"chrF {chrf:.1f}: {hyps}"
    assert len(set(hyps)) == len(hyps), "the same output for different inputs: the model ignores its source"
    assert (meta["source_language"], meta["target_language"]) == ("en", "fr")
    assert {"val", "test_2016_flickr"} <= set(meta["scores"]) and meta["training_data"]["train_tgt"].endswith(".fr.gz")
