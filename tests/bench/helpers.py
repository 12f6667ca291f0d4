"""What the tests of the bench scripts share: a few sentences to translate."""

SENTENCES = ["A dog runs in the park.", "Two men play chess.", "A girl in a red dress.", "People walk.", "A cat."]
