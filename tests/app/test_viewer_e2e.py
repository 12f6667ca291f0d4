"""The attention viewer in a real headless Chromium, against a real `nmt-serve` process on the trained tiny model
(and, for beam search and alignment, on the bundled checkpoint, whose translations are real German).

Needs Debian's `chromium` and `chromium-driver` (scripts/install.sh adds them) and selenium; skips without them.
Screenshots land in test-artifacts/.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import BUNDLED_MODEL_DIR
from tests.app.live import start_server, wait_ready

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the skip below says why
    webdriver = None

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(webdriver is None, reason="selenium is not installed: pip install -e '.[test]'"),
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="the browser tests need Debian's chromium and chromium-driver (scripts/install.sh installs them as root)",
    ),
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SENTENCE = "A dog is running in the park."
KEY = "viewer-test-key"
MAX_INPUT_TOKENS = 20  # small, so an over-long input is easy to type


@pytest.fixture(scope="module")
def servers(trained_checkpoint) -> Iterator[tuple[str, str]]:
    """Two real servers, started together: one with a small input limit, one behind an API key."""
    started = [
        start_server(trained_checkpoint, NMT_MAX_INPUT_TOKENS=str(MAX_INPUT_TOKENS)),
        start_server(trained_checkpoint, NMT_API_KEY=KEY),
    ]
    try:
        for proc, base in started:
            wait_ready(proc, base)
        yield started[0][1], started[1][1]
    finally:
        for proc, _ in started:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(servers) -> str:
    return servers[0]


@pytest.fixture(scope="module")
def keyed_server(servers) -> str:
    return servers[1]


@pytest.fixture(scope="module")
def api(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="nmt-viewer-chromium-")
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def viewport(driver, width: int, height: int) -> None:
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def screenshot(driver, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"viewer-{name}.png"))


def wait_state(driver, *states: str, timeout: float = 30) -> str:
    body = driver.find_element(By.TAG_NAME, "body")
    try:
        WebDriverWait(driver, timeout).until(lambda _: body.get_attribute("data-state") in states)
    except TimeoutException:
        screenshot(driver, "timeout")
        raise AssertionError(f"the page stayed {body.get_attribute('data-state')!r}, expected {states}") from None
    return body.get_attribute("data-state")


def by_id(driver, id_: str):
    return driver.find_element(By.ID, id_)


def open_page(driver, base: str, path: str = "/") -> None:
    viewport(driver, 1280, 800)
    driver.get(base + path)
    driver.execute_script("sessionStorage.clear()")
    driver.get(base + path)
    WebDriverWait(driver, 15).until(lambda d: by_id(d, "model-info").text != "connecting…")


def translate(driver, text: str, reference: str = "", expect: str = "ready") -> None:
    source = by_id(driver, "source")
    source.clear()
    if reference:
        if not by_id(driver, "reference-box").get_attribute("open"):
            driver.find_element(By.CSS_SELECTOR, "#reference-box summary").click()
        by_id(driver, "reference").clear()
        by_id(driver, "reference").send_keys(reference)
    source.send_keys(text, Keys.ENTER)  # Enter translates
    assert wait_state(driver, expect, "error" if expect == "ready" else expect) == expect, by_id(driver, "error").text


def checksum(driver) -> str:
    return by_id(driver, "heatmap").get_attribute("data-checksum")


def hover(driver, row: int, col: int):
    cell = driver.find_element(By.CSS_SELECTOR, f'#heatmap rect.cell[data-row="{row}"][data-col="{col}"]')
    ActionChains(driver).move_to_element(cell).perform()
    tooltip = by_id(driver, "tooltip")
    WebDriverWait(driver, 5).until(lambda _: tooltip.is_displayed() and tooltip.get_attribute("data-col") == str(col))
    assert tooltip.get_attribute("data-row") == str(row)
    return tooltip


@pytest.fixture(scope="module")
def translated(browser, server, api):
    """The page after translating SENTENCE, and the API's own answers for the same text."""
    open_page(browser, server)
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "idle"
    translate(browser, SENTENCE)
    attention = api.post("/attention", json={"text": SENTENCE}).json()
    return browser, attention


