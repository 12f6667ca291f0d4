"""A many-to-many model (NLLB-200's layout, a tiny random M2M100 built by transformers and imported by nmt-import)
served over HTTP: any direction per request, directions mixed in one running batch, and every answer the one that
transformers' generate(forced_bos_token_id=...) and batch_decode give."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.settings import Settings
from tests.app.conftest import MODES, core_of, serve_in
from tests.app.helpers import assert_handled
from tests.app.multilingual import BUDGET, PER_DIRECTION, generate
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import import_all, model_directories

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
pytestmark = pytest.mark.anyio
# (source as the request names it, its NLLB code, target as the request names it, its code, the sentences' language)
DIRECTIONS = [("de", "deu_Latn", "fra", "fra_Latn", "de"), ("eng_Latn", "eng_Latn", "de-DE", "deu_Latn", "en"),
              ("FR", "fra_Latn", "en", "eng_Latn", "fr")]  # fmt: skip


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    sources = model_directories(tmp_path_factory.mktemp("sources"), ("nllb",))
    return sources["nllb"], import_all(sources, tmp_path_factory.mktemp("imported"))["nllb"]


@pytest.fixture(scope="module")
def hf(dirs):
    return transformers.M2M100ForConditionalGeneration.from_pretrained(dirs[0]).eval()


@pytest.fixture(scope="module")
def hf_eager(dirs):
    """The same model with eager attention, which output_attentions needs."""
    return transformers.M2M100ForConditionalGeneration.from_pretrained(dirs[0], attn_implementation="eager").eval()


@pytest.fixture(scope="module", params=MODES)
async def served(dirs, request):
    settings = Settings(model_dir=dirs[1], compile=False, max_new_tokens=BUDGET, max_input_tokens=64)
    async with serve_in(request.param, settings) as pair:
        yield pair


@pytest.fixture
def client(served):
    return served[1]


async def test_three_directions_at_once_give_generates_tokens_and_text_in_one_running_batch(served, client, hf, dirs):
    app, _ = served
    core = core_of(app)
    core.batcher.peak_rows = 0
    cases = [(src, tgt, held_out_sentences(lang)[:PER_DIRECTION]) for src, _, tgt, _, lang in DIRECTIONS]
    answers = await asyncio.gather(*(
        client.post("/translate", json={"text": texts, "source": src, "target": tgt, "return_tokens": True})
        for src, tgt, texts in cases
    ))  # fmt: skip
    assert core.batcher.peak_rows > PER_DIRECTION  # rows of more than one direction stepped together
    for (_, src, _, tgt, _), (_, _, texts), r in zip(DIRECTIONS, cases, answers):
        assert r.status_code == 200, r.text
        ids, wanted = generate(hf, dirs, src, tgt, texts, num_beams=1)
        got = r.json()["translations"]
        assert [t["token_ids"] for t in got] == ids
        assert [t["text"] for t in got] == wanted


async def test_beam_search_n_best_and_alignment_per_direction(client, hf, dirs):
    _, src, _, tgt, lang = DIRECTIONS[0]
    texts = held_out_sentences(lang)[20:26]
    r = await client.post("/translate", json={
        "text": texts, "source": "deu", "target": "fr", "beam_size": 4, "num_hypotheses": 2, "return_tokens": True,
        "return_alignment": True,
    })  # fmt: skip
    assert r.status_code == 200, r.text
    ids, wanted = generate(hf, dirs, src, tgt, texts, num_beams=4)
    for t, want, text in zip(r.json()["translations"], ids, wanted):
        assert t["token_ids"] == want and t["text"] == text
        assert len(t["hypotheses"]) == 2
        assert len(t["alignment"]) == len(t["token_ids"])


async def test_alignments_point_at_the_source_s_words_never_at_its_language_code_or_end(client):
    """NLLB's source is `code text </s>`: a target token aligns to a token of the text (a span of characters in it),
    however much the attention rests on the code, as it does in this random model."""
    for _, _, _, _, lang in DIRECTIONS:
        texts = held_out_sentences(lang)[:40]
        for beams in (1, 3):
            r = await client.post("/translate", json={"text": texts, "source": lang, "target": "fr",
                                                      "beam_size": beams, "return_alignment": True})  # fmt: skip
            assert r.status_code == 200, r.text
            for text, t in zip(texts, r.json()["translations"]):
                assert t["alignment"]
                for a in t["alignment"]:
                    start, end = a["source_span"]
                    assert 0 <= start < end <= len(text) and a["source_token"] >= 1, (text, a)


@pytest.mark.parametrize("text", ["Über den Fluss.", "(Ein Hund)", "«Ein Hund»", "x", "Qatar", "42 Hunde."])
def test_a_piece_of_no_characters_aligns_to_the_word_it_starts(dirs, text):
    """A vocabulary without "▁Ü" splits "Über" into "▁" "Ü" "ber": a target token aligned to the "▁" pointed at the
    empty span [0, 0] of the text."""
    from app.text.results import aligned
    from model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(dirs[1])
    pieces = [(t.start, t.end) for t in tokenizer.tokenize(text, "source")]
    (lone,) = [i for i, (a, b) in enumerate(pieces[:-1]) if i and a == b]  # not the code (0) nor </s> (the last)
    (a,) = aligned(tokenizer, text, "x", [tokenizer.eos_id], [lone])
    assert a.source_span == pieces[lone + 1] and a.source_span[0] < a.source_span[1]


async def test_a_stream_and_a_document_are_the_plain_answers_pieces(client):
    body = {"text": "Ein Hund läuft. Zwei Kinder spielen im Park.", "source": "de", "target": "en"}
    plain = (await client.post("/translate", json=body)).json()["translations"][0]["text"]
    async with client.stream("POST", "/translate", json={**body, "stream": True}) as r:
        events = [json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["text"] == plain
    alone = [
        (await client.post("/translate", json={**body, "text": t}, timeout=30)).json()["translations"][0]["text"]
        for t in ("Ein Hund läuft.", "Zwei Kinder spielen im Park.")
    ]
    assert plain == " ".join(alone)  # each sentence decoded as a row of its own


async def test_auto_detects_the_source_among_the_model_s_languages_and_says_which(client):
    body = {"text": ["Zwei junge Männer spielen auf einer Wiese Fußball.", "Ein Hund."], "target": "fr",
            "return_scores": True}  # fmt: skip
    auto = (await client.post("/translate", json={**body, "source": "auto"})).json()
    left_out = (await client.post("/translate", json=body)).json()
    named = (await client.post("/translate", json={**body, "source": "de"})).json()
    assert [t.pop("detected_source") for t in auto["translations"]] == ["de", "de"]
    assert [t.pop("detected_source") for t in left_out["translations"]] == ["de", "de"]
    assert auto == left_out == named  # named: no detected_source
    async with client.stream("POST", "/translate", json={**body, "text": body["text"][0], "stream": True}) as r:
        events = [json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["detected_source"] == "de" and events[-1]["text"] == named["translations"][0]["text"]
    async with client.stream("POST", "/translate", json={**body, "text": "Ein Hund.", "source": "de",
                                                         "stream": True}) as r:  # fmt: skip
        events = [json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")]
    assert "detected_source" not in events[-1]
    other = await client.post("/translate", json={**body, "source": "en"})
    assert other.json() != named  # the source language's code is part of the input


async def test_a_list_with_auto_detects_each_text_s_language_and_translates_it_from_that_one(client, dirs):
    mixed = [
        "Zwei junge Männer spielen auf einer Wiese Fußball.",
        "A little girl climbs into a wooden playhouse.",
        "Un homme avec un chapeau orange regarde quelque chose.",
        "Danke.",
        "Ein Hund rennt durch den Schnee.",
    ]
    languages = ["de", "en", "fr", "de", "de"]  # "Danke." alone is too short to tell: it leans on the others
    body = {"text": mixed, "target": "fr", "return_tokens": True, "return_scores": True, "split": "none"}
    r = await client.post("/translate", json={**body, "source": "auto"})
    assert r.status_code == 200, r.text
    got = r.json()["translations"]
    assert [t.pop("detected_source") for t in got] == languages
    for text, language, t in zip(mixed, languages, got, strict=True):  # each from its own language's code
        named = (await client.post("/translate", json={**body, "text": text, "source": language})).json()
        alone = named["translations"][0]  # the same tokens, the score as a batch of another shape computes it
        assert (alone["token_ids"], alone["text"]) == (t["token_ids"], t["text"]), text
        assert alone["score"] == pytest.approx(t["score"], abs=1e-3)
    unlike = (await client.post("/translate", json={**body, "source": "de"})).json()["translations"]
    for i in (1, 2):  # the English and the French text read as German: the code is part of the input
        assert (unlike[i]["token_ids"], unlike[i]["score"]) != (got[i]["token_ids"], pytest.approx(got[i]["score"]))
    libre = await client.post("/libretranslate/translate", json={"q": mixed[:2], "source": "auto", "target": "fr"})
    assert libre.status_code == 200, libre.text  # LibreTranslate's: one language for the list, as the original
    deepl = await client.post("/v2/translate", json={"text": mixed, "target_lang": "FR"})
    assert deepl.status_code == 200, deepl.text
    said = deepl.json()["translations"]
    assert [t["detected_source_language"] for t in said] == [code.upper() for code in languages]
    for language in set(languages):
        named = await client.post("/v2/translate", json={"text": mixed, "source_lang": language, "target_lang": "FR"})
        alike = [t["text"] for t, lang in zip(named.json()["translations"], languages, strict=True) if lang == language]
        assert alike == [t["text"] for t, lang in zip(said, languages, strict=True) if lang == language]


async def test_a_list_in_several_languages_is_one_request_within_its_limits(dirs):
    settings = Settings(
        model_dir=dirs[1],
        compile=False,
        max_new_tokens=BUDGET,
        max_input_tokens=64,
        max_batch_texts=3,
        max_request_sequences=3,
    )
    texts = ["Ein Hund rennt. Eine Katze schläft.", "A dog runs. A cat sleeps."]  # two of each: four in all
    async with serve_in(MODES[0], settings) as (_, client):
        for source in ("de", "en"):  # each language's alone fits
            r = await client.post("/translate", json={"text": texts, "source": source, "target": "fr"})
            assert r.status_code == 413 and "at most 3" in r.json()["error"]
            r = await client.post("/translate", json={"text": texts[source == "en"], "source": source, "target": "fr"})
            assert r.status_code == 200, r.text
        r = await client.post("/translate", json={"text": texts, "source": "auto", "target": "fr"})
        assert r.status_code == 413, r.text
        assert "at least 4 sentences" in r.json()["error"] and "at most 3" in r.json()["error"]
        r = await client.post("/translate", json={"text": ["Ein Hund.", "A dog.", "x" * 9999], "source": "auto",
                                                  "target": "fr"})  # fmt: skip
        assert r.status_code == 413 and "text[2] has" in r.json()["error"], r.text  # named by its place in the list


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"source": "de"}, 422, "name the target"),
        ({"source": "de", "target": "xx"}, 422, "does not translate target 'xx'; it has 20[0-9] languages"),
        ({"source": "q!", "target": "fr"}, 422, "source 'q!' is not a language code"),
        ({"source": "de", "target": "pa-PK"}, 422, "does not write target 'pa-PK' in the Arab script; it has pan_Guru"),
        ({"source": "auto", "text": "   ", "target": "fr"}, 422, "the text is blank"),
        ({"model": "nope", "target": "fr"}, 422, "there is no model 'nope'"),
    ],
)
async def test_a_language_it_does_not_have_is_a_422_that_lists_what_it_has(client, body, status, message):
    import re

    r = await client.post("/translate", json={"text": "Ein Hund.", **body})
    assert r.status_code == status, r.text
    assert re.search(message, r.json()["error"]), r.json()


@pytest.mark.parametrize(
    "fields, message",
    [({"source": "de"}, "name the target"), ({"target": "xx"}, "does not translate target 'xx'"),
     ({"model": "nllb", "source": "de", "target": "sr-Latn"}, "does not write target 'sr-Latn' in the Latn script"),
     ({"model": "nllb", "source": "xx", "target": "fr"}, "source 'xx'")],
)  # fmt: skip
async def test_a_file_upload_naming_no_target_or_one_the_model_lacks_is_a_422_before_any_job(client, fields, message):
    """The job once took such a file (202) and failed later, saying what the upload should have been told."""
    r = await client.post("/files", files={"file": ("a.txt", b"Ein Hund.")}, data=fields)
    assert r.status_code == 422 and message in r.json()["error"], r.text


async def test_a_blank_text_with_no_source_language_is_translated_as_blank_by_every_api(client):
    """Detection has nothing to go on: English where the model has it (as LibreTranslate), not the first of its
    languages (NLLB's Acehnese, in Arabic script), which DeepL's route then refused."""
    deepl = await client.post("/deepl/v2/translate", json={"text": [""], "target_lang": "FR"})
    assert deepl.status_code == 200 and deepl.json()["translations"][0]["text"] == "", deepl.text
    libre = await client.post("/libretranslate/translate", json={"q": " ", "source": "auto", "target": "fr"})
    assert libre.status_code == 200 and libre.json()["detectedLanguage"]["language"] == "en", libre.text


async def test_the_language_of_html_is_detected_from_its_words_not_its_markup(client):
    page = ('<div class="navigation-container main-content wrapper" id="section-header-content" data-role="main">'
            '<span style="font-weight: bold; color: red">Ein Hund läuft über die Wiese.</span></div>')  # fmt: skip
    libre = await client.post("/libretranslate/translate", json={"q": page, "source": "auto", "target": "fr",
                                                                 "format": "html"})  # fmt: skip
    assert libre.json()["detectedLanguage"]["language"] == "de", libre.text
    deepl = await client.post("/deepl/v2/translate", json={"text": [page], "target_lang": "FR", "tag_handling": "html"})
    assert deepl.json()["translations"][0]["detected_source_language"] == "DE", deepl.text
    tokens = {}
    for source in ("auto", "de"):
        body = {"text": page, "format": "html", "source": source, "target": "fr", "return_tokens": True}
        tokens[source] = (await client.post("/translate", json=body)).json()["translations"][0]["token_ids"]
    assert tokens["auto"] == tokens["de"]


async def test_languages_the_detector_names_otherwise_are_detected_as_the_models_own(client):
    """NLLB's Norwegian Bokmål (`nb`) is py3langid's `no`, its North Azerbaijani (`az-Latn`) py3langid's `az`: without
    the aliases they were never candidates, and Norwegian came out Danish, Azerbaijani Crimean Tatar."""
    for text, code in (
        ("Norge er et land i Nord-Europa. Hovedstaden heter Oslo, og landet har omtrent fem millioner innbyggere.",
         "nob_Latn"),
        ("Azərbaycan Respublikası Cənubi Qafqazda yerləşən dövlətdir. Paytaxtı Bakı şəhəridir.", "azj_Latn"),
    ):  # fmt: skip
        r = await client.post("/tokenize", json={"text": text, "language": "auto"})
        assert r.json()["results"][0]["tokens"][0]["text"] == code, r.text


async def test_auto_detects_the_script_a_language_is_written_in_where_the_model_has_several(client):
    """The detector tells languages apart, not scripts: Traditional Chinese was read as Simplified (`zho_Hans`). And
    a Chinese sentence in a list leans on the list no more than a sentence of letters (it was read as German: its 16
    characters counted as 16 letters)."""
    traditional, simplified = "我們今天去公園散步，天氣非常好。", "我们今天去公园散步，天气非常好。"
    for text, code, name in ((traditional, "zho_Hant", "zh-Hant"), (simplified, "zho_Hans", "zh")):
        r = await client.post("/tokenize", json={"text": text, "language": "auto"})
        assert r.json()["results"][0]["tokens"][0]["text"] == code, r.text
        r = await client.post("/translate", json={"text": [text, "Zwei junge Männer spielen auf einer Wiese Fußball."],
                                                  "target": "fr"})  # fmt: skip
        assert [t["detected_source"] for t in r.json()["translations"]] == [name, "de"], r.text
        r = await client.post("/libretranslate/detect", data={"q": text})
        assert r.json()[0]["language"] == name, r.text
    r = await client.post("/translate", json={"text": ["42", "1,299.00"], "target": "fr"})  # no letter: no language
    assert [t["detected_source"] for t in r.json()["translations"]] == ["en", "en"], r.text  # it said Serbian


async def test_deepl_lists_only_the_languages_its_translate_takes(client):
    """DeepL's codes have no script: a language NLLB has in two scripts or kinds is listed once, as the one its code
    means (`AZ`: North Azerbaijani, `KS`: Kashmiri in Arabic script); they were listed, and refused by /v2/translate
    as ambiguous, then left out."""
    listed = {}
    for kind in ("source", "target"):
        r = await client.get("/deepl/v2/languages", params={"type": kind})
        listed[kind] = [x["language"] for x in r.json()]
        named = {x["language"]: x["name"] for x in r.json()}
        assert named["AF"] == "Afrikaans" and named["HNE"] == "Chhattisgarhi"  # each by its name, not its code
        assert not [code for code, name in named.items() if name in (code, code.lower())]
        assert {"AZ", "ACE", "BJN", "KR", "KS", "TAQ"} <= set(listed[kind]), listed[kind]
        assert listed[kind] == sorted(listed[kind]) and len(set(listed[kind])) == len(listed[kind])  # by code, once
    assert {"DE", "FR", "EN"} <= set(listed["source"]) and len(listed["source"]) > 150
    assert {"EN-GB", "EN-US", "ES", "ES-419", "PT-BR", "PT-PT", "ZH", "ZH-HANS", "ZH-HANT"} <= set(listed["target"])
    pairs = (await client.get("/deepl/v2/glossary-language-pairs")).json()["supported_languages"]
    assert {"source_lang": "az", "target_lang": "fr"} in pairs
    glossary = {"name": "g", "source_lang": "az", "target_lang": "fr", "entries": "it\tchien", "entries_format": "tsv"}
    r = await client.post("/deepl/v2/glossaries", data=glossary)
    assert r.status_code == 201, r.text
    r = await client.post("/deepl/v2/translate", json={"text": ["Bir it."], "source_lang": "AZ", "target_lang": "FR",
                                                      "glossary_id": r.json()["glossary_id"]})  # fmt: skip
    assert r.status_code == 200 and "chien" in r.json()["translations"][0]["text"], r.text
    for code in [c for c in listed["target"][::20] if c != "DE"] + ["ES-419", "ZH-HANT"]:
        r = await client.post("/deepl/v2/translate", json={"text": ["Ein Hund."], "source_lang": "DE",
                                                          "target_lang": code})  # fmt: skip
        assert r.status_code == 200, (code, r.text)


async def test_a_glossary_made_with_the_model_s_codes_is_named_by_deepl_as_deepl_names_languages(client):
    """Made through our /glossaries with NLLB's codes, DeepL's API showed it as deu_Latn (its clients, DEU_LATN)."""
    body = {"name": "g", "source_lang": "deu_Latn", "target_lang": "zho_Hant", "entries": {"Hund": "chien"}}
    made = await client.post("/glossaries", json=body)
    assert made.status_code == 201, made.text
    glossary_id = made.json()["glossary_id"]
    info = (await client.get(f"/deepl/v2/glossaries/{glossary_id}")).json()
    assert (info["source_lang"], info["target_lang"]) == ("de", "zh"), info
    listed = (await client.get("/deepl/v2/glossaries")).json()["glossaries"]
    assert {(x["source_lang"], x["target_lang"]) for x in listed if x["glossary_id"] == glossary_id} == {("de", "zh")}
    body = {"text": ["Ein Hund."], "source_lang": "DE", "target_lang": "ZH-HANT", "glossary_id": glossary_id}
    r = await client.post("/deepl/v2/translate", json=body)
    assert r.status_code == 200 and "chien" in r.json()["translations"][0]["text"], r.text


async def test_models_lists_every_language_and_libretranslate_translates_between_any_two(client):
    (entry,) = (await client.get("/models")).json()["models"]
    assert entry["source"] == entry["target"] == "multilingual"
    names = {lang["code"]: lang["name"] for lang in entry["languages"]}
    assert len(names) >= 200
    assert names["deu_Latn"] == "de" and names["zho_Hant"] == "zh-Hant" and names["zho_Hans"] == "zh"
    languages = (await client.get("/libretranslate/languages")).json()
    de = next(lang for lang in languages if lang["code"] == "de")
    assert {"fr", "en", "zh-Hant"} <= set(de["targets"]) and "de" not in de["targets"]
    ours = (await client.post("/translate", json={"text": "Ein Hund.", "source": "de", "target": "fr"})).json()
    libre = await client.post("/libretranslate/translate", json={"q": "Ein Hund.", "source": "de", "target": "fr"})
    assert libre.json()["translatedText"] == ours["translations"][0]["text"]
    auto = (await client.post("/libretranslate/translate", json={"q": "Ein Hund läuft über die Wiese.",
                                                                "source": "auto", "target": "fr"})).json()  # fmt: skip
    assert auto["detectedLanguage"]["language"] == "de"
    same = await client.post("/libretranslate/translate", json={"q": "x", "source": "de", "target": "de"})
    assert same.status_code == 400


def hf_attention(hf, dirs, src: str, tgt: str, text: str, target: str) -> tuple[list[str], list[str], dict]:
    """transformers' tokens and output_attentions for `text` from src into tgt, teacher-forcing `target` after the
    decoder's start and the target language's code: each kind (L, H, Q, K)."""
    tok = transformers.AutoTokenizer.from_pretrained(str(dirs[0]), src_lang=src, tgt_lang=tgt)
    src_ids = tok(text).input_ids
    tgt_ids = [hf.config.decoder_start_token_id, tok.convert_tokens_to_ids(tgt)]
    tgt_ids += tok(text_target=target, add_special_tokens=False).input_ids
    with torch.inference_mode():
        out = hf(input_ids=torch.tensor([src_ids]), decoder_input_ids=torch.tensor([tgt_ids]), output_attentions=True)
    kinds = {"encoder_attention": out.encoder_attentions, "decoder_attention": out.decoder_attentions,
             "cross_attention": out.cross_attentions}  # fmt: skip
    weights = {k: torch.stack([layer[0] for layer in v]) for k, v in kinds.items()}
    return tok.convert_ids_to_tokens(src_ids), tok.convert_ids_to_tokens(tgt_ids), weights


async def test_attention_in_the_requested_languages_is_transformers_output_attentions(client, hf_eager, dirs):
    text, target = "A dog runs across the grass.", "Ein Hund läuft über das Gras."
    body = {"text": text, "target": target}
    r = await client.post("/attention", json={**body, "source_language": "en", "target_language": "deu"})
    assert r.status_code == 200, r.text
    got = r.json()
    encoder_tokens, decoder_tokens, weights = hf_attention(hf_eager, dirs, "eng_Latn", "deu_Latn", text, target)
    assert got["encoder_tokens"] == encoder_tokens and got["encoder_tokens"][0] == "eng_Latn"
    assert got["decoder_tokens"] == decoder_tokens and got["decoder_tokens"][1] == "deu_Latn"
    for kind, theirs in weights.items():
        ours, theirs = torch.tensor(got[kind], dtype=torch.float64), theirs.double()
        assert ours.shape == theirs.shape, kind
        assert torch.allclose(ours, theirs, atol=6e-5), (kind, float((ours - theirs).abs().max()))  # 4 decimals
    default = (await client.post("/attention", json=body)).json()  # the saved pair: deu_Latn -> fra_Latn
    assert (default["encoder_tokens"][0], default["decoder_tokens"][1]) == ("deu_Latn", "fra_Latn")
    assert default["cross_attention"] != got["cross_attention"]
    _, _, saved = hf_attention(hf_eager, dirs, "deu_Latn", "fra_Latn", text, target)
    theirs = saved["cross_attention"].double()
    assert torch.allclose(torch.tensor(default["cross_attention"], dtype=torch.float64), theirs, atol=6e-5)


async def test_attention_of_a_text_without_a_letter_is_the_text_where_the_vocabulary_has_no_piece_for_it(client):
    """Found by black-box testing: this model's vocabulary has no piece for "12 34" (no byte fallback, as NLLB's): its
    tokens are <unk>, and /attention said the translation was "" where /translate gives the text back as written."""
    for text in ("12 34", "!!!"):
        translated = await client.post("/translate", json={"text": text, "source": "auto", "target": "fra_Latn"})
        r = await client.post(
            "/attention", json={"text": text, "source_language": "auto", "target_language": "fra_Latn"}
        )
        assert r.status_code == 200 and translated.status_code == 200, r.text
        assert r.json()["translation"] == translated.json()["translations"][0]["text"] == text, r.json()


async def test_attention_decodes_in_the_requested_target_language_as_translate_does(client):
    text = "Zwei Kinder spielen im Park."
    for languages in ({"source": "de", "target": "en"}, {"source": "auto", "target": "fra_Latn"}):
        translated = await client.post("/translate", json={"text": text, "return_tokens": True, **languages})
        r = await client.post(
            "/attention", json={"text": text, "source_language": languages["source"],
                                "target_language": languages["target"]},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        t = translated.json()["translations"][0]
        assert r.json()["decoder_tokens"][2:] == t["tokens"] and r.json()["translation"] == t["text"]
    english = (await client.post("/attention", json={"text": text, "target_language": "en"})).json()
    french = (await client.post("/attention", json={"text": text, "target_language": "fr"})).json()
    assert english["decoder_tokens"][1] == "eng_Latn" and french["decoder_tokens"][1] == "fra_Latn"
    assert english["decoder_tokens"] != french["decoder_tokens"]


async def test_a_name_of_several_of_the_model_s_languages_means_the_usual_one_or_its_region_s(client):
    """`az` fitted North and South Azerbaijani (a 422 saying it was ambiguous), `ks` two scripts of Kashmiri; `fa-AF`
    (Dari) and `pa-PK` (Punjabi in Shahmukhi) were taken for Iranian Persian and Punjabi in Gurmukhi."""
    for name, code in (("az", "azj_Latn"), ("az-IR", "azb_Arab"), ("fa", "pes_Arab"), ("fa-AF", "prs_Arab"),
                       ("ks", "kas_Arab"), ("ks-Deva", "kas_Deva"), ("kr", "knc_Latn"), ("zh-HK", "zho_Hant")):  # fmt: skip
        r = await client.post("/tokenize", json={"text": "Hallo.", "side": "target", "language": name})
        assert r.status_code == 200 and r.json()["results"][0]["tokens"][0]["text"] == code, (name, r.text)
    r = await client.post("/translate", json={"text": "Ein Hund.", "source": "de", "target": "pa-PK"})
    assert r.status_code == 422 and "it has pan_Guru" in r.json()["error"], r.text


async def test_tokenize_puts_the_requested_language_s_code_where_transformers_does(client, dirs):
    text = "Un chien court dans le parc."
    for side, language, code in (("source", "fr", "fra_Latn"), ("target", "de-DE", "deu_Latn"),
                                 ("source", "auto", "fra_Latn"), ("source", None, "deu_Latn"),
                                 ("target", None, "fra_Latn")):  # fmt: skip
        r = await client.post("/tokenize", json={"text": [text], "side": side, "language": language})
        assert r.status_code == 200, r.text
        tokens = r.json()["results"][0]["tokens"]
        assert (tokens[0]["text"], tokens[0]["special"], tokens[0]["start"], tokens[0]["end"]) == (code, True, 0, 0)
        tok = transformers.AutoTokenizer.from_pretrained(str(dirs[0]), src_lang=code, tgt_lang=code)
        wanted = tok(text).input_ids if side == "source" else tok(text_target=text).input_ids
        assert [t["id"] for t in tokens] == wanted, (side, language)
    bare = await client.post("/tokenize", json={"text": text, "language": "en", "add_special_tokens": False})
    assert not any(t["special"] for t in bare.json()["results"][0]["tokens"])


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/attention", {"target_language": "xx"}, "does not translate target 'xx'; it has 20[0-9] languages"),
        ("/attention", {"source_language": "q!"}, "source 'q!' is not a language code"),
        ("/attention", {"source_language": "de", "target_language": "ks-Latn"}, "target 'ks-Latn' in the Latn"),
        ("/attention", {"source_language": "auto", "text": "   "}, "the text is blank"),
        ("/attention", {"target_language": "auto"}, "target 'auto' is not a language code"),
        ("/attention", {"target_language": ""}, "target_language is empty: send a language code"),
        ("/attention", {"model": "nope", "target_language": "fr"}, "there is no model 'nope'"),
        ("/tokenize", {"language": "xx"}, "does not translate source 'xx'"),
        ("/tokenize", {"language": "pa-Arab", "side": "target"}, "does not write target 'pa-Arab' in the Arab"),
        ("/tokenize", {"language": "auto", "side": "target"}, "target 'auto' is not a language code"),
        ("/tokenize", {"language": "auto", "text": ["", " "]}, "the text is blank"),
    ],
)
async def test_a_language_attention_or_tokenize_does_not_have_is_a_422(client, path, body, message):
    import re

    r = await client.post(path, json={"text": "Ein Hund.", **body})
    assert r.status_code == 422, r.text
    assert r.json()["type"] == "validation_error" and re.search(message, r.json()["error"]), r.json()


NAMES = st.none() | st.text(max_size=12) | st.sampled_from([
    "de", "deu", "deu_Latn", "fr", "fra_Latn", "en", "eng", "zh", "zh-Hant", "zh_TW", "az", "ks", "auto", "__de__",
    "pt-BR", "sr-Latn", "DE", "xx", "", " ", "de\x00", "🙂", "d" * 300,
])  # fmt: skip
BODIES = st.fixed_dictionaries(
    {"text": st.text(max_size=40) | st.lists(st.text(max_size=20), max_size=4)},
    optional={
        "source": NAMES, "target": NAMES, "beam_size": st.integers(0, 3), "return_alignment": st.booleans(),
        "stream": st.booleans(), "format": st.sampled_from(["text", "html"]), "target_prefix": st.text(max_size=8),
        "split": st.sampled_from(["sentences", "none"]), "max_new_tokens": st.integers(-1, BUDGET + 1),
    },
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=BODIES)
async def test_generated_languages_and_options_never_cause_a_5xx(client, body):
    assert_handled(await client.post("/translate", json=body))
    libre = {"q": body["text"] or "x", "source": body.get("source"), "target": body.get("target")}
    assert_handled(await client.post("/libretranslate/translate", json=libre))
    text = body["text"] if isinstance(body["text"], str) else " ".join(body["text"])
    attention = {"text": text, "source_language": body.get("source"), "target_language": body.get("target"),
                 "target": body.get("target_prefix")}  # fmt: skip
    assert_handled(await client.post("/attention", json=attention))
    side = "target" if body.get("return_alignment") else "source"  # either side, by a flag the body has anyway
    tokens = {"text": body["text"], "language": body.get("source"), "side": side}
    assert_handled(await client.post("/tokenize", json=tokens))


async def test_a_glossary_forces_its_terms_in_any_direction_in_one_batch(client):
    """The terms' tokens and the renderings are the target language's: each request's term is in its translation."""
    words = {"de": "Haus", "fr": "maison", "en": "house"}
    bodies = [
        {"text": "Guten Morgen.", "source": "de", "target": "fra", "glossary": {"Morgen": words["fr"]}},
        {"text": "Good morning.", "source": "en", "target": "de", "glossary": {"morning": words["de"]}},
        {"text": "Bonjour.", "source": "fr", "target": "en", "glossary": {"Bonjour": words["en"]}},
    ]
    answers = await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))
    for body, r in zip(bodies, answers):
        assert r.status_code == 200, r.text
        (term,) = body["glossary"].values()
        assert term in r.json()["translations"][0]["text"], (body, r.json())


