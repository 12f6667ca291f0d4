"""Hostile bodies for a live server: tests/app/test_hostile.py sends them over a real socket, and bench/chaos.py's
`hostile` scenario replays them."""

LIBRE, DEEPL = "/libretranslate", "/deepl"
DEEP = 5000

LIVE = [  # (path, body, content type, status)
    ("/translate", b'{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}", "application/json", 422),
    ("/translate", b'{"text": "\\ud800 dog </s>"}', "application/json", 200),
    ("/translate", b'{"text": "\xed\xa0\x80"}', "application/json", 200),
    ("/tokenize", b'{"text": "\xff"}', "application/json", 422),
    ("/tokenize", b'{"text": "a\x00"}', "application/json", 422),
    ("/attention", b'{"text": "a", "target": "\\udfff"}', "application/json", 200),
    ("/detokenize", b'{"ids": [' + b"9" * 5000 + b"]}", "application/json", 422),
    ("/translate", b"", "application/json", 422),
    ("/translate", b'{"text": "a"}', "text/plain", 422),
    (f"{LIBRE}/translate", b'{"q": ' + b"[" * DEEP + b"]" * DEEP + b"}", "application/json", 400),
    (f"{LIBRE}/translate", b'{"q": "\\ud800", "source": "en", "target": "\\ud800"}', "application/json", 400),
]