def test_translating_shows_the_translation_the_tokens_and_the_heatmap(translated, api):
    driver, attention = translated
    expected = api.post("/translate", json={"text": SENTENCE, "return_tokens": True}).json()["translations"][0]
    assert expected["finish_reason"] == "eos" and expected["text"]
    assert by_id(driver, "translation").text == expected["text"]
    tokens = api.post("/tokenize", json={"text": SENTENCE}).json()["results"][0]["tokens"]
    chips = driver.find_elements(By.CSS_SELECTOR, "#source-tokens li")
    assert [c.text for c in chips] == [t["text"] for t in tokens]  # each piece in its own bordered chip
    targets = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#target-tokens li")]
    assert targets == [*expected["tokens"], "</s>"]

    heatmap = by_id(driver, "heatmap")
    rows, cols = len(attention["decoder_tokens"]), len(attention["encoder_tokens"])
    assert (heatmap.get_attribute("data-kind"), heatmap.get_attribute("data-head")) == ("cross", "avg")
    assert len(heatmap.find_elements(By.CSS_SELECTOR, "rect.cell")) == rows * cols
    row_labels = [e.text for e in heatmap.find_elements(By.CSS_SELECTOR, ".row-label")]
    col_labels = [e.text for e in heatmap.find_elements(By.CSS_SELECTOR, ".col-label")]
    assert row_labels == attention["decoder_tokens"] and col_labels == attention["encoder_tokens"]
    lines = by_id(driver, "headview").find_elements(By.CSS_SELECTOR, "line.hv-line")
    assert lines and all(0 < float(line.get_attribute("stroke-opacity")) <= 1 for line in lines)
    # at 1280x800 both views sit side by side, inside the window
    hm, hv = heatmap.rect, by_id(driver, "headview").rect
    assert hm["x"] + hm["width"] <= hv["x"] and hm["y"] + 200 < 800 and hv["x"] + hv["width"] <= 1280
    screenshot(driver, "translated")


def test_the_translation_s_confidence_shows_and_its_unsure_words_are_marked(translated, api):
    driver, _ = translated
    t = api.post("/translate", json={"text": SENTENCE, "return_word_confidence": True}).json()["translations"][0]
    assert f"confidence {t['confidence']:.2f}" in by_id(driver, "translation-meta").text
    assert [w["text"] for w in t["words"]] == t["text"].split()
    unsure = {w["text"] for w in t["words"] if w["confidence"] < 0.5}
    marked = driver.find_elements(By.CSS_SELECTOR, "#translation span.unsure")
    named = {re.search("the word “(.+)”: probability", m.get_attribute("title")).group(1) for m in marked}
    assert named == unsure
    spans = driver.find_elements(By.CSS_SELECTOR, "#translation span[data-tokens]")
    assert len(spans) > len(marked) or unsure == {w["text"] for w in t["words"]}


def test_switching_kind_layer_and_head_redraws(translated):
    driver, attention = translated
    seen = {checksum(driver)}
    kind, layer, head = (Select(by_id(driver, i)) for i in ("kind", "layer", "head"))
    assert [o.text for o in layer.options] == [str(i) for i in attention["layers"]]
    assert [o.get_attribute("value") for o in head.options] == ["avg", *map(str, range(len(attention["heads"])))]
    S, T = len(attention["encoder_tokens"]), len(attention["decoder_tokens"])
    for value, shape in (("encoder", (S, S)), ("decoder", (T, T)), ("cross", (T, S))):
        kind.select_by_value(value)
        heatmap = by_id(driver, "heatmap")
        assert heatmap.get_attribute("data-kind") == value
        assert (int(heatmap.get_attribute("data-rows")), int(heatmap.get_attribute("data-cols"))) == shape
        seen.add(checksum(driver))
    layer.select_by_value("1")
    seen.add(checksum(driver))
    for h in range(len(attention["heads"])):
        head.select_by_value(str(h))
        seen.add(checksum(driver))
    assert len(seen) == 3 + 1 + len(attention["heads"]), "every selection draws a different matrix"
    assert by_id(driver, "headview").get_attribute("data-checksum") == checksum(driver)
    head.select_by_value("avg")
    layer.select_by_value("0")
    assert checksum(driver) in seen