async def test_a_stored_glossary_of_a_language_the_model_lacks_is_a_422_naming_it(dirs, tmp_path):
    """NLLB has Traditional Chinese, mBART-50 not: a zh-Hant->pt-BR glossary stored for the one, used with the other."""
    (tmp_path / "sources").mkdir()
    mbart = import_all(model_directories(tmp_path / "sources", ("mbart50",)), tmp_path)["mbart50"]
    settings = Settings(
        models=f"nllb={dirs[1]},mbart={mbart}", compile=False, max_new_tokens=BUDGET, max_input_tokens=64
    )
    async with serve_in(MODES[0], settings) as (_, client):
        entries = {"name": "zh", "entries": {"狗": "cão"}, "source_lang": "zh-Hant", "target_lang": "pt-BR"}
        stored = await client.post("/glossaries", json=entries)
        assert stored.status_code == 201, stored.text
        body = {"text": "一隻狗。", "glossary_id": stored.json()["glossary_id"], "model": "mbart"}
        r = await client.post("/translate", json=body)
        assert r.status_code == 422, r.text  # it said "is zh-Hant->pt-BR, but this request is zh-Hant->pt-BR"
        assert "is zh-Hant->pt-BR, and this model does not write source 'zh-Hant' in the Hant" in r.json()["error"]