def test_hovering_a_cell_shows_the_apis_weight(translated, api):
    driver, attention = translated
    Select(by_id(driver, "kind")).select_by_value("cross")
    Select(by_id(driver, "layer")).select_by_value("1")
    Select(by_id(driver, "head")).select_by_value("2")
    row = 2
    weights = attention["cross_attention"][1][2][row]
    col = max(range(len(weights)), key=weights.__getitem__)
    tooltip = hover(driver, row, col)
    assert float(tooltip.get_attribute("data-weight")) == weights[col]
    assert by_id(driver, "tooltip-weight").text == f"{weights[col]:.4f}"
    assert attention["decoder_tokens"][row] in tooltip.text and attention["encoder_tokens"][col] in tooltip.text
    labels = by_id(driver, "heatmap").find_elements(By.CSS_SELECTOR, ".active-label")
    hovered = [attention["decoder_tokens"][row], attention["encoder_tokens"][col]]
    assert sorted(e.text for e in labels) == sorted(hovered)
    # the hovered row's weights, as numbers, in the detail list and in the head view
    numbers = [li.text.split()[-1] for li in driver.find_elements(By.CSS_SELECTOR, "#detail-weights li")]
    assert numbers == [f"{w:.4f}" for w in weights]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#headview .hv-number")) == len(weights)
    screenshot(driver, "hover")

    Select(by_id(driver, "head")).select_by_value("avg")  # the page averages the heads it got
    mean = api.post("/attention", json={"text": SENTENCE, "layers": [1], "average_heads": True}).json()
    tooltip = hover(driver, row, col)
    assert abs(float(tooltip.get_attribute("data-weight")) - mean["cross_attention"][0][0][row][col]) < 2e-4


def test_the_explorer_works_from_the_keyboard(translated):
    driver, _ = translated
    ActionChains(driver).move_to_element(by_id(driver, "translation-title")).perform()  # the mouse out of the way
    Select(by_id(driver, "kind")).select_by_value("encoder")
    heatmap = by_id(driver, "heatmap")
    heatmap.send_keys(Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.ARROW_RIGHT)  # focus puts the cursor on (0, 0)
    tooltip = by_id(driver, "tooltip")
    assert (tooltip.get_attribute("data-row"), tooltip.get_attribute("data-col")) == ("2", "1")
    assert "(row 2)" in by_id(driver, "detail-summary").text
    heatmap.send_keys(Keys.ESCAPE)
    assert not tooltip.is_displayed()
    headview = by_id(driver, "headview")
    headview.send_keys(Keys.ARROW_DOWN, Keys.ARROW_RIGHT)  # query 1, then over to the keys side
    active = headview.find_elements(By.CSS_SELECTOR, ".hv-token.active")
    assert [(g.get_attribute("data-side"), g.get_attribute("data-index")) for g in active] == [("key", "1")]
    assert "Key" in by_id(driver, "detail-summary").text


def test_a_reference_target_is_teacher_forced(translated, api):
    driver, _ = translated
    reference = "Ein Hund rennt im Park."
    translate(driver, SENTENCE, reference=reference)
    forced = api.post("/attention", json={"text": SENTENCE, "target": reference}).json()
    chips = driver.find_elements(By.CSS_SELECTOR, "#reference-tokens li")
    assert [li.text for li in chips] == forced["decoder_tokens"][1:]
    Select(by_id(driver, "kind")).select_by_value("cross")
    Select(by_id(driver, "head")).select_by_value("0")
    heatmap = by_id(driver, "heatmap")
    assert int(heatmap.get_attribute("data-rows")) == len(forced["decoder_tokens"])
    assert "Teacher-forced" in by_id(driver, "explorer-note").text
    layer = int(Select(by_id(driver, "layer")).first_selected_option.get_attribute("value"))
    tooltip = hover(driver, 1, 0)
    assert float(tooltip.get_attribute("data-weight")) == forced["cross_attention"][layer][0][1][0]
    screenshot(driver, "reference")
    by_id(driver, "reference").clear()


def test_a_text_of_several_sentences_shows_the_attention_of_the_translation_shown(translated, api):
    """/translate translates sentence by sentence, /attention the text as one sequence: the heatmap once showed the
    attention of another translation than the one on the page. It is teacher-forced on the one shown."""
    driver, _ = translated
    text = "A dog runs. A cat sits."
    translate(driver, text)
    shown = api.post("/translate", json={"text": text}).json()["translations"][0]["text"]
    assert by_id(driver, "translation").text == shown
    forced = api.post("/attention", json={"text": text, "target": shown}).json()
    assert forced["decoder_tokens"] != api.post("/attention", json={"text": text}).json()["decoder_tokens"]
    assert int(by_id(driver, "heatmap").get_attribute("data-rows")) == len(forced["decoder_tokens"])
    assert "sentence by sentence" in by_id(driver, "explorer-note").text


def test_empty_input_and_api_errors_are_shown(translated, api):
    driver, _ = translated
    by_id(driver, "source").clear()
    by_id(driver, "translate").click()
    assert wait_state(driver, "empty") == "empty"
    assert "Type an English sentence" in by_id(driver, "status").text
    assert not by_id(driver, "error").is_displayed()

    long_text = " ".join(["The big brown dog runs quickly through the green park."] * 3)
    message = api.post("/translate", json={"text": long_text}).json()["error"]
    assert f"the limit is {MAX_INPUT_TOKENS}" in message
    translate(driver, long_text, expect="error")
    assert by_id(driver, "error").is_displayed()
    assert by_id(driver, "error-message").text == message
    assert by_id(driver, "error").get_attribute("data-type") == "input_too_long"
    # /tokenize still answers, so the page shows why: more source tokens than the limit
    assert len(driver.find_elements(By.CSS_SELECTOR, "#source-tokens li")) > MAX_INPUT_TOKENS
    assert "over" in by_id(driver, "source-count").get_attribute("class").split()
    screenshot(driver, "error")

    translate(driver, SENTENCE)  # the next good request clears the error
    assert not by_id(driver, "error").is_displayed()


def test_a_narrow_window_stacks_the_page_without_sideways_scrolling(translated):
    driver, _ = translated
    try:
        viewport(driver, 420, 900)
        WebDriverWait(driver, 5).until(lambda d: by_id(d, "heatmap").rect["width"] <= 420)
        width = driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 420
        src, explorer = by_id(driver, "translate-form").rect, by_id(driver, "explorer").rect
        assert explorer["y"] > src["y"] + src["height"]
        screenshot(driver, "narrow")
    finally:
        viewport(driver, 1280, 800)


BEAM_SENTENCE = "A dog runs on the grass."


def classes(element) -> list[str]:
    return (element.get_attribute("class") or "").split()


def word(driver, scope: str, text: str):
    """The one alignment-linked word (or token chip) in scope that reads text."""
    words = driver.find_elements(By.CSS_SELECTOR, f"{scope} [data-align]")
    found = [e for e in words if e.text == text]
    assert len(found) == 1, (scope, text, [e.text for e in words])
    return found[0]


def aligned(driver, scope: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, f"{scope} [data-align].aligned")]


def hover_word(driver, element) -> None:
    ActionChains(driver).move_to_element(element).perform()
    WebDriverWait(driver, 5).until(lambda _: "hovered" in classes(element))


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[str]:
    """A real server on the bundled English->German checkpoint (not compiled: it is ready in seconds)."""
    if not (BUNDLED_MODEL_DIR / "model.safetensors").exists():
        pytest.skip("no bundled checkpoint")
    proc, base = start_server(BUNDLED_MODEL_DIR, NMT_COMPILE="false")
    try:
        wait_ready(proc, base)
        yield base
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def beam_translated(browser, bundled_server):
    """A fresh page after translating BEAM_SENTENCE with beam size 4 and 3 alternatives, and the API's answer."""
    open_page(browser, bundled_server)
    beam, alternatives = Select(by_id(browser, "beam-size")), Select(by_id(browser, "num-hypotheses"))
    assert [o.get_attribute("value") for o in beam.options] == [str(i) for i in range(1, 9)]
    assert beam.first_selected_option.get_attribute("value") == "1"  # greedy unless asked
    assert [o.text for o in alternatives.options] == ["1"]  # at most the beam size
    beam.select_by_value("4")
    assert [o.text for o in alternatives.options] == ["1", "2", "3", "4"]
    alternatives.select_by_value("3")
    translate(browser, BEAM_SENTENCE)
    request = {"text": BEAM_SENTENCE, "beam_size": 4, "num_hypotheses": 3, "return_tokens": True}
    request["return_alignment"] = True
    r = httpx.post(f"{bundled_server}/translate", json=request, timeout=30)
    assert r.status_code == 200, r.text
    return browser, r.json()["translations"][0], bundled_server