async def test_a_long_language_name_is_cut_in_the_error_of_every_api(client):
    huge = "a" * 100_000
    for path, body in [
        ("/translate", {"text": "Ein Hund.", "source": huge, "target": "fr"}),
        ("/translate", {"text": "Ein Hund.", "source": "de", "target": huge}),
        ("/tokenize", {"text": "Ein Hund.", "language": huge}),
        ("/deepl/v2/translate", {"text": ["Ein Hund."], "target_lang": huge}),
        ("/deepl/v2/translate", {"text": ["Ein Hund."], "target_lang": "FR-" + huge}),
    ]:
        r = await client.post(path, json=body)
        assert 400 <= r.status_code < 500 and len(r.content) < 2_000, (path, r.status_code, len(r.content))


async def test_deepl_refuses_a_variant_it_does_not_have_and_never_writes_another_script_in_its_place(client):
    for field, code in [("target_lang", "FR-FOOBAR"), ("target_lang", "EN-Arab"), ("source_lang", "DE-NONSENSE")]:
        r = await client.post("/deepl/v2/translate", json={"text": ["Ein Hund."], "target_lang": "FR", field: code})
        assert r.status_code == 400, r.text
        assert f"Value for '{field}' not supported: {code}" in r.json()["message"], r.text
    hans = await client.post("/deepl/v2/translate", json={"text": ["Ein Hund."], "target_lang": "ZH-HANS"})
    hant = await client.post("/deepl/v2/translate", json={"text": ["Ein Hund."], "target_lang": "ZH-HANT"})
    assert hans.status_code == hant.status_code == 200, (hans.text, hant.text)  # NLLB has both scripts
    english = await client.post("/deepl/v2/translate", json={"text": ["Ein Hund."], "target_lang": "EN-GB"})
    assert english.status_code == 200, english.text


async def test_a_prefix_or_term_with_characters_the_model_cannot_write_is_a_422_naming_them(client):
    """NLLB's vocabulary has no byte fallback: forced in, "Ωmega" came back "mega" (its Ω an <unk>)."""
    body = {"text": "Ein Hund läuft.", "source": "de", "target": "fr", "max_new_tokens": 6}
    for extra, what in [({"target_prefix": "Ωmega"}, "target_prefix"), ({"glossary": {"Hund": "Ωmega"}}, "term")]:
        r = await client.post("/translate", json={**body, **extra})
        assert r.status_code == 422, r.text
        assert what in r.json()["error"] and "cannot write ('Ω')" in r.json()["error"], r.text
    r = await client.post("/translate", json={**body, "target_prefix": "mega"})
    assert r.status_code == 200 and r.json()["translations"][0]["text"].startswith("mega"), r.text