def test_beam_search_lists_the_alternatives_best_first_with_their_scores(beam_translated):
    driver, expected, base = beam_translated
    hypotheses = expected["hypotheses"]
    assert len(hypotheses) == 3
    assert by_id(driver, "alternatives-box").is_displayed()
    items = driver.find_elements(By.CSS_SELECTOR, "#alternatives li")
    assert [li.get_attribute("data-rank") for li in items] == ["0", "1", "2"]
    assert [li.find_element(By.CSS_SELECTOR, ".alt-text").text for li in items] == [h["text"] for h in hypotheses]
    scores = [float(li.get_attribute("data-score")) for li in items]
    assert scores == [h["score"] for h in hypotheses] and scores == sorted(scores, reverse=True)
    assert [li.find_element(By.CSS_SELECTOR, ".alt-score").text for li in items] == [f"{s:.3f}" for s in scores]
    assert by_id(driver, "translation").text == expected["text"] == hypotheses[0]["text"]
    assert "beam 4" in by_id(driver, "translation-meta").text
    # the explorer shows the attention of the beam search's own translation, teacher-forced
    assert "beam search" in by_id(driver, "explorer-note").text
    forced = httpx.post(f"{base}/attention", json={"text": BEAM_SENTENCE, "target": expected["text"], "layers": [0]})
    assert forced.status_code == 200, forced.text
    assert int(by_id(driver, "heatmap").get_attribute("data-rows")) == len(forced.json()["decoder_tokens"])
    screenshot(driver, "beam")


def test_hovering_a_word_highlights_what_it_aligns_with(beam_translated):
    driver, expected, _ = beam_translated
    hund = word(driver, "#translation", "Hund")
    assert "dog" in hund.get_attribute("title")
    hover_word(driver, hund)
    assert "aligned" in classes(word(driver, "#source-text", "dog"))  # the bundled model aligns Hund with dog
    assert aligned(driver, "#source-text") == ["dog"] and aligned(driver, "#source-tokens") == ["▁dog"]
    assert "aligned" in classes(hund) and aligned(driver, "#target-tokens") == ["▁Hund"]
    screenshot(driver, "alignment")

    # a source word: the target words aligned with it, in the translation and in each alternative
    dog = word(driver, "#source-text", "dog")
    hover_word(driver, dog)
    dog_index = BEAM_SENTENCE.index("dog")
    for scope, hyp in [("#translation", expected), *((f"#alternatives li:nth-child({r + 1})", h) for r, h in
                                                     enumerate(expected["hypotheses"]))]:
        want = [hyp["text"][slice(*a["target_span"])] for a in hyp["alignment"] if a["source_span"][0] == dog_index]
        assert "Hund" in want and aligned(driver, scope) == want, scope

    # an alternative's word: the source word its token aligns with
    second = expected["hypotheses"][1]
    link = second["alignment"][2]
    element = driver.find_element(By.CSS_SELECTOR, '#alternatives li:nth-child(2) [data-tokens="2"]')
    assert element.text == second["text"][slice(*link["target_span"])]
    hover_word(driver, element)
    assert aligned(driver, "#source-text") == [BEAM_SENTENCE[slice(*link["source_span"])]]
    assert aligned(driver, "#translation") == [] and aligned(driver, "#alternatives li:nth-child(2)") == [element.text]

    ActionChains(driver).move_to_element(by_id(driver, "translation-title")).perform()  # away: nothing stays lit
    WebDriverWait(driver, 5).until(lambda _: not driver.find_elements(By.CSS_SELECTOR, "#output .aligned"))


def linked_words(driver, scope: str) -> list[tuple[str, list[int], str, bool]]:
    """scope's alignment-linked words as the page holds them: (text, token indices, title, whether the text or the
    title holds a lone UTF-16 surrogate, half an astral character: sent back as U+FFFD, which WebDriver can carry)."""
    found = driver.execute_script(
        "const lone = /[\\uD800-\\uDBFF](?![\\uDC00-\\uDFFF])|(?<![\\uD800-\\uDBFF])[\\uDC00-\\uDFFF]/g;"
        "const carry = (s) => s.replace(lone, '\\uFFFD');"
        "return [...document.querySelectorAll(arguments[0] + ' [data-align]')].map((e) => [carry(e.textContent),"
        "  e.dataset.tokens, carry(e.title), carry(e.textContent) !== e.textContent || carry(e.title) !== e.title]);",
        scope,
    )
    return [(text, [int(i) for i in tokens.split()], title, lone) for text, tokens, title, lone in found]


def overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def span(token: dict) -> tuple[int, int]:
    return token["start"], token["end"]


@pytest.mark.parametrize("text", ["A 😀 dog runs on the grass.", "😀! A dog runs on the grass."],
                         ids=["emoji-inside", "emoji-first"])  # fmt: skip
def test_words_after_an_emoji_are_whole_words(browser, bundled_server, text):
    """The API's character offsets count code points (Python's string indices); a JavaScript string counts UTF-16
    code units, two for an emoji. The page once sliced with the API's offsets as they came: every word after an
    emoji read one character early (" do" for "dog"), the emoji was cut into lone surrogates, and the translation's
    titles quoted the wrong source characters. ("😀! …" comes back with the emoji in the translation too.)"""
    open_page(browser, bundled_server)
    translate(browser, text)
    tokens = httpx.post(f"{bundled_server}/tokenize", json={"text": text}).json()["results"][0]["tokens"]
    request = {"text": text, "return_alignment": True}
    t = httpx.post(f"{bundled_server}/translate", json=request, timeout=30).json()["translations"][0]
    source = linked_words(browser, "#source-text")
    for shown, ids, _, lone in source:  # each word the characters of its tokens, in code points
        start, end = min(tokens[i]["start"] for i in ids), max(tokens[i]["end"] for i in ids)
        assert not lone and shown == text[start:end], (shown, ids)
    assert {"😀", "dog", "runs", "grass"} <= {shown for shown, *_ in source}
    assert by_id(browser, "source-text").text == text.strip()
    target = linked_words(browser, "#translation")
    assert len(target) == len(t["alignment"])
    for a in t["alignment"]:
        ((shown, _, title, lone),) = [w for w in target if a["target_token"] in w[1]]
        assert not lone and shown == t["text"][slice(*a["target_span"])], (shown, a)
        assert f"aligned to “{text[slice(*a['source_span'])]}”" in title, (title, a)
    grass = word(browser, "#source-text", "grass")
    hover_word(browser, grass)
    assert "Gras" in aligned(browser, "#translation")


@pytest.mark.parametrize("text", ["A woman walks down a busy street. A dog follows her.", "  A dog runs on the grass."],
                         ids=["two-sentences", "leading-spaces"])  # fmt: skip
def test_a_target_word_highlights_the_source_word_its_alignment_names(browser, bundled_server, text):
    """An alignment's source_token counts the tokens of the text's pieces (each sentence encoded on its own, without
    its outer whitespace, with its own </s>), not /tokenize's tokens, which the page shows. The page once joined them
    by that index: after a first sentence, hovering "Hund" lit "follows"; after leading spaces, every word lit the
    word before its own. The page matches the alignment's source_span to the tokens' spans instead."""
    open_page(browser, bundled_server)
    translate(browser, text)
    tokens = httpx.post(f"{bundled_server}/tokenize", json={"text": text}).json()["results"][0]["tokens"]
    request = {"text": text, "return_alignment": True}
    t = httpx.post(f"{bundled_server}/translate", json=request, timeout=30).json()["translations"][0]
    hover_word(browser, word(browser, "#translation", "Hund"))
    assert aligned(browser, "#source-text") == ["dog"] and aligned(browser, "#source-tokens") == ["▁dog"]

    links: dict[int, list] = {}  # target token -> the source spans it aligns to
    for a in t["alignment"]:
        links.setdefault(a["target_token"], []).append(a["source_span"])
    for element in browser.find_elements(By.CSS_SELECTOR, "#translation [data-align]"):
        spans = [s for i in element.get_attribute("data-tokens").split() for s in links.get(int(i), [])]
        lit = [tok for tok in tokens if not tok["special"] and any(overlaps(span(tok), s) for s in spans)]
        hover_word(browser, element)
        assert aligned(browser, "#source-tokens") == [tok["text"] for tok in lit], element.text
        assert aligned(browser, "#source-text") == [text[tok["start"]:tok["end"]] for tok in lit], element.text

    # and back: the source word "dog" lights the target words aligned to its characters
    hover_word(browser, word(browser, "#source-text", "dog"))
    dog = (text.index("dog"), text.index("dog") + 3)
    want = [t["text"][slice(*a["target_span"])] for a in t["alignment"] if overlaps(a["source_span"], dog)]
    assert "Hund" in want and aligned(browser, "#translation") == want


def test_the_page_asks_for_the_api_key_and_sends_it(browser, keyed_server):
    driver = browser
    open_page(driver, keyed_server, "/viewer")
    panel = by_id(driver, "key-panel")
    assert panel.is_displayed() and "the API key is missing" in by_id(driver, "key-message").text
    assert driver.switch_to.active_element == by_id(driver, "api-key")
    by_id(driver, "api-key").send_keys("wrong", Keys.ENTER)
    WebDriverWait(driver, 10).until(lambda _: "the API key is wrong" in by_id(driver, "key-message").text)
    screenshot(driver, "api-key")

    by_id(driver, "api-key").send_keys(KEY, Keys.ENTER)
    WebDriverWait(driver, 10).until(lambda _: not panel.is_displayed())
    # the panel hides at once; /info, now sent with the key, answers a moment later
    WebDriverWait(driver, 10).until(lambda _: "layers" in by_id(driver, "model-info").text)
    assert driver.execute_script("return sessionStorage.getItem('nmt-serve-api-key')") == KEY
    translate(driver, SENTENCE)
    assert by_id(driver, "translation").text
    assert by_id(driver, "heatmap").get_attribute("data-checksum")

    by_id(driver, "key-button").click()  # forget the key: the next call is refused and the prompt returns
    WebDriverWait(driver, 10).until(lambda _: panel.is_displayed())
    assert driver.execute_script("return sessionStorage.getItem('nmt-serve-api-key')") is None


def test_an_imported_model_s_languages_name_the_fields_and_its_translation_shows(browser, marian_models, tmp_path):
    """An imported Marian model, its metadata saying French to Italian: the page names those languages."""
    import json

    ckpt = tmp_path / "marian"
    shutil.copytree(marian_models["shared"][1], ckpt)
    meta = json.loads((ckpt / "metadata.json").read_text())
    (ckpt / "metadata.json").write_text(json.dumps({**meta, "source_language": "fr", "target_language": "it"}))
    proc, base = start_server(ckpt)
    try:
        wait_ready(proc, base)
        open_page(browser, base)
        assert by_id(browser, "source-label").text == "French sentence"
        assert by_id(browser, "target-name").get_attribute("textContent") == "Italian"  # in the closed <details>
        assert by_id(browser, "source").get_attribute("lang") == "fr"
        by_id(browser, "source").clear()
        by_id(browser, "translate").click()
        assert wait_state(browser, "empty") == "empty"
        assert "Type a French sentence" in by_id(browser, "status").text
        translate(browser, "Un chien court.")
        expected = httpx.post(f"{base}/translate", json={"text": "Un chien court."}).json()["translations"][0]["text"]
        assert by_id(browser, "translation").text == " ".join(expected.split())  # the page's text, as rendered
        screenshot(browser, "imported-model")
    finally:
        proc.kill()
        proc.wait()


def test_a_many_to_many_model_s_languages_are_picked_and_every_call_names_them(browser, tmp_path_factory,
                                                                               trained_checkpoint):  # fmt: skip
    """An imported NLLB-layout model beside a pair model: the page offers its languages (the source detected, the
    target the saved one at first), and the tokens, translation and attention it shows are the API's for the
    languages picked; the pair model, picked, is translated with."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from tests.importers.multilingual_fixture import import_all, model_directories

    sources = model_directories(tmp_path_factory.mktemp("sources"), ("nllb",))
    ckpt = import_all(sources, tmp_path_factory.mktemp("imported"))["nllb"]
    proc, base = start_server(ckpt, NMT_MAX_NEW_TOKENS="12", NMT_MAX_INPUT_TOKENS="64",
                              NMT_MODELS=f"nllb={ckpt},pair={trained_checkpoint}")  # fmt: skip
    try:
        wait_ready(proc, base)
        open_page(browser, base)
        picker = Select(by_id(browser, "model-select"))
        assert by_id(browser, "model-picker").is_displayed() and [o.text for o in picker.options] == ["nllb", "pair"]
        assert picker.first_selected_option.text == "nllb" and by_id(browser, "model-info").text.startswith("nllb")
        assert by_id(browser, "language-controls").is_displayed()
        source, target = Select(by_id(browser, "source-language")), Select(by_id(browser, "target-language"))
        assert source.first_selected_option.get_attribute("value") == "auto"
        assert target.first_selected_option.get_attribute("value") == "fra_Latn"  # the saved tgt_lang
        assert len(target.options) >= 200 and len(source.options) == len(target.options) + 1
        assert by_id(browser, "source-label").text == "Sentence"
        source.select_by_value("eng_Latn")
        target.select_by_value("deu_Latn")
        assert by_id(browser, "source-label").text == "English sentence"
        assert by_id(browser, "target-name").get_attribute("textContent") == "German"
        assert by_id(browser, "source").get_attribute("lang") == "en"
        text = "A dog runs."
        translate(browser, text)
        languages = {"source": "eng_Latn", "target": "deu_Latn"}
        r = httpx.post(f"{base}/translate", json={"text": text, "return_tokens": True, **languages})
        expected = r.json()["translations"][0]
        assert by_id(browser, "translation").text == (" ".join(expected["text"].split()) or "(empty)")
        targets = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#target-tokens li")]
        assert targets == expected["tokens"] + ["</s>"] * (expected["finish_reason"] == "eos")
        chips = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#source-tokens li")]
        tokens = httpx.post(f"{base}/tokenize", json={"text": text, "language": "en"}).json()["results"][0]["tokens"]
        assert chips == [t["text"] for t in tokens] and chips[0] == "eng_Latn"
        assert "special" in classes(browser.find_element(By.CSS_SELECTOR, "#source-tokens li")), "a code is no word"
        attention = httpx.post(f"{base}/attention", json={
            "text": text, "source_language": "eng_Latn", "target_language": "deu_Latn",
        }).json()  # fmt: skip
        heatmap = by_id(browser, "heatmap")
        assert [e.text for e in heatmap.find_elements(By.CSS_SELECTOR, ".col-label")] == attention["encoder_tokens"]
        assert int(heatmap.get_attribute("data-rows")) == len(attention["decoder_tokens"])
        assert attention["decoder_tokens"][1] == "deu_Latn"
        assert "decoder rows are </s>, the target language's code and" in by_id(browser, "explorer-note").text.lower()
        screenshot(browser, "many-to-many")

        source.select_by_value("auto")  # detected: the German text's code
        translate(browser, "Zwei Hunde spielen im Schnee.")
        assert browser.find_element(By.CSS_SELECTOR, "#source-tokens li").text == "deu_Latn"
        assert by_id(browser, "source-label").text == "Sentence"

        picker.select_by_visible_text("pair")  # the pair model: no language pickers, every call names it
        WebDriverWait(browser, 15).until(lambda d: by_id(d, "model-info").text.startswith("pair"))
        assert not by_id(browser, "language-controls").is_displayed()
        translate(browser, SENTENCE)
        r = httpx.post(f"{base}/translate", json={"text": SENTENCE, "model": "pair", "return_tokens": True})
        expected = r.json()["translations"][0]
        assert by_id(browser, "translation").text == (" ".join(expected["text"].split()) or "(empty)")
        targets = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#target-tokens li")]
        assert targets == expected["tokens"] + ["</s>"] * (expected["finish_reason"] == "eos")
        picker.select_by_visible_text("nllb")
        WebDriverWait(browser, 15).until(lambda d: by_id(d, "language-controls").is_displayed())
    finally:
        proc.kill()
        proc.wait()

